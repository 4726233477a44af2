// mw::Mutex and mw::MutexLock: std::mutex and its guard, annotated for clang's thread-safety
// analysis (thread_annotations.h). libstdc++'s std::mutex carries no annotations, so the analysis
// could not tell that a std::lock_guard holds it; these thin wrappers add no state and no cost.
//
// Usage:
//   mw::Mutex mu_;
//   int count_ MW_GUARDED_BY(mu_) = 0;
//   std::condition_variable cv_;
//   ...
//   mw::MutexLock lock(mu_);
//   cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) { return count_ > 0; });
//
// A predicate given to a condition variable runs with the mutex held, but the analysis cannot see
// that through the standard library: annotate the lambda with MW_REQUIRES, as above.
#pragma once

#include <mutex>

#include "base/thread_annotations.h"

namespace mw {

// A std::mutex the analysis knows. Not recursive. Thread rules: any thread.
class MW_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Blocks until this thread holds the mutex. REQUIRES: not held by this thread.
  void lock() MW_ACQUIRE() { mu_.lock(); }
  // REQUIRES: held by this thread.
  void unlock() MW_RELEASE() { mu_.unlock(); }
  // Takes the mutex if it is free, without blocking; returns whether it did.
  bool try_lock() MW_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, as std::unique_lock does, and may let it go and
// take it again in between (unlock(), lock()). Belongs to the thread that made it.
class MW_SCOPED_CAPABILITY MutexLock {
 public:
  // Blocks until the mutex is held.
  explicit MutexLock(Mutex& mu) MW_ACQUIRE(mu) : lock_(mu.mu_) {}
  // Releases the mutex if this guard holds it.
  ~MutexLock() MW_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex early, as around a call that must not run under it. REQUIRES: held.
  void unlock() MW_RELEASE() { lock_.unlock(); }
  // Takes the mutex again after unlock(). REQUIRES: not held.
  void lock() MW_ACQUIRE() { lock_.lock(); }

  // The underlying lock, for std::condition_variable's waits only: a wait releases the mutex and
  // holds it again before it returns, which the analysis (seeing it held throughout) agrees with.
  // Do not unlock it through this reference; use unlock() above.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace mw
