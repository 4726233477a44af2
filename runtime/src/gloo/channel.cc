#include "gloo/channel.h"

#include <chrono>

#include "base/mutex.h"

namespace mw::detail {

namespace {

// Gloo treats a timeout as fatal for the whole context; that is what we want at an operation's
// deadline, since passing it breaks the world anyway. Rounded up, so that when Gloo gives up the
// deadline has passed and the failure is reported as the operation's timeout.
std::chrono::milliseconds glooTimeout(Deadline d) {
  // Capped at 30 days (the longest op_timeout): Gloo adds it to the clock's now.
  auto left = std::min<Clock::duration>(timeUntil(d), std::chrono::hours(24 * 30));
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(left) + std::chrono::milliseconds(1),
                  std::chrono::milliseconds(1));
}

template <typename WaitFn>
void waitOn(Channel* ch, Deadline deadline, WaitFn wait) {
  if (ch->aborted()) throw AbortedError{};
  bool completed = false;
  try {
    completed = wait(glooTimeout(deadline));
  } catch (const std::exception& e) {
    if (ch->aborted()) throw AbortedError{};
    if (Clock::now() >= deadline) throw OpTimeoutError{e.what()};
    throw;
  }
  if (!completed) throw AbortedError{};
}

}  // namespace

Buf::Buf(Channel* ch, std::unique_ptr<gloo::transport::UnboundBuffer> ub)
    : ch_(ch), ub_(std::move(ub)) {}

Buf::~Buf() {
  // Gloo's loop records every transfer's completion or failure under the buffer's mutex, after it
  // last touched the memory; the owner drops a Buf only once that has happened (the transfer was
  // waited for, or the world's connections were seen closed). Taking the mutex here makes that
  // order one ThreadSanitizer can see: Gloo's own wait in ~UnboundBuffer spins on a relaxed load,
  // which orders nothing for it.
  ub_->abortWaitRecv();
  ch_->unregister(ub_.get());
}

void Buf::send(int peer, uint64_t slot, size_t offset, size_t nbytes) {
  ub_->send(peer, slot, offset, nbytes);
}

void Buf::recv(int peer, uint64_t slot, size_t offset, size_t nbytes) {
  ub_->recv(peer, slot, offset, nbytes);
}

void Buf::waitSend() { waitSend(ch_->deadline()); }

void Buf::waitRecv() { waitRecv(ch_->deadline()); }

void Buf::waitSend(Deadline deadline) {
  waitOn(ch_, deadline, [&](std::chrono::milliseconds t) { return ub_->waitSend(nullptr, t); });
}

void Buf::waitRecv(Deadline deadline) {
  waitOn(ch_, deadline, [&](std::chrono::milliseconds t) { return ub_->waitRecv(nullptr, t); });
}

void Buf::interruptWait(bool send) {
  if (send) {
    ub_->abortWaitSend();
  } else {
    ub_->abortWaitRecv();
  }
}

void Buf::clearInterrupt(bool send) {
  // With an abort pending, Gloo's wait returns false at once and clears it; it neither waits nor
  // takes a completion. (Were none pending, the wait would end at the timeout, fatal to the
  // world's pairs: the REQUIRES makes one pending.)
  constexpr std::chrono::seconds kNeverReached{10};
  try {
    if (send) {
      ub_->waitSend(nullptr, kNeverReached);
    } else {
      ub_->waitRecv(nullptr, kNeverReached);
    }
  } catch (const std::exception&) {
    // A pair failed meanwhile: the world breaks on its own path; the buffer is not reused.
  }
}

std::unique_ptr<Buf> Channel::buffer(void* ptr, size_t bytes) {
  std::shared_ptr<gloo::Context> ctx;
  {
    MutexLock lock(mu_);
    if (aborted_ || !ctx_) throw AbortedError{};
    for (auto it = spare_.rbegin(); it != spare_.rend(); ++it) {
      if ((*it)->data() == ptr && (*it)->bytes() == bytes) {
        auto b = std::move(*it);
        spare_.erase(std::next(it).base());
        return b;
      }
    }
    ctx = ctx_;  // only a new buffer needs the context: reuse, the common case, never copies it
  }
  auto ub = ctx->createUnboundBuffer(ptr, bytes);
  MutexLock lock(mu_);
  if (aborted_) throw AbortedError{};
  live_.insert(ub.get());
  return std::make_unique<Buf>(this, std::move(ub));
}

void Channel::adopt(gloo::transport::UnboundBuffer* ub) {
  MutexLock lock(mu_);
  if (aborted_) throw AbortedError{};
  live_.insert(ub);
}

void Channel::recycle(std::unique_ptr<Buf> b) {
  std::unique_ptr<Buf> dropped;  // destroyed after the lock is released (~Buf takes it)
  MutexLock lock(mu_);
  if (aborted_) {
    dropped = std::move(b);
    return;
  }
  if (spare_.size() >= kSpare) {
    dropped = std::move(spare_.front());
    spare_.pop_front();
  }
  spare_.push_back(std::move(b));
}

void Channel::abortAll() {
  std::deque<std::unique_ptr<Buf>> idle;  // destroyed after the lock is released
  MutexLock lock(mu_);
  aborted_ = true;
  for (auto* ub : live_) {
    ub->abortWaitRecv();
    ub->abortWaitSend();
  }
  idle.swap(spare_);
}

void Channel::detach() {
  std::shared_ptr<gloo::Context> ctx;  // released after the lock
  MutexLock lock(mu_);
  aborted_ = true;
  ctx.swap(ctx_);
}

bool Channel::aborted() const {
  MutexLock lock(mu_);
  return aborted_;
}

void Channel::unregister(gloo::transport::UnboundBuffer* ub) {
  MutexLock lock(mu_);
  live_.erase(ub);
}

}  // namespace mw::detail
