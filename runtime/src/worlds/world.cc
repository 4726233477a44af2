#include "worlds/world.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "base/failpoint.h"
#include "store/join_keys.h"
#include "worlds/backend_factory.h"

namespace mw::detail {

namespace {

// How long the store's host, going, keeps its store for the other members to read what it last
// said (its leave, or why the join barrier shut): half the heartbeat timeout, 100 ms to 1 s.
Deadline hostLingerDeadline(const WorldOptions& o) {
  return deadlineIn(std::clamp<Clock::duration>(
      o.heartbeat_timeout / 2, std::chrono::milliseconds(100), std::chrono::seconds(1)));
}

// The local address of a connected socket: the interface this host uses to reach the store, which
// is the one the world's peers can reach us on.
std::string localAddress(int fd, const std::string& fallback) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET) {
    return fallback;
  }
  char buf[INET_ADDRSTRLEN];
  return ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf)) ? std::string(buf) : fallback;
}

}  // namespace

World::World(WorldOptions options, uint64_t generation, WorldSink* sink)
    : options_(std::move(options)),
      generation_(generation),
      sink_(sink),
      cancel_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  store_port_.store(options_.store.port);
}

void World::cancelJoin() {
  join_cancelled_.store(true);
  uint64_t one = 1;
  if (cancel_fd_.valid()) (void)!::write(cancel_fd_.get(), &one, sizeof(one));
}

void World::joinEnded() {
  MutexLock lock(mu_);
  join_ended_ = true;
  join_cv_.notify_all();
}

void World::waitJoinEnded() {
  MutexLock lock(mu_);
  join_cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) { return join_ended_; });
}

World::~World() { teardown(); }

Status World::connect(Deadline deadline, const std::function<void()>& linked) {
  const auto& o = options_;
  // Every wait for the store below (the rendezvous' included) ends when cancelJoin() is called.
  store::CancelScope cancellable(cancel_fd_.get());
  if (!cancel_fd_.valid()) {
    return Status(Code::kIoError,
                  "world '" + o.name + "': cannot create an eventfd: " + store::errnoText(errno));
  }
  if (joinCancelled()) return Status(Code::kAborted, "cancelled");
  // Before anything is started: a GPU world on a machine that cannot run it fails at once.
  if (Status s = checkBackendAvailable(o); !s.ok()) {
    return Status(s.code(), "world '" + o.name + "': " + s.message());
  }
  StoreAddress addr = o.store;
  if (o.rank == 0 && o.host_store) {
    StoreServerOptions so;
    so.host = o.store.host;
    so.port = o.store.port;
    so.token = o.token;
    so.world_name = o.name;
    so.world_size = o.size;
    so.heartbeat_timeout = o.heartbeat_timeout;
    // Each member holds two connections (its link and its key-value client), kept room for
    // until it joins: a world of any size fits, with room for other clients beside.
    so.max_connections = std::max(so.max_connections, 2 * static_cast<size_t>(o.size) + 64);
    auto server = StoreServer::start(so);
    if (!server.ok()) return server.status();
    server_ = std::move(server).value();
    addr.port = server_->port();
    store_port_.store(addr.port);
  }
  auto client = connectMemberClient(addr, o.token, o.name, o.size, o.rank, deadline, o.name);
  if (!client.ok()) return client.status();
  client_ = std::move(client).value();
  auto link =
      MemberLink::join(addr, o.token, o.name, o.size, o.rank, deadline, o.heartbeat_timeout);
  if (!link.ok()) return link.status();
  link_ = std::move(link).value();
  linked();

  BackendErrorHandler on_error = [this](Cause cause, int peer, const std::string& detail) {
    breakWorld(cause, peer, detail);
    // An operation that fails while a leaving member's grace runs (its connection to that member
    // closed before its data came) ends the grace: nothing is gained by waiting longer.
    endDrain();
    return notHealthyStatus();  // the first cause wins, whichever thread saw it
  };
  Result<std::shared_ptr<Backend>> backend = createBackend(
      o, localAddress(link_->fd(), o.store.host), *client_, std::move(on_error), deadline);
  if (!backend.ok()) return backend.status();
  backend_ = std::move(backend).value();
  return joinBarrier(deadline);
}

Status World::joinBarrier(Deadline deadline) {
  // The join contract (docs/design.md, "A world's life"): a member's join returns only once every
  // member's connections are up, so that one leaving at once breaks a world that formed at every
  // other member (peer_left) and fails no join. Each member counts itself in once its backend is
  // connected; the last one in opens the barrier. Rank 0 hosts the store, which goes with it:
  // it returns last, once every other member has counted itself through.
  const auto& o = options_;
  if (o.size == 1) return Status::Ok();
  const auto failed = [&](const char* step, const Status& s) {
    return Status(s.code(), "world '" + o.name + "': " + step + ": " + s.message());
  };
  auto in = client_->add(std::string(store::kJoinConnected), 1, deadline);
  if (!in.ok()) return failed("counting this member in", in.status());
  if (*in == o.size) {
    // Expecting the key absent: a member lost since the first count has shut the barrier for good
    // (the store set it to "lost: ..."), and then it stays shut.
    auto opened = client_->compareSet(std::string(store::kJoinOpen), true, "",
                                      std::string(store::kJoinOpenValue), deadline);
    if (!opened.ok()) return failed("opening the join barrier", opened.status());
  }
  auto open = client_->get(std::string(store::kJoinOpen), deadline);
  if (!open.ok()) return failed("waiting for every member's connections", open.status());
  if (*open != store::kJoinOpenValue) {
    // A member was lost after every member's connections were up and before the opening: no
    // member's join succeeds (docs/design.md, "The join contract").
    std::string_view why = *open;
    if (why.starts_with(store::kJoinLostPrefix)) why.remove_prefix(store::kJoinLostPrefix.size());
    if (server_) {
      // The store goes with this member: it stays until the others have read why (each closes
      // its link and its client as its join fails), at most as long as a leaving host waits.
      const Deadline until = hostLingerDeadline(o);
      while (server_->stats().connections > 2 && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return Status(Code::kRemoteError, "world '" + o.name +
                                          "': a member was lost before every member was "
                                          "connected: " +
                                          std::string(why));
  }
  if (o.rank == 0) {
    std::vector<std::string> through;
    for (int r = 1; r < o.size; ++r) through.push_back(store::joinThroughKey(r));
    if (Status s = client_->wait(through, deadline); !s.ok()) {
      return failed("waiting for every member to be through the join", s);
    }
    return Status::Ok();
  }
  // A fault injected here (mw/join/through) is this member lost between the opening and its count
  // through, as if its process died: its join ends, its link closes, and the store announces the
  // loss to a world that formed at every other member (store_membership.cc, shutJoinBarrier).
  if (auto injected = detail::FailPoint("mw/join/through", o.name).check()) {
    return Status(Code::kIoError, "world '" + o.name +
                                      "': lost between the opening of the join barrier and "
                                      "counting itself through" +
                                      injected->suffix());
  }
  // Every member is connected: this join has succeeded whatever happens now. Counting through
  // keeps rank 0's store up until every member is past the wait above; a store gone meanwhile
  // (rank 0 through first and left, closing it before this member's last reply was sent) is its
  // world's break, which the watchdog reports, not a failed join.
  client_->set(store::joinThroughKey(o.rank), "1", deadline).ignore();
  return Status::Ok();
}

void World::markHealthy() {
  // The rendezvous completed: every member is here. The store counts losses from now on; said
  // before the caller's join returns, so that a member stopped the next instant is judged.
  if (link_) link_->formed().ignore();
  WorldState expected = WorldState::kJoining;
  if (state_.compare_exchange_strong(expected, WorldState::kHealthy)) {
    sink_->emit(
        {WorldEvent::Kind::kCreated, options_.name, generation_, std::nullopt, Clock::now()});
  }
}

bool World::breakWorld(Cause cause, int peer, const std::string& detail, bool from_store) {
  BrokenInfo info{options_.name, cause, peer, detail, Clock::now()};
  {
    MutexLock lock(mu_);
    WorldState s = state_.load();
    if (s == WorldState::kBroken || s == WorldState::kRemoved || broken_) return false;
    broken_ = info;
    broken_by_store_.store(from_store);
    state_.store(WorldState::kBroken);
  }
  if (cause == Cause::kPeerLeft) {
    // New operations fail from now on; the running ones may still complete (see drainDeadline).
    drain_until_.store(info.detected_at +
                       std::clamp<Clock::duration>(options_.heartbeat_timeout / 4,
                                                   std::chrono::milliseconds(50),
                                                   std::chrono::milliseconds(500)));
  } else if (backend_) {
    backend_->abort(Status::worldBroken(info));
  }
  sink_->wakeWatchdog();
  sink_->emit({WorldEvent::Kind::kBroken, options_.name, generation_, info, info.detected_at});
  return true;
}

void World::endDrain() {
  if (drain_until_.exchange(Clock::time_point::max()) == Clock::time_point::max()) return;
  auto b = broken();
  if (backend_ && b) backend_->abort(Status::worldBroken(*b));
}

void World::teardown() {
  bool healthy = false;
  {
    MutexLock lock(mu_);
    if (state_.load() == WorldState::kRemoved) return;
    healthy = state_.load() == WorldState::kHealthy;
    state_.store(WorldState::kRemoved);
  }
  // Leaving is not dying: the others learn kPeerLeft before our connections close, and let the
  // operations whose data we already sent finish (the watchdog no longer uses the link now).
  if (healthy && link_) {
    link_->leave().ignore();
    // The store's host waits for its own store to take the leave before stopping it: stopped
    // first, the store could close the others' links before reading the leave (it serves in
    // slices, and the frame may still be on its way), and they would see a dead store instead
    // of a member that left. Bounded: a store too slow for this makes it the old way.
    if (server_) {
      link_->awaitClose(hostLingerDeadline(options_)).ignore();
    }
  }
  if (backend_) backend_->shutdown();
  link_.reset();
  client_.reset();
  if (server_) server_->stop();
  server_.reset();
}

void World::submit(OpRequest op, bool caller_waits) {
  if (state_.load() != WorldState::kHealthy || !backend_) {
    op.work->complete(notHealthyStatus());
    return;
  }
  backend_->submit(std::move(op), caller_waits);
}

Status World::notHealthyStatus() const {
  switch (state_.load()) {
    case WorldState::kJoining:
      return Status(Code::kInvalidUsage, "world '" + options_.name + "' is still joining");
    case WorldState::kBroken: {
      auto b = broken();
      return b ? Status::worldBroken(*b) : Status(Code::kWorldBroken, options_.name);
    }
    case WorldState::kRemoved:
      return Status(Code::kAborted, "world '" + options_.name + "' was removed");
    case WorldState::kHealthy:
      break;
  }
  return Status::Ok();
}

std::optional<BrokenInfo> World::broken() const {
  MutexLock lock(mu_);
  return broken_;
}

WorldInfo World::info() const {
  WorldInfo i;
  i.name = options_.name;
  i.rank = options_.rank;
  i.size = options_.size;
  i.backend = options_.backend;
  i.device = options_.device;
  i.state = state_.load();
  i.generation = generation_;
  i.store_port = store_port_.load();
  i.broken = broken();
  return i;
}

}  // namespace mw::detail
