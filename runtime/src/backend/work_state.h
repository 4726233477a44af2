// WorkState: the shared completion record behind a Work handle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "multiworld/status.h"
#include "multiworld/traffic_windows.h"
#include "multiworld/work.h"

namespace mw::detail {

// Wakes one waitAny call when any of the works it watches completes.
struct AnyWaiter {
  Mutex mu;
  std::condition_variable cv;
  bool fired MW_GUARDED_BY(mu) = false;
};

struct WorkState;

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
  // Work::wait's stream-ordered form (GPU worlds): orders `stream` (the calling thread's current
  // CUDA stream; nullptr is the legacy default stream of the world's device) after `target` on the
  // GPU and returns without waiting for the GPU: OK, or the work's error when it completed with
  // one already; kTimeout when `target` was not even launched by `deadline`; kInvalidArgument
  // when CUDA refuses the stream. nullopt when the backend does not order streams (Gloo, or a
  // world that waits on the host): the caller then waits on the host.
  virtual std::optional<Status> orderStream(WorkState* target, void* stream, Deadline deadline) {
    (void)target, (void)stream, (void)deadline;
    return std::nullopt;
  }
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
  // successful completion adds `bytes` and the latency since `submitted` to `counters`, in the
  // window it completed in.
  std::shared_ptr<TrafficWindows> counters;
  int64_t bytes = 0;
  Clock::time_point submitted{};
  // Whether test() or waitAny has expedited the work (once is enough).
  std::atomic<bool> expedited{false};
  mutable Mutex mu;
  std::condition_variable cv;
  bool done MW_GUARDED_BY(mu) = false;
  Status status MW_GUARDED_BY(mu);
  std::vector<AnyWaiter*> any_waiters MW_GUARDED_BY(mu);
  // GPU worlds: the CUDA event (a cudaEvent_t) the backend recorded on its world's stream after
  // the operation, set when it launched the operation (nullptr before). The backend reuses the
  // event only after complete(), which takes `mu`: a thread holding `mu` that sees `done` false
  // may use it. markLaunched() sets it and wakes the threads waiting for the launch (on `cv`).
  void* gpu_done MW_GUARDED_BY(mu) = nullptr;
  bool launched MW_GUARDED_BY(mu) = false;
  void markLaunched(void* done_event) MW_EXCLUDES(mu);
};

// The library's access to what a Work hides from its users.
struct WorkAccess {
  static Work make(std::shared_ptr<WorkState> state) { return Work(std::move(state)); }
  static const std::shared_ptr<WorkState>& state(const Work& w) { return w.state_; }
};

}  // namespace mw::detail
