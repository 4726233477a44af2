// WorkState: the shared completion record behind a Work handle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "multiworld/status.h"

namespace mw::detail {

// Wakes one waitAny call when any of the works it watches completes.
struct AnyWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool fired = false;  // GUARDED_BY(mu)
};

// Thread rules: complete() from any thread, once wins; waiting from any thread.
struct WorkState {
  explicit WorkState(std::string world_name) : world(std::move(world_name)) {}

  // Completes the work with `s` unless it has completed already. Returns whether this call did.
  bool complete(Status s);
  bool isDone() const;
  // Calls `expedite` the first time, unless the work is done or there is none.
  void expediteOnce();

  const std::string world;
  // Set by the backend before the Work is handed out, never changed afterwards: runs queued
  // operations up to this one in the calling thread when nobody else is running them and the
  // caller's deadline is no earlier than theirs; otherwise does what `expedite` does. May be empty.
  std::function<void(Deadline)> driver;
  // Set like `driver`: has the backend start this operation (and those queued before it) as soon
  // as it can, on its own thread, instead of at the end of its grace. For threads that wait
  // without running it (waitAny, test). May be empty.
  std::function<void()> expedite;
  // Whether test() or waitAny has called `expedite` (once is enough).
  std::atomic<bool> expedited{false};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;                    // GUARDED_BY(mu)
  Status status;                        // GUARDED_BY(mu)
  std::vector<AnyWaiter*> any_waiters;  // GUARDED_BY(mu)
};

}  // namespace mw::detail
