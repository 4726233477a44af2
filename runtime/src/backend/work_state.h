// WorkState: the shared completion record behind a Work handle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "multiworld/status.h"
#include "multiworld/work.h"

namespace mw::detail {

// Wakes one waitAny call when any of the works it watches completes.
struct AnyWaiter {
  Mutex mu;
  std::condition_variable cv;
  bool fired MW_GUARDED_BY(mu) = false;
};

struct WorkState;
struct TrafficCounters;

// What a backend does for threads that wait for one of its operations. A WorkState refers to it
// weakly (the backend may be gone first). Thread rules: any thread.
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Runs queued operations up to `target` in the calling thread when nobody else is running them
  // and the caller's deadline is no earlier than theirs; otherwise does what expedite() does.
  virtual void driveUntil(const WorkState* target, Deadline deadline) = 0;
  // Has the backend start `target` (and the operations queued before it) as soon as it can, on
  // its own thread, instead of at the end of its grace. For threads that wait without running it
  // (waitAny, test).
  virtual void expedite(const WorkState* target) = 0;
};

// Thread rules: complete() from any thread, once wins; waiting from any thread.
struct WorkState {
  explicit WorkState(std::string world_name) : world(std::move(world_name)) {}

  // Completes the work with `s` unless it has completed already. Returns whether this call did.
  bool complete(Status s) MW_EXCLUDES(mu);
  bool isDone() const MW_EXCLUDES(mu);
  // Calls driver's expedite() the first time, unless the work is done or there is no driver.
  void expediteOnce();

  const std::string world;
  // Set by the backend before the Work is handed out, never changed afterwards. May be empty.
  std::weak_ptr<WorkDriver> driver;
  // Telemetry (worlds/telemetry.h), set at submission when the process reports to a harness: a
  // successful completion adds `bytes` and the latency since `submitted` to `counters`.
  std::shared_ptr<TrafficCounters> counters;
  int64_t bytes = 0;
  Clock::time_point submitted{};
  // Whether test() or waitAny has expedited the work (once is enough).
  std::atomic<bool> expedited{false};
  mutable Mutex mu;
  std::condition_variable cv;
  bool done MW_GUARDED_BY(mu) = false;
  Status status MW_GUARDED_BY(mu);
  std::vector<AnyWaiter*> any_waiters MW_GUARDED_BY(mu);
};

// The library's access to what a Work hides from its users.
struct WorkAccess {
  static Work make(std::shared_ptr<WorkState> state) { return Work(std::move(state)); }
  static const std::shared_ptr<WorkState>& state(const Work& w) { return w.state_; }
};

}  // namespace mw::detail
