// DeferredWake: wakes a worker thread now, or at a time unless cancelled before.
//
// A backend's executor runs the operations nobody waits for. Most operations are waited for at
// once (`allReduce(...).wait()`), and the waiting thread runs them itself; waking the executor for
// them anyway cost its context switches per operation, 15% of 1 MiB all_reduce throughput on
// 2 cores. So an operation asks for the executor *at a time* (its grace period); a thread that
// takes the operation first leaves that wake-up be (the executor finds nothing due), since a
// wake-up per grace period costs less than a system call per operation. "Now" is an eventfd, "at"
// a timerfd on CLOCK_MONOTONIC (the steady clock's): a system call to set or cancel, none when at()
// finds the timer set to an earlier time already, and nobody wakes until one fires. Keep the times
// beyond the scheduler tick where that is an option: a timer due sooner than every other timer of
// the CPU reprograms the CPU's timer device on each set and cancel, which costs 5-6 us per call on
// a VM (measured: 13 us per set and cancel at 100 us ahead, 1.2 us at 3 ms or more).
//
// Thread rules: every member may be called from any thread, except wait(), which belongs to the
// one worker thread.
#pragma once

#include "base/mutex.h"
#include "multiworld/status.h"

namespace mw::detail {

class DeferredWake {
 public:
  // Throws std::system_error when the kernel gives no eventfd or timerfd.
  DeferredWake();
  ~DeferredWake();
  DeferredWake(const DeferredWake&) = delete;
  DeferredWake& operator=(const DeferredWake&) = delete;

  // Wakes the worker now (or makes its next wait() return at once).
  void now();
  // Wakes the worker at `when` (at once if it has passed), unless an earlier time is already set.
  void at(Clock::time_point when) MW_EXCLUDES(mu_);
  // Drops the time set by at(), unless it has come already. A wake-up from now() stays.
  void cancel() MW_EXCLUDES(mu_);
  // Blocks until now() was called or the time given to at() came, then clears both. The worker
  // re-checks its state after every return (a wake-up may be one it no longer needs).
  void wait() MW_EXCLUDES(mu_);

 private:
  int event_fd_ = -1;
  int timer_fd_ = -1;
  Mutex mu_;
  bool armed_ MW_GUARDED_BY(mu_) = false;
  Clock::time_point armed_for_ MW_GUARDED_BY(mu_) = {};
};

}  // namespace mw::detail
