// Watchdog: the one thread per manager that watches every world's member link.
//
// Per world it sends heartbeats, reads the store's notices (a member died, went silent or saw the
// world break), notices when the store itself goes silent or closes, and tells the store when this
// member saw the world break first. It breaks only the world it is looking at.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "base/lateness.h"
#include "base/mutex.h"
#include "worlds/world.h"

namespace mw::detail {

// Thread rules: add/remove/wake from any thread.
class Watchdog {
 public:
  // Starts the thread. Without an eventfd (the process is out of descriptors) it starts none, and
  // startStatus() says why.
  Watchdog();
  ~Watchdog();  // stops and joins the thread

  // OK once the thread runs; kIoError when the watchdog could not start (no world can be watched
  // then: WorldManager's init fails with it).
  const Status& startStatus() const { return start_status_; }

  // Sends `world`'s heartbeats while it connects its members, and nothing else until add(): the
  // store times every member's silence from the moment all have joined its link, and connecting
  // the backend can take longer than the heartbeat timeout. REQUIRES: world->link() is set.
  void addJoining(std::shared_ptr<World> world) MW_EXCLUDES(mu_);
  // Watches `world` fully from now on (it is healthy): an entry from addJoining becomes a full one.
  void add(std::shared_ptr<World> world) MW_EXCLUDES(mu_);
  // After this returns the watchdog no longer touches `world` or its link.
  void remove(const World* world) MW_EXCLUDES(mu_);
  // Makes the thread look at every world now.
  void wake();

 private:
  struct Entry {
    std::shared_ptr<World> world;
    Clock::time_point next_heartbeat;
    // Not serviced yet: the link sat unread while the world initialized, so what the store sent
    // meanwhile is read before its silence is judged.
    bool fresh = true;
    // Connecting (addJoining): heartbeats only; the link is neither polled nor read.
    bool joining = false;
    bool reported = false;  // a local break was reported to the store
  };

  void loop(std::stop_token st);
  // Handles one world; returns false when it should no longer be watched.
  bool service(Entry& e, short revents, Clock::time_point now) MW_REQUIRES(mu_);
  int pollTimeoutMs(Clock::time_point now) const MW_REQUIRES(mu_);
  // How long the store has been silent over time this thread ran on schedule.
  Clock::duration silence(const Entry& e, Clock::time_point now) const;
  // When the store's silence would confirm the world lost, if nothing is heard before.
  Clock::time_point silenceDeadline(const Entry& e) const;

  int wake_fd_ = -1;
  Status start_status_;
  Mutex mu_;
  std::vector<Entry> entries_ MW_GUARDED_BY(mu_);
  LatenessMeter lateness_;  // the watchdog thread only
  std::jthread thread_;
};

}  // namespace mw::detail
