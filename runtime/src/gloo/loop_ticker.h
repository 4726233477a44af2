// LoopTicker: keeps a Gloo TCP device's event loop ticking without pause while it lives.
//
// Why: Gloo's Loop::unregisterDescriptor returns only after the loop's next tick, and an idle
// loop ticks once per 10 ms (the timeout of its epoll_wait). Destroying a context unregisters a
// descriptor per pair, one after the other, so releasing the context of a world of N members took
// about N x 10 ms: a world of 1024 members whose rendezvous failed at its 1 s deadline returned
// after 11 s. An eventfd that is always readable, registered (level-triggered) on the loop, keeps
// epoll_wait from sleeping; the loop spins only while this object lives, around such a release.
//
// Only where pairs that never connected are released (a failed rendezvous): a healthy world's
// pairs are closed and unregistered by the loop itself, and the ticker's own release costs a tick.
//
// Thread rules: one thread; destroy it before the device (it unregisters itself from the loop).
#pragma once

#include <gloo/transport/tcp/device.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <memory>

namespace mw::detail {

class LoopTicker final : public gloo::transport::tcp::Handler {
 public:
  // `device` may be null or not a TCP device: then this does nothing.
  explicit LoopTicker(const std::shared_ptr<gloo::transport::Device>& device)
      : device_(std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device)) {
    if (!device_) return;
    fd_ = ::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);  // readable until read, and never read
    if (fd_ >= 0) device_->registerDescriptor(fd_, EPOLLIN, this);
  }
  ~LoopTicker() override {
    if (fd_ < 0) return;
    device_->unregisterDescriptor(fd_, this);  // one tick: the loop is still spinning
    ::close(fd_);
  }
  LoopTicker(const LoopTicker&) = delete;
  LoopTicker& operator=(const LoopTicker&) = delete;

  void handleEvents(int) override {}  // the wake-up is the point

 private:
  std::shared_ptr<gloo::transport::tcp::Device> device_;
  int fd_ = -1;
};

// Drops `device` without waiting for its loop's idle tick. Releasing a TCP device's last reference
// joins its loop thread, which sees that it must stop only when its epoll_wait returns: up to
// 10 ms on an idle loop, one tick that every removeWorld paid (10.4 ms median for a 2-member
// world, healthy or broken, in mw_bench creation). An always-readable eventfd registered just
// before keeps epoll_wait from sleeping; it is never unregistered (that would wait for a tick),
// and it is closed once the loop is gone. Another holder of the device (a reference count above
// this one's) gets a plain release: its loop then lives on, and must not keep a stale handler.
// REQUIRES: nothing else of the device is being destroyed concurrently (its context is gone).
inline void releaseDevice(std::shared_ptr<gloo::transport::Device>& device) {
  auto tcp = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device);
  if (!tcp || tcp.use_count() != 2) {  // `device` and `tcp`: anything more is another holder
    tcp.reset();
    device.reset();
    return;
  }
  struct Waker final : gloo::transport::tcp::Handler {
    void handleEvents(int) override {}  // the wake-up is the point
  } waker;
  const int fd = ::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd >= 0) tcp->registerDescriptor(fd, EPOLLIN, &waker);
  device.reset();
  tcp.reset();  // ~Loop: its thread spins on the eventfd, sees it must stop, and is joined
  if (fd >= 0) ::close(fd);
}

}  // namespace mw::detail
