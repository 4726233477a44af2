#include "worlds/watchdog.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/thread_name.h"
#include "store/socket.h"

namespace mw::detail {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

long long msSince(Clock::time_point t, Clock::time_point now) {
  return duration_cast<milliseconds>(now - t).count();
}

}  // namespace

Watchdog::Watchdog() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    // An environment failure, not a bug: reported to whoever initializes a world.
    start_status_ = Status(Code::kIoError,
                           "cannot create an eventfd for the watchdog: " + store::errnoText(errno));
    return;
  }
  thread_ = std::jthread([this](std::stop_token st) { loop(st); });
}

Watchdog::~Watchdog() {
  thread_.request_stop();
  wake();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Watchdog::addJoining(std::shared_ptr<World> world) {
  {
    MutexLock lock(mu_);
    Entry e{std::move(world), Clock::now()};
    e.joining = true;
    entries_.push_back(std::move(e));
  }
  wake();
}

void Watchdog::add(std::shared_ptr<World> world) {
  {
    MutexLock lock(mu_);
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.world == world; });
    if (it != entries_.end()) {
      it->joining = false;
      it->fresh = true;
    } else {
      entries_.push_back({std::move(world), Clock::now()});
    }
  }
  wake();
}

void Watchdog::remove(const World* world) {
  MutexLock lock(mu_);
  std::erase_if(entries_, [&](const Entry& e) { return e.world.get() == world; });
}

void Watchdog::wake() {
  uint64_t one = 1;
  ssize_t rc = ::write(wake_fd_, &one, sizeof(one));
  (void)rc;  // EAGAIN means a wake-up is pending already
}

int Watchdog::pollTimeoutMs(Clock::time_point now) const {
  auto next = now + std::chrono::seconds(1);
  for (const auto& e : entries_) {
    if (e.joining) {  // heartbeats only: its silence is not judged yet
      next = std::min(next, e.next_heartbeat);
      continue;
    }
    if (e.world->state() != WorldState::kHealthy) {  // broken, letting operations finish
      next = std::min(next, e.world->drainDeadline());
      continue;
    }
    next = std::min(next, e.next_heartbeat);
    next = std::min(next, silenceDeadline(e) + milliseconds(1));
  }
  // Rounded up: rounded down, the last fraction of a millisecond before each heartbeat gave
  // poll() a timeout of 0, and this thread spun until the beat was due (0.2-0.3 ms of CPU a beat).
  return static_cast<int>(std::min<long long>(waitMillis(next - now).count(), 1000));
}

Clock::duration Watchdog::silence(const Entry& e, Clock::time_point now) const {
  const Clock::time_point heard = e.world->link()->lastHeard();
  return now - heard - lateness_.since(heard);
}

Clock::time_point Watchdog::silenceDeadline(const Entry& e) const {
  MemberLink* link = e.world->link();
  const Clock::time_point heard = link->lastHeard();
  return heard + lateness_.since(heard) + link->heartbeatTimeout() +
         LatenessMeter::confirmation(link->heartbeatTimeout());
}

bool Watchdog::service(Entry& e, short revents, Clock::time_point now) {
  World& w = *e.world;
  MemberLink* link = w.link();
  if (e.joining) {
    if (now >= e.next_heartbeat) {
      // A link that fails now fails the join, or the first full service after it.
      link->sendHeartbeat().ignore();
      e.next_heartbeat = now + link->heartbeatInterval();
    }
    return true;
  }
  if (w.state() != WorldState::kHealthy) {
    // Whatever broke it here, tell the store, so every other member learns at once (whoever
    // hosts the store: rank 0's own link reaches its own server too); then stop watching, once
    // a member's leaving has let the running operations finish.
    if (auto b = w.broken(); b && !w.brokenByStore() && !e.reported) {
      link->reportBroken(b->cause, b->detail).ignore();
    }
    e.reported = true;
    if (now < w.drainDeadline()) return true;
    if (w.drainDeadline() != Clock::time_point::max()) w.endDrain();
    return false;
  }
  if (revents != 0 || e.fresh) {
    e.fresh = false;
    auto notices = link->readNotices();
    if (!notices.ok()) {
      w.breakWorld(Cause::kPeerDied, 0,
                   "lost the connection to the world's store hosted by rank 0 (" +
                       notices.status().message() + ")",
                   true);
      return false;
    }
    for (const auto& n : notices.value()) {
      // Watched on while a leaving member's grace lets running operations finish.
      if (w.breakWorld(n.cause, n.rank, n.detail, true)) {
        return w.drainDeadline() != Clock::time_point::max();
      }
    }
  }
  // Silence counts only over time this thread ran on schedule (lateness.h), and a suspicion must
  // hold for the confirmation time beyond the timeout.
  const Clock::duration silent = silence(e, now);
  if (silent > link->heartbeatTimeout() + LatenessMeter::confirmation(link->heartbeatTimeout())) {
    w.breakWorld(Cause::kPeerSilent, 0,
                 "the world's store (rank 0) was silent for " +
                     std::to_string(duration_cast<milliseconds>(silent).count()) +
                     " ms (this member ran on schedule meanwhile; last heard " +
                     std::to_string(msSince(link->lastHeard(), now)) + " ms ago)",
                 true);
    return false;
  }
  w.tick(now);
  if (now >= e.next_heartbeat) {
    if (Status sent = link->sendHeartbeat(); !sent.ok()) {
      w.breakWorld(
          Cause::kPeerDied, 0,
          "lost the connection to the world's store hosted by rank 0 (" + sent.message() + ")",
          true);
      return false;
    }
    e.next_heartbeat = now + link->heartbeatInterval();
  }
  return true;
}

void Watchdog::loop(std::stop_token st) {
  nameThisThread("mw-watchdog");
  std::vector<pollfd> fds;
  std::vector<const World*> owners;
  while (!st.stop_requested()) {
    {
      MutexLock lock(mu_);
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      owners.assign(1, nullptr);
      for (const auto& e : entries_) {
        // Unread until it is healthy, and once broken: POLLIN would wake us at once.
        if (e.joining || e.world->state() != WorldState::kHealthy) continue;
        fds.push_back({e.world->link()->fd(), POLLIN, 0});
        owners.push_back(e.world.get());
      }
    }
    int timeout = 0;
    {
      MutexLock lock(mu_);
      timeout = pollTimeoutMs(Clock::now());
    }
    const auto t = LatenessMeter::Instant::now();
    lateness_.sleeping(t, t.wall + milliseconds(timeout));
    ::poll(fds.data(), fds.size(), timeout);
    lateness_.woke(LatenessMeter::Instant::now());
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t rc = ::read(wake_fd_, &v, sizeof(v));
      (void)rc;
    }
    MutexLock lock(mu_);
    const auto instant = LatenessMeter::Instant::now();
    lateness_.ran(instant);  // time this thread was stopped or preempted is not the store's silence
    const auto now = instant.wall;
    std::erase_if(entries_, [&](Entry& e) MW_REQUIRES(mu_) {
      short revents = 0;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (owners[i] == e.world.get()) revents = fds[i].revents;
      }
      return !service(e, revents, now);
    });
  }
}

}  // namespace mw::detail
