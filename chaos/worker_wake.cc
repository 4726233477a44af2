#include "chaos/worker_wake.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace mw::chaos {

namespace {

Status systemError(const std::string& what) {
  return Status(Code::kIoError, what + ": " + std::strerror(errno));
}

}  // namespace

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<EventFd> EventFd::open() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return systemError("eventfd");
  return EventFd(fd);
}

void EventFd::signal() const {
  const uint64_t one = 1;
  // Fails only when the counter would overflow: it is readable then anyway.
  [[maybe_unused]] const ssize_t n = ::write(fd(), &one, sizeof(one));
}

void EventFd::take() const {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd(), &count, sizeof(count));  // EAGAIN: none
}

Result<SignalFd> SignalFd::open() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (const int e = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0) {
    errno = e;
    return systemError("blocking SIGTERM and SIGINT");
  }
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return systemError("signalfd");
  return SignalFd(fd);
}

void SignalFd::take() const {
  signalfd_siginfo info;
  while (::read(fd(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
  }
}

bool sleepUntil(std::stop_token stop, Deadline until) {
  std::mutex mu;
  std::condition_variable_any cv;  // notified by nothing but the stop
  std::unique_lock lock(mu);
  return !cv.wait_until(lock, stop, until, [] { return false; }) && !stop.stop_requested();
}

Pacer::Pacer(double rate)
    : period_(rate > 0 ? std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(1.0 / rate))
                       : Clock::duration::zero()),
      slot_(Clock::now()) {}

void Pacer::wait(std::stop_token stop) {
  if (period_.count() <= 0) return;
  slot_ += period_;
  const auto now = Clock::now();
  if (slot_ < now) slot_ = now;
  sleepUntil(stop, slot_);
}

void waitForStop(std::stop_token stop) {
  if (!stop.stop_possible()) return;
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  cv.wait(lock, stop, [] { return false; });
}

void Countdown::countDown() {
  {
    std::lock_guard lock(mu_);
    --count_;
  }
  cv_.notify_all();
}

bool Countdown::waitUntil(Deadline until) {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, until, [&] { return count_ <= 0; });
}

unsigned long long ChangeCount::seen() {
  std::lock_guard lock(mu_);
  return count_;
}

void ChangeCount::bump() {
  {
    std::lock_guard lock(mu_);
    ++count_;
  }
  cv_.notify_all();
}

void ChangeCount::waitPast(unsigned long long seen, std::stop_token stop) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, stop, [&] { return count_ != seen; });
}

}  // namespace mw::chaos
