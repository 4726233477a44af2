// World: one membership of this process in one communicator group.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "base/mutex.h"
#include "multiworld/store.h"
#include "multiworld/traffic_windows.h"
#include "multiworld/world_manager.h"
#include "store/member_link.h"
#include "store/socket.h"

namespace mw::detail {

// Where a world reports what happens to it (the manager).
class WorldSink {
 public:
  virtual ~WorldSink() = default;
  virtual void emit(WorldEvent event) = 0;
  // The watchdog should look at the worlds again now.
  virtual void wakeWatchdog() = 0;
};

// Thread rules: connect() and teardown() from the manager, once each, in that order; everything
// else from any thread.
class World {
 public:
  World(WorldOptions options, uint64_t generation, WorldSink* sink);
  ~World();

  // The telemetry windows of the world's name (worlds/telemetry.h), or null when the process
  // reports to no harness. Set before the world is published, never changed afterwards.
  std::shared_ptr<TrafficWindows> counters;

  // Hosts the store (rank 0), connects the store client and member link, builds the backend.
  // `linked` is called once the member link has joined, before the members connect to each
  // other (the link must be heartbeated from then on: see Watchdog::addJoining).
  Status connect(Deadline deadline, const std::function<void()>& linked);
  // From any thread: makes a connect() in progress (or to come) end soon with kAborted, at its
  // next wait for the store or a peer's address (store::CancelScope). Idempotent.
  void cancelJoin();
  bool joinCancelled() const { return join_cancelled_.load(); }
  // The manager's join of this world has ended (either way): waitJoinEnded() returns from then on.
  void joinEnded() MW_EXCLUDES(mu_);
  void waitJoinEnded() MW_EXCLUDES(mu_);
  // joining -> healthy. Emits kCreated.
  void markHealthy();
  // Breaks the world unless broken or removed already: records the cause, aborts the backend
  // (failing every pending operation), wakes the watchdog to tell the store, emits kBroken.
  // Returns whether this call broke it. Never blocks on the network. `from_store`: the world's
  // store told us (a notice, or the link to it was lost), so there is nothing to tell it back;
  // any other break is reported to the store, which tells every other member at once.
  bool breakWorld(Cause cause, int peer, const std::string& detail, bool from_store = false)
      MW_EXCLUDES(mu_);
  // Whether the break came from the store (see breakWorld).
  bool brokenByStore() const { return broken_by_store_.load(); }
  // A world broken because a member left (kPeerLeft) lets the operations it is running finish for
  // a grace period before its backend is aborted: their data may already be here. The time the
  // grace ends (max when no drain is pending), and its end (the watchdog calls it then, or an
  // operation that fails meanwhile; idempotent).
  Clock::time_point drainDeadline() const { return drain_until_.load(); }
  void endDrain();
  // Fails new operations, releases threads, sockets and memory. Blocks until done.
  void teardown() MW_EXCLUDES(mu_);

  // Queues a validated operation, or fails its work at once when the world is not healthy.
  // See Backend::submit for `caller_waits`.
  void submit(OpRequest op, bool caller_waits);

  const WorldOptions& options() const { return options_; }
  uint64_t generation() const { return generation_; }
  WorldState state() const { return state_.load(); }
  WorldInfo info() const;
  std::optional<BrokenInfo> broken() const MW_EXCLUDES(mu_);
  Status notHealthyStatus() const;

  // Watchdog only.
  MemberLink* link() { return link_.get(); }
  // Watchdog only: the backend's periodic checks (Backend::tick).
  void tick(Clock::time_point now) {
    if (backend_) backend_->tick(now);
  }

 private:
  // After the backend connected: returns once every member's backend is connected (the join
  // contract), rank 0 once every other member is through too.
  Status joinBarrier(Deadline deadline);

  const WorldOptions options_;
  const uint64_t generation_;
  WorldSink* const sink_;
  std::atomic<WorldState> state_{WorldState::kJoining};
  std::atomic<uint16_t> store_port_{0};
  std::atomic<bool> broken_by_store_{false};
  std::atomic<Clock::time_point> drain_until_{Clock::time_point::max()};
  std::atomic<bool> join_cancelled_{false};
  store::Fd cancel_fd_;  // an eventfd, readable once the join is cancelled

  mutable Mutex mu_;
  std::optional<BrokenInfo> broken_ MW_GUARDED_BY(mu_);
  bool join_ended_ MW_GUARDED_BY(mu_) = false;
  std::condition_variable join_cv_;

  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
  std::unique_ptr<MemberLink> link_;
  std::shared_ptr<Backend> backend_;  // kept until destruction so racing submits stay safe
};

}  // namespace mw::detail
