#include "multiworld/world_manager.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <mutex>
#include <thread>

#include "backend/work_state.h"
#include "base/thread_name.h"
#include "multiworld/telemetry_lines.h"
#include "nccl/nccl_backend.h"
#include "worlds/manager_impl.h"

namespace mw {

namespace {
// How long ~WorldManager waits for NCCL communicators still being aborted.
constexpr auto kNcclAbortsAtExit = std::chrono::seconds(2);
}  // namespace

const char* backendName(BackendKind b) {
  switch (b) {
    case BackendKind::kGloo:
      return "gloo";
    case BackendKind::kNccl:
      return "nccl";
  }
  return "unknown";
}

Result<BackendKind> parseBackend(const std::string& name) {
  if (name == "gloo") return BackendKind::kGloo;
  if (name == "nccl") return BackendKind::kNccl;
  return Status(Code::kInvalidArgument, "unknown backend '" + name + "' (expected gloo or nccl)");
}

const char* cudaWaitName(CudaWait w) {
  switch (w) {
    case CudaWait::kStream:
      return "stream";
    case CudaWait::kHost:
      return "host";
  }
  return "unknown";
}

Result<CudaWait> parseCudaWait(const std::string& name) {
  if (name == "stream") return CudaWait::kStream;
  if (name == "host") return CudaWait::kHost;
  return Status(Code::kInvalidArgument,
                "unknown cuda_wait '" + name + "' (expected stream or host)");
}

const char* worldStateName(WorldState s) {
  switch (s) {
    case WorldState::kJoining:
      return "joining";
    case WorldState::kHealthy:
      return "healthy";
    case WorldState::kBroken:
      return "broken";
    case WorldState::kRemoved:
      return "removed";
  }
  return "unknown";
}

const char* eventKindName(WorldEvent::Kind k) {
  switch (k) {
    case WorldEvent::Kind::kCreated:
      return "created";
    case WorldEvent::Kind::kBroken:
      return "broken";
    case WorldEvent::Kind::kRemoved:
      return "removed";
  }
  return "unknown";
}

namespace detail {

std::optional<WorldEvent> SubscriptionImpl::next(Deadline deadline) {
  MutexLock lock(mu_);
  if (!cv_.wait_until(lock.native(), deadline,
                      [&]() MW_REQUIRES(mu_) { return !events_.empty(); })) {
    return std::nullopt;
  }
  WorldEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void SubscriptionImpl::push(const WorldEvent& e) {
  {
    MutexLock lock(mu_);
    events_.push_back(e);
  }
  cv_.notify_all();
}

}  // namespace detail

bool validWorldName(std::string_view n) {
  if (n.empty() || n.size() > 128) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

namespace {

Status invalid(const std::string& what) { return Status(Code::kInvalidArgument, what); }

Status validate(const WorldOptions& o) {
  using std::chrono::milliseconds;
  if (!validWorldName(o.name)) {
    return invalid("world name '" + o.name + "' must be 1-128 characters of [A-Za-z0-9_.-]");
  }
  const std::string w = "world '" + o.name + "': ";
  if (o.size < 1 || o.size > kMaxWorldSize) {
    return invalid(w + "size " + std::to_string(o.size) + " must be between 1 and " +
                   std::to_string(kMaxWorldSize));
  }
  if (o.rank < 0 || o.rank >= o.size) {
    return invalid(w + "rank " + std::to_string(o.rank) + " is out of range for size " +
                   std::to_string(o.size));
  }
  if (o.heartbeat_timeout < milliseconds(50) || o.heartbeat_timeout > std::chrono::hours(1)) {
    return invalid(w + "heartbeat_timeout " + std::to_string(o.heartbeat_timeout.count()) +
                   " ms must be between 50 ms and 1 h");
  }
  if (o.op_timeout < milliseconds(1) || o.op_timeout > std::chrono::hours(24 * 30)) {
    return invalid(w + "op_timeout " + std::to_string(o.op_timeout.count()) +
                   " ms must be between 1 ms and 30 days");
  }
  if (o.executor_grace < std::chrono::microseconds(0) ||
      o.executor_grace > std::chrono::seconds(10)) {
    return invalid(w + "executor_grace " + std::to_string(o.executor_grace.count()) +
                   " us must be between 0 and 10 s");
  }
  if (o.cuda_wait != CudaWait::kStream && o.cuda_wait != CudaWait::kHost) {
    return invalid(w + "cuda_wait " + std::to_string(static_cast<int>(o.cuda_wait)) +
                   " is neither stream nor host");
  }
  if (o.store.host.empty()) return invalid(w + "store host is empty");
  if (o.store.port == 0 && !(o.rank == 0 && o.host_store)) {
    return invalid(w + "store port 0 is only allowed at rank 0 when it hosts the store");
  }
  if (o.backend == BackendKind::kGloo && o.device.kind != Device::Kind::kCpu) {
    return invalid(w + "device " + o.device.str() + ": the gloo backend moves CPU tensors only " +
                   "(use the nccl backend for cuda devices)");
  }
  if (o.backend == BackendKind::kNccl && o.device.kind != Device::Kind::kCuda) {
    return invalid(w + "device " + o.device.str() + ": the nccl backend needs a cuda:N device");
  }
  if (o.device.kind == Device::Kind::kCuda && o.device.index < 0) {
    return invalid(w + "device " + o.device.str() + " has a negative index");
  }
  if (o.backend != BackendKind::kGloo && o.backend != BackendKind::kNccl) {
    return invalid(w + "unknown backend " + std::to_string(static_cast<int>(o.backend)));
  }
  return Status::Ok();
}

}  // namespace

WorldManager::Impl::Impl()
    : watchdog_(std::make_unique<detail::Watchdog>()),
      telemetry_(detail::Telemetry::fromEnvironment(telemetry_source_)) {}

std::pair<uint64_t, bool> WorldManager::Impl::TelemetrySource::worldState(
    const std::string& name) const {
  auto w = manager.find(name);
  if (!w) return {0, false};
  return {w->generation(), w->state() == WorldState::kHealthy};
}

std::string WorldManager::Impl::TelemetrySource::joinedWith(const std::string& name,
                                                            uint64_t generation) const {
  auto w = manager.find(name);
  if (!w || w->generation() != generation) return "";
  return telemetry_lines::optionsText(w->options());
}

std::shared_ptr<Subscription> WorldManager::Impl::TelemetrySource::subscribe() {
  return manager.addSubscription();
}

std::shared_ptr<detail::SubscriptionImpl> WorldManager::Impl::addSubscription() {
  auto s = std::make_shared<detail::SubscriptionImpl>();
  MutexLock lock(subs_mu_);
  subs_.push_back(s);
  return s;
}

WorldManager::Impl::~Impl() {
  {
    // Joins still running are cancelled: they end at their next wait (World::cancelJoin).
    MutexLock lock(mu_);
    for (auto& [name, w] : worlds_) {
      if (w->state() == WorldState::kJoining) w->cancelJoin();
    }
  }
  {
    MutexLock lock(async_mu_);
    async_.clear();  // joins the threads of initWorldAsync
  }
  std::vector<std::string> names;
  {
    MutexLock lock(mu_);
    for (auto& [name, w] : worlds_) names.push_back(name);
  }
  for (auto& n : names) remove(n).ignore();
  // NCCL communicators still being aborted (each on its thread: one may wait for another world's
  // stuck kernel) get a bounded while to finish, so that a program that ends after its manager
  // rarely exits under an abort; past it they are left to finish alone.
  detail::waitForNcclAborts(deadlineIn(kNcclAbortsAtExit));
  telemetry_.reset();  // after the removals: their events are reported
  watchdog_.reset();
}

std::shared_ptr<detail::World> WorldManager::Impl::find(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = worlds_.find(name);
  return it == worlds_.end() ? nullptr : it->second;
}

void WorldManager::Impl::emit(WorldEvent event) {
  MutexLock lock(subs_mu_);
  std::erase_if(subs_, [&](const std::weak_ptr<detail::SubscriptionImpl>& w) {
    auto s = w.lock();
    if (!s) return true;
    s->push(event);
    return false;
  });
}

// A Gloo world's member holds a socket per other member, and Gloo listens on another per pair
// while they connect: a world too large for the process's descriptor limit is refused up front,
// rather than failing deep in the rendezvous (or making every other world of the process fail to
// open a socket).
Status checkDescriptors(const WorldOptions& o) {
  if (o.backend != BackendKind::kGloo || o.size <= 64) return Status::Ok();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return Status::Ok();
  }
  size_t open = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++open;
    ::closedir(d);
  }
  const size_t need = 2 * static_cast<size_t>(o.size - 1) + 16;
  if (open + need <= limit.rlim_cur) return Status::Ok();
  return Status(Code::kUnavailable,
                "world '" + o.name + "': a gloo world of size " + std::to_string(o.size) +
                    " needs about " + std::to_string(need) +
                    " file descriptors; this process has " + std::to_string(open) +
                    " open and may open " + std::to_string(limit.rlim_cur) +
                    " (RLIMIT_NOFILE: raise it with ulimit -n)");
}

Result<std::shared_ptr<detail::World>> WorldManager::Impl::reserve(const WorldOptions& o) {
  MW_RETURN_IF_ERROR(validate(o));
  MW_RETURN_IF_ERROR(checkDescriptors(o));
  MW_RETURN_IF_ERROR(watchdog_->startStatus());
  MutexLock lock(mu_);
  if (auto it = worlds_.find(o.name); it != worlds_.end()) {
    return Status(Code::kInvalidUsage, "world '" + o.name + "' already exists (state " +
                                           worldStateName(it->second->state()) +
                                           "); remove it before initializing it again");
  }
  auto w = std::make_shared<detail::World>(o, ++generations_[o.name], this);
  if (telemetry_) w->counters = telemetry_->counters(o.name);
  worlds_[o.name] = w;
  return w;
}

void WorldManager::Impl::release(const std::shared_ptr<detail::World>& world) {
  MutexLock lock(mu_);
  auto it = worlds_.find(world->options().name);
  if (it != worlds_.end() && it->second == world) worlds_.erase(it);
}

Status WorldManager::Impl::join(const std::shared_ptr<detail::World>& world, Deadline deadline) {
  Status s = world->connect(deadline, [&] { watchdog_->addJoining(world); });
  if (!s.ok()) {
    watchdog_->remove(world.get());  // before the link goes
    world->teardown();
    release(world);
    world->joinEnded();
    if (world->joinCancelled()) {
      return Status(Code::kAborted,
                    "world '" + world->options().name + "' was removed while it was joining");
    }
    return s;
  }
  world->markHealthy();
  watchdog_->add(world);
  world->joinEnded();
  return Status::Ok();
}

Status WorldManager::Impl::init(const WorldOptions& options, Deadline deadline) {
  auto w = reserve(options);
  if (!w.ok()) return w.status();
  return join(w.value(), deadline);
}

Work WorldManager::Impl::initAsync(const WorldOptions& options, Deadline deadline) {
  auto w = reserve(options);
  if (!w.ok()) return Work::done(options.name, w.status());
  auto state = std::make_shared<detail::WorkState>(options.name);
  auto done = std::make_shared<std::atomic<bool>>(false);
  MutexLock lock(async_mu_);
  std::erase_if(async_, [](const AsyncInit& a) { return a.done->load(); });  // joins them
  async_.push_back({done, std::jthread([this, world = w.value(), state, deadline, done] {
                      detail::nameThisThread("mw-join", world->options().name);
                      state->complete(join(world, deadline));
                      done->store(true);
                    })});
  return detail::WorkAccess::make(state);
}

Status WorldManager::Impl::remove(const std::string& name) {
  std::shared_ptr<detail::World> w;
  bool joining = false;
  {
    MutexLock lock(mu_);
    auto it = worlds_.find(name);
    if (it == worlds_.end() || removing_.count(name)) {
      return Status(Code::kNotFound, "no world named '" + name + "'");
    }
    w = it->second;
    joining = w->state() == WorldState::kJoining;
    if (joining) {
      // Cancelled: its initialization ends with kAborted at its next wait, and frees the name.
      w->cancelJoin();
    } else {
      removing_.insert(name);
    }
  }
  if (joining) {
    w->waitJoinEnded();
    // It may have come up just before the cancel: then it is still here, and removed as usual.
    if (find(name) == w) return remove(name);
    return Status::Ok();
  }
  watchdog_->remove(w.get());
  w->teardown();
  {
    MutexLock lock(mu_);
    removing_.erase(name);
    worlds_.erase(name);
  }
  emit({WorldEvent::Kind::kRemoved, name, w->generation(), std::nullopt, Clock::now()});
  return Status::Ok();
}

namespace {

// Gloo writes with writev, which cannot ask for MSG_NOSIGNAL: a write to a connection its peer
// has closed (a member died, or aborted its side of a broken world) would raise SIGPIPE, whose
// default action kills the whole process and every other world in it. Like Python (where Gloo
// usually runs), ignore it, so the write fails with EPIPE and breaks only its own world. A handler
// the program installed itself is left alone.
void ignoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

WorldManager::WorldManager() : impl_(std::make_unique<Impl>()) { ignoreSigpipeUnlessHandled(); }
WorldManager::~WorldManager() = default;

Status WorldManager::initWorld(const WorldOptions& options, Deadline deadline) {
  return impl_->init(options, deadline);
}

Work WorldManager::initWorldAsync(const WorldOptions& options, Deadline deadline) {
  return impl_->initAsync(options, deadline);
}

Status WorldManager::removeWorld(const std::string& name) { return impl_->remove(name); }

std::vector<WorldInfo> WorldManager::worlds() const {
  MutexLock lock(impl_->mu_);
  std::vector<WorldInfo> out;
  for (const auto& [name, w] : impl_->worlds_) out.push_back(w->info());
  return out;
}

Result<WorldInfo> WorldManager::world(const std::string& name) const {
  auto w = impl_->find(name);
  if (!w) return Status(Code::kNotFound, "no world named '" + name + "'");
  return w->info();
}

Result<uint16_t> WorldManager::storePort(const std::string& name, Deadline deadline) const {
  // The port is set by the join thread a moment after initWorldAsync returns; a short poll is
  // the whole cost (callers do this once per world, before starting its other members).
  for (;;) {
    auto w = impl_->find(name);
    if (!w) return Status(Code::kNotFound, "no world named '" + name + "'");
    if (uint16_t port = w->info().store_port; port != 0) return port;
    if (w->state() != WorldState::kJoining) {
      return Status(Code::kInvalidUsage, "world '" + name + "' has no store port: its " +
                                             "initialization failed before the store was bound");
    }
    if (Clock::now() >= deadline) {
      return Status(Code::kTimeout, "world '" + name + "': no store port before the deadline");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::shared_ptr<Subscription> WorldManager::subscribe() { return impl_->addSubscription(); }

}  // namespace mw
