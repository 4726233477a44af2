#include "base/deferred_wake.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace mw::detail {

namespace {

// An absolute CLOCK_MONOTONIC time; libstdc++'s steady_clock counts from the same origin. A time
// at or before the origin would disarm the timer, so it is clamped to 1 ns.
itimerspec absolute(Clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  if (ns < 1) ns = 1;
  itimerspec s{};
  s.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
  s.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
  return s;
}

// Reads a counter fd (both are non-blocking); true when it had fired.
bool drain(int fd) {
  uint64_t n = 0;
  return ::read(fd, &n, sizeof n) == static_cast<ssize_t>(sizeof n);
}

}  // namespace

DeferredWake::DeferredWake() {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) {
    const int saved = errno;
    ::close(event_fd_);
    throw std::system_error(saved, std::generic_category(), "timerfd_create");
  }
}

DeferredWake::~DeferredWake() {
  ::close(event_fd_);
  ::close(timer_fd_);
}

void DeferredWake::now() {
  uint64_t one = 1;
  ssize_t rc = ::write(event_fd_, &one, sizeof one);
  (void)rc;  // fails only when the counter is about to overflow: a wake-up is pending anyway
}

void DeferredWake::at(Clock::time_point when) {
  // A time that has come is a wake-up now: an eventfd write, where a timer set in the past would
  // cost a timerfd_settime (and reprogram the CPU's timer) to fire at once anyway.
  if (when <= Clock::now()) return now();
  MutexLock lock(mu_);
  if (armed_ && armed_for_ <= when) return;
  itimerspec s = absolute(when);
  if (::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &s, nullptr) != 0) {
    now();  // cannot fail with our fd and a valid time; waking early is always safe
    return;
  }
  armed_ = true;
  armed_for_ = when;
}

void DeferredWake::cancel() {
  MutexLock lock(mu_);
  if (!armed_) return;
  itimerspec off{};
  ::timerfd_settime(timer_fd_, 0, &off, nullptr);  // an expiration already counted stays
  armed_ = false;
}

void DeferredWake::wait() {
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {timer_fd_, POLLIN, 0}};
  while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
  }
  drain(event_fd_);
  MutexLock lock(mu_);
  // Setting the timer clears its expiration count, so a count read here is for the time armed
  // now (or for one since cancelled, which only costs this wake-up).
  if (drain(timer_fd_)) armed_ = false;
}

}  // namespace mw::detail
