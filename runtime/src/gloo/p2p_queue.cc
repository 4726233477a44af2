// The point-to-point queue of a Gloo world (the GlooBackend members declared in
// gloo_backend_impl.h): sends and receives are posted at submission and completed in any order, by
// the caller that waits for one (it claims it) or else by the completer thread once due. A claim
// by a caller that may leave before the operation's deadline is bounded: the yielder thread
// interrupts the caller's wait then, and the operation goes back to the queue. They never wait
// behind a collective, nor a collective behind them.
#include <algorithm>

#include "base/thread_name.h"
#include "gloo/gloo_backend_impl.h"

namespace mw::detail {

void GlooBackend::postP2P(Pending& p) {
  OpRequest& r = p.req;
  const bool send = r.kind == OpKind::kSend;
  // The transport's faults (docs/failpoints.md): a dropped send is never posted and takes no
  // message number, so the next send to that member takes its place at the receiver; a repeated
  // one is posted as two messages.
  if (send && failpoints_.drop().check()) {
    p.copies = 0;
  } else if (send && failpoints_.repeat().check()) {
    p.copies = 2;
  }
  if (p.copies == 0) return;  // runOp waits for nothing: it succeeds
  uint64_t n = 0;
  {
    MutexLock lock(p2p_mu_);
    uint64_t& count = (send ? sent_ : received_)[{r.peer, r.tag}];
    n = count;
    count += static_cast<uint64_t>(p.copies);
  }
  p.check_id = calls_.begin(r, n);
  p.data_buf = channel_.buffer(r.in.data, r.in.bytes());
  for (int i = 0; i < p.copies; ++i) {
    const uint64_t slot = p2pSlot(r.tag, r.in.dtype, r.in.count, n + static_cast<uint64_t>(i));
    if (send) {
      p.data_buf->send(r.peer, slot, 0, r.in.bytes());
    } else {
      p.data_buf->recv(r.peer, slot, 0, r.in.bytes());
    }
  }
}

bool GlooBackend::claimP2PLocked(const WorkState* target, Deadline deadline) {
  auto it = std::find_if(p2p_.begin(), p2p_.end(),
                         [&](const auto& q) { return q->req.work.get() == target; });
  if (it == p2p_.end()) return false;
  const bool bounded = (*it)->req.deadline > deadline;
  if (bounded && deadline <= Clock::now()) {
    (*it)->due = Clock::now();  // a caller that only looks: the completer takes it
    completer_wake_.now();
    return true;
  }
  auto p = std::move(*it);
  p2p_.erase(it);
  ++p2p_running_;
  if (bounded) {
    // The caller may leave before the operation's own deadline, and a Gloo wait cut short by its
    // timeout closes every pair of the world: the caller waits with the operation's deadline,
    // and the yielder interrupts that wait at the caller's (abortWaitRecv/abortWaitSend on this
    // operation's buffer only). Until 2026-11-24 such a caller handed the operation to the
    // completer at once: a thread hand-off per call for a caller that waits in slices (Python's
    // main thread, to let signal handlers run).
    p->yield_at = deadline;
    p->yield_fired = false;
    yielding_.push_back(p.get());
    // No system call when the yielder's timer is set to an earlier time already (a caller waiting
    // in slices sets it once per slice); the yielder re-arms it for the others when it fires.
    yield_wake_.at(deadline);
  }
  mu_.unlock();
  const bool handed_back = execute(*p, bounded);
  mu_.lock();
  if (handed_back) {
    if (abort_reason_) {
      graveyard_.push_back(std::move(p));  // aborted meanwhile: failed with the others
      wake_.now();
    } else {
      p2p_.push_front(std::move(p));  // the oldest: it was queued before any still there
      completer_wake_.at(p2p_.front()->due);
    }
  }
  if (--p2p_running_ == 0 && shut_down_) cv_.notify_all();
  return true;
}

bool GlooBackend::closeYield(Pending& p) {
  MutexLock lock(mu_);
  yielding_.erase(std::remove(yielding_.begin(), yielding_.end(), &p), yielding_.end());
  return p.yield_fired;
}

void GlooBackend::yielderLoop(std::stop_token st) {
  nameThisThread("mw-yield", cfg_.world);
  MutexLock lock(mu_);
  while (!st.stop_requested()) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    for (Pending* p : yielding_) {
      if (p->yield_fired) continue;
      if (p->yield_at <= now) {
        p->yield_fired = true;  // under mu_, with the interruption: closeYield sees both or none
        // (No buffer: its posting failed, and the operation fails without waiting.)
        if (p->data_buf) p->data_buf->interruptWait(p->req.kind == OpKind::kSend);
      } else {
        next = std::min(next, p->yield_at);
      }
    }
    if (next != Clock::time_point::max()) yield_wake_.at(next);
    // As in executorLoop: every change looked at above is followed by a wake-up made after it.
    lock.unlock();
    yield_wake_.wait();
    lock.lock();
  }
}

std::unique_ptr<GlooBackend::Pending> GlooBackend::takeDueP2PLocked(Clock::time_point now,
                                                                    Clock::time_point* next) {
  *next = Clock::time_point::max();
  for (auto it = p2p_.begin(); it != p2p_.end(); ++it) {
    if ((*it)->due <= now) {
      auto p = std::move(*it);
      p2p_.erase(it);
      return p;
    }
    *next = std::min(*next, (*it)->due);
  }
  return nullptr;
}

void GlooBackend::completerLoop(std::stop_token st) {
  nameThisThread("mw-p2p", cfg_.world);
  // Gloo tells of a finished transfer only to a thread blocked on that one buffer: the completer
  // waits for one operation at a time, the oldest due. Operations a caller waits for are claimed
  // by that caller instead, so they never wait here behind another.
  MutexLock lock(mu_);
  while (!st.stop_requested()) {
    Clock::time_point next;
    if (auto p = takeDueP2PLocked(Clock::now(), &next)) {
      ++p2p_running_;
      lock.unlock();
      execute(*p);
      lock.lock();
      if (--p2p_running_ == 0 && shut_down_) cv_.notify_all();
      continue;
    }
    if (abort_reason_ && executing_) {  // see kRearmEvery
      lock.unlock();
      channel_.abortAll();
      lock.lock();
      next = std::min(next, Clock::now() + kRearmEvery);
    }
    if (next != Clock::time_point::max()) completer_wake_.at(next);
    // As in executorLoop: every change looked at above is followed by a wake-up made after it,
    // which stays pending until the next wait.
    lock.unlock();
    completer_wake_.wait();
    lock.lock();
  }
}

}  // namespace mw::detail
