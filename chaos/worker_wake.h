// The waits mw_worker's threads block in, each ending on the event it waits for, never found by
// polling a flag: an eventfd another thread writes, a signalfd for SIGTERM and SIGINT, and waits
// that end at a time or as soon as a std::stop_token is stopped.
//
// Thread rules: EventFd::signal and Countdown may be called from any thread; an EventFd or
// SignalFd is otherwise used by the thread that polls it. The free functions block the caller.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <utility>

#include "multiworld/status.h"

namespace mw::chaos {

// A descriptor this object owns: closed on destruction. Move-only.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~OwnedFd();
  int get() const { return fd_; }

 private:
  int fd_;
};

// An eventfd: signal() makes fd() readable (POLLIN) until take().
class EventFd {
 public:
  // kIoError naming the system's error when the kernel gives no eventfd (out of descriptors).
  static Result<EventFd> open();

  int fd() const { return fd_.get(); }
  // Makes fd() readable. Async-signal-safe; never blocks.
  void signal() const;
  // Makes fd() unreadable again. Never blocks.
  void take() const;

 private:
  explicit EventFd(int fd) : fd_(fd) {}
  OwnedFd fd_;
};

// A signalfd for SIGTERM and SIGINT. open() blocks both signals in the calling thread, so it must
// be called before the process starts any other thread (they inherit the mask): from then on the
// signals are not delivered to handlers but make fd() readable.
class SignalFd {
 public:
  // kIoError naming the system's error when the signals cannot be blocked or no signalfd is given.
  static Result<SignalFd> open();

  int fd() const { return fd_.get(); }
  // Reads the pending signals (fd() is unreadable after). Never blocks.
  void take() const;

 private:
  explicit SignalFd(int fd) : fd_(fd) {}
  OwnedFd fd_;
};

// Blocks until `until` or until `stop` is stopped, whichever is first. Returns false when stopped.
bool sleepUntil(std::stop_token stop, Deadline until);
// Blocks until `stop` is stopped (at once when it cannot be: a default token).
void waitForStop(std::stop_token stop);

// Paces a loop at `rate` iterations per second (0: back to back): wait() blocks until the next
// iteration's slot, or until `stop` is stopped. A loop that fell behind starts its next iteration
// at once, and is not made to catch up.
class Pacer {
 public:
  explicit Pacer(double rate);
  void wait(std::stop_token stop);

 private:
  Clock::duration period_;
  Clock::time_point slot_;
};

// A count of running things that can be waited to reach zero: std::latch with a timed wait.
class Countdown {
 public:
  explicit Countdown(int count) : count_(count) {}
  // One thing ended.
  void countDown();
  // Blocks until the count is zero or `until` passes. Returns whether it reached zero.
  bool waitUntil(Deadline until);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;  // GUARDED_BY(mu_)
};

// A counter of changes that threads can wait to move past a value they saw: the worker's traffic
// loops wait on it for a world's next event instead of re-reading the world's state on a timer.
class ChangeCount {
 public:
  // The number of changes so far.
  unsigned long long seen();
  // One more change; wakes every waiter.
  void bump();
  // Blocks until the count is past `seen` or `stop` is stopped.
  void waitPast(unsigned long long seen, std::stop_token stop);

 private:
  std::mutex mu_;
  std::condition_variable_any cv_;
  unsigned long long count_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace mw::chaos
