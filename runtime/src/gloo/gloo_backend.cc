#include "gloo/gloo_backend.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/call_check.h"
#include "core/deferred_wake.h"
#include "core/thread_name.h"
#include "gloo/channel.h"
#include "gloo/collectives.h"
#include "gloo/loop_ticker.h"
#include "gloo/pair_sockets.h"

namespace mw::detail {

namespace {

// Thrown through Gloo's rendezvous code when our store fails; carries the real status out.
struct StoreFailure {
  Status status;
};

// Gloo's rendezvous store interface over the world's StoreClient, bounded by one deadline.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  // `failing` runs just before a store failure is thrown through Gloo.
  StoreAdapter(StoreClient& client, std::string prefix, Deadline deadline,
               std::function<void()> failing)
      : client_(client),
        prefix_(std::move(prefix)),
        deadline_(deadline),
        failing_(std::move(failing)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(client_.set(prefix_ + key, std::string(data.begin(), data.end()), deadline_));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = client_.get(prefix_ + key, deadline_);
    check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, {}); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    // Gloo passes its context timeout, which the rendezvous sets to a fifth of what is left (to
    // bound its connect waits); waiting for the other members may take the whole deadline.
    (void)t;
    check(client_.wait(full, deadline_));
  }

 private:
  void check(const Status& s) {
    if (s.ok()) return;
    failing_();
    throw StoreFailure{s};
  }
  StoreClient& client_;
  std::string prefix_;
  Deadline deadline_;
  std::function<void()> failing_;
};

// How long an aborted world lets Gloo's loop close its shut-down connections itself (about a
// millisecond; longer on a loaded machine or in a sanitizer build) before it closes the ones left
// from outside (see pair_sockets.h).
constexpr auto kQuietGrace = std::chrono::milliseconds(100);
// A failure breaks the world, which aborts us, possibly on another thread (the one that saw the
// failure first); how long a failed operation waits for that abort before it lets go regardless.
constexpr auto kAbortLimit = std::chrono::milliseconds(5000);
// Gloo's ring all_reduce waits on its buffers several times and ignores an interrupted wait;
// each abortWaitSend/abortWaitRecv is consumed by the next wait and cleared, so the wait after it
// blocked until the operation's deadline (a resumed member stayed in all_reduce for seconds). After
// an abort, the aborts are re-armed this often until the operation has left Gloo.
constexpr auto kRearmEvery = std::chrono::milliseconds(2);

class GlooBackend final : public Backend,
                          public WorkDriver,
                          public std::enable_shared_from_this<GlooBackend> {
 public:
  GlooBackend(GlooConfig cfg, std::shared_ptr<gloo::transport::Device> dev,
              std::shared_ptr<gloo::rendezvous::Context> ctx, PairSockets sockets,
              StoreClient& store, BackendErrorHandler on_error, OpFailPoints failpoints)
      : cfg_(std::move(cfg)),
        device_(std::move(dev)),
        ctx_(std::move(ctx)),
        sockets_(std::move(sockets)),
        channel_(ctx_),
        on_error_(on_error),
        calls_(store, cfg_.rank, cfg_.size, std::move(on_error)),
        failpoints_(std::move(failpoints)),
        executor_([this](std::stop_token st) { executorLoop(st); }),
        completer_([this](std::stop_token st) { completerLoop(st); }),
        yielder_([this](std::stop_token st) { yielderLoop(st); }) {}

  ~GlooBackend() override { shutdown(); }

  void submit(OpRequest op, bool caller_waits) override;
  void abort(const Status& reason) override;
  void shutdown() override;
  void tick(Clock::time_point now) override { calls_.tick(now); }

  // WorkDriver. driveUntil runs queued operations in this thread until `target` completes, while
  // nobody else runs them and each one's deadline is no later than `deadline`; what it leaves is
  // expedited.
  void driveUntil(const WorkState* target, Deadline deadline) override;
  void expedite(const WorkState* target) override {
    std::lock_guard lock(mu_);
    expediteLocked(target);
  }

 private:
  struct Pending {
    OpRequest req;
    Clock::time_point due;  // when the executor takes it (GUARDED_BY(mu_) once queued)
    uint64_t check_id = 0;  // in calls_, while it runs; 0 when not registered
    std::unique_ptr<Buf> data_buf;
    std::unique_ptr<Collective> collective;  // dropped with the buffers, in finish()
    std::optional<std::string> post_error;
    bool started = false;  // runOp has looked at the failpoints (once per operation)
    // A send or receive run by a caller who may leave before its deadline (claimP2PLocked): at
    // yield_at the yielder interrupts the caller's wait (yield_fired), and the caller hands the
    // operation back. GUARDED_BY(mu_).
    Clock::time_point yield_at{};
    bool yield_fired = false;
  };

  static bool isP2P(const OpRequest& r) {
    return r.kind == OpKind::kSend || r.kind == OpKind::kRecv;
  }
  void postP2P(Pending& p);
  void executorLoop(std::stop_token st);
  // Completes the point-to-point operations nobody waits for once they are due, oldest first.
  void completerLoop(std::stop_token st);
  // Interrupts the wait of each caller in yielding_ at its yield_at. A thread of its own: the
  // completer and the executor may be blocked in Gloo for as long as an operation lasts.
  void yielderLoop(std::stop_token st);
  // Takes `p` out of yielding_; whether the yielder interrupted it. Called once per bounded run.
  bool closeYield(Pending& p);
  // Takes the oldest due point-to-point operation out of p2p_, or returns nullptr and sets `next`
  // to when the next one is due. REQUIRES: mu_ held.
  std::unique_ptr<Pending> takeDueP2PLocked(Clock::time_point now, Clock::time_point* next);
  // Runs `target`, a queued point-to-point operation, in this thread until it completes or, when
  // its deadline is later than `deadline`, until `deadline`: then the operation goes back to
  // p2p_ for the completer (or the caller's next wait). Returns false when `target` is not in
  // p2p_ (running or done). REQUIRES: mu_ held by `lock` (released meanwhile).
  bool claimP2PLocked(std::unique_lock<std::mutex>& lock, const WorkState* target,
                      Deadline deadline);
  // Fails the operations in graveyard_. REQUIRES: mu_ held by `lock` (released meanwhile).
  void buryLocked(std::unique_lock<std::mutex>& lock);
  // Makes `target` and every operation queued before it due now, and wakes the executor for them
  // unless an operation is running (releaseLocked wakes it then). REQUIRES: mu_ held.
  void expediteLocked(const WorkState* target);
  // Takes the next operation to run, or nullptr. REQUIRES: mu_ held.
  std::unique_ptr<Pending> claimLocked();
  void releaseLocked();
  // Runs `p` and finishes it. With `yieldable` (a bounded run of a send or receive), an
  // interruption by the yielder returns true instead, the operation unfinished and not failed.
  bool execute(Pending& p, bool yieldable = false);
  void runOp(Pending& p);
  void report(Pending& p, Cause cause, int peer, const std::string& detail);
  void reportGlooError(Pending& p, const std::string& what);
  void finish(Pending& p, Status s);
  Status abortReason();
  // After an abort: returns once every connection of the world is closed, after closing the ones
  // Gloo's loop has not closed within kQuietGrace. Gloo no longer touches any buffer then.
  void waitConnectionsQuiet();

  const GlooConfig cfg_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;  // reset under close_mu_ at shutdown
  const PairSockets sockets_;
  std::mutex close_mu_;           // serializes closing the pairs with dropping ctx_
  std::atomic<bool> cut_{false};  // abort() has shut the sockets down
  Channel channel_;
  BackendErrorHandler on_error_;
  CallCheck calls_;  // names disagreeing calls; stopped at shutdown, before the store goes
  const OpFailPoints failpoints_;

  std::mutex mu_;
  std::condition_variable cv_;  // shutdown() waits on it for !executing_
  DeferredWake wake_;           // wakes the executor: queued work is due, a burial, a stop
  // Collectives, run one at a time in submission order.
  std::deque<std::unique_ptr<Pending>> queue_;  // GUARDED_BY(mu_)
  // Point-to-point operations, posted at submission and completed in any order: by a thread that
  // waits for one (it claims it), else by the completer once due. They never wait behind a
  // collective, nor a collective behind them.
  std::list<std::unique_ptr<Pending>> p2p_;  // GUARDED_BY(mu_)
  int p2p_running_ = 0;             // GUARDED_BY(mu_): run by waiting threads or the completer
  DeferredWake completer_wake_;     // wakes the completer: a due operation, a stop
  std::vector<Pending*> yielding_;  // GUARDED_BY(mu_): bounded runs of sends and receives
  DeferredWake yield_wake_;         // wakes the yielder: a new bounded run, a stop
  // Aborted before they ran: the executor fails them once Gloo has let go of their buffers.
  std::deque<std::unique_ptr<Pending>> graveyard_;  // GUARDED_BY(mu_)
  // Messages posted per (peer, tag), sends and receives apart: the n-th send to a peer on a tag
  // matches the n-th receive from us on that tag, and only that one.
  std::mutex p2p_mu_;
  std::map<std::pair<int, int>, uint64_t> sent_, received_;  // GUARDED_BY(p2p_mu_)
  std::optional<Status> abort_reason_;                       // GUARDED_BY(mu_)
  bool shut_down_ = false;                                   // GUARDED_BY(mu_)
  bool executing_ = false;  // GUARDED_BY(mu_): an operation is running

  // Only the thread running an operation (executing_ hands them over under mu_).
  uint64_t seq_ = 0;
  std::vector<char> scratch_;
  std::vector<char> work_;
  NativeOptionsCache native_;  // cleared at shutdown, before the context goes

  std::jthread executor_;  // last three: start once everything above exists
  std::jthread completer_;
  std::jthread yielder_;
};

void GlooBackend::postP2P(Pending& p) {
  OpRequest& r = p.req;
  const bool send = r.kind == OpKind::kSend;
  uint64_t n = 0;
  {
    std::lock_guard lock(p2p_mu_);
    n = (send ? sent_ : received_)[{r.peer, r.tag}]++;
  }
  p.check_id = calls_.begin(r, n);
  p.data_buf = channel_.buffer(r.in.data, r.in.bytes());
  const uint64_t slot = p2pSlot(r.tag, r.in.dtype, r.in.count, n);
  if (send) {
    p.data_buf->send(r.peer, slot, 0, r.in.bytes());
  } else {
    p.data_buf->recv(r.peer, slot, 0, r.in.bytes());
  }
}

void GlooBackend::submit(OpRequest op, bool caller_waits) {
  auto p = std::make_unique<Pending>();
  p->req = std::move(op);
  p->req.work->driver = weak_from_this();
  const bool p2p = isP2P(p->req);
  if (p2p) {
    // Posting at submission lets both sides of an exchange make progress whatever the order in
    // which their executors wait.
    try {
      postP2P(*p);
    } catch (const AbortedError&) {
      // Fails below with the abort reason.
    } catch (const std::exception& e) {
      p->post_error = e.what();
    }
  }
  std::optional<Status> reason;
  Clock::time_point due;
  {
    std::lock_guard lock(mu_);
    if (abort_reason_) {
      reason = abort_reason_;
    } else {
      due = Clock::now() + cfg_.executor_grace;
      p->due = due;
      if (!p2p) {
        queue_.push_back(std::move(p));
      } else {
        p2p_.push_back(std::move(p));
        // A caller about to wait claims it at once; otherwise the completer takes it once due
        // (unless a caller claimed it first), as the executor does collectives.
        if (!caller_waits) completer_wake_.at(due);
        return;
      }
    }
  }
  if (reason) return finish(*p, *reason);
  // A caller about to wait runs the operation itself (driveUntil); any other operation is the
  // executor's once its grace has passed, unless a waiting caller took it or expedited it first.
  if (!caller_waits) wake_.at(due);
}

std::unique_ptr<GlooBackend::Pending> GlooBackend::claimLocked() {
  if (executing_ || queue_.empty()) return nullptr;
  executing_ = true;
  auto p = std::move(queue_.front());
  queue_.pop_front();
  // The executor's wake-up, if one is set, is left to come: it finds nothing due and sleeps on.
  // That costs one context switch per grace period at most, while cancelling cost a system call
  // per operation (and a later operation then sets the timer again, another one; a timer that is
  // still set to an earlier time needs no new call).
  return p;
}

void GlooBackend::releaseLocked() {
  executing_ = false;
  // What is queued behind is the executor's once it is due (a caller waiting for it may still
  // take it first).
  if (!queue_.empty()) wake_.at(queue_.front()->due);
  if (shut_down_) cv_.notify_all();
}

void GlooBackend::buryLocked(std::unique_lock<std::mutex>& lock) {
  while (!graveyard_.empty()) {
    auto dead = std::move(graveyard_);
    Status reason = abort_reason_ ? *abort_reason_ : Status(Code::kAborted, "aborted");
    lock.unlock();
    for (auto& p : dead) finish(*p, reason);
    lock.lock();
  }
}

void GlooBackend::executorLoop(std::stop_token st) {
  nameThisThread("mw-exec", cfg_.world);
  std::unique_lock lock(mu_);
  for (;;) {
    buryLocked(lock);
    if (st.stop_requested() && queue_.empty()) return;
    std::unique_ptr<Pending> p;
    if (!queue_.empty() && !executing_) {
      if (Clock::now() >= queue_.front()->due) {
        p = claimLocked();
      } else {
        wake_.at(queue_.front()->due);
      }
    }
    if (p) {
      lock.unlock();
      execute(*p);
      lock.lock();
      releaseLocked();
      continue;
    }
    // Every change the loop above looks at is followed by a wake-up (wake_.now() or .at()) made
    // after it, and a wake-up stays pending until the next wait: none can be lost between the
    // check and the wait.
    lock.unlock();
    wake_.wait();
    lock.lock();
  }
}

void GlooBackend::driveUntil(const WorkState* target, Deadline deadline) {
  std::unique_lock lock(mu_);
  if (claimP2PLocked(lock, target, deadline)) return;
  auto queued = [&] {
    return std::any_of(queue_.begin(), queue_.end(),
                       [&](const auto& q) { return q->req.work.get() == target; });
  };
  // A point-to-point operation that another thread completes, or a collective that runs: the
  // caller waits for its work; collectives queued ahead are run only for a queued target.
  while (!target->isDone() && queued()) {
    if (executing_ || queue_.empty() || queue_.front()->req.deadline > deadline) {
      // Someone else runs the world's operations (or the caller may not stay for the next one):
      // the executor takes over at once rather than at the end of the grace.
      return expediteLocked(target);
    }
    auto p = claimLocked();
    lock.unlock();
    execute(*p);
    lock.lock();
    releaseLocked();
  }
}

bool GlooBackend::claimP2PLocked(std::unique_lock<std::mutex>& lock, const WorkState* target,
                                 Deadline deadline) {
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
  lock.unlock();
  const bool handed_back = execute(*p, bounded);
  lock.lock();
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
  std::lock_guard lock(mu_);
  yielding_.erase(std::remove(yielding_.begin(), yielding_.end(), &p), yielding_.end());
  return p.yield_fired;
}

void GlooBackend::yielderLoop(std::stop_token st) {
  nameThisThread("mw-yield", cfg_.world);
  std::unique_lock lock(mu_);
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
  std::unique_lock lock(mu_);
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

void GlooBackend::expediteLocked(const WorkState* target) {
  auto p2p = std::find_if(p2p_.begin(), p2p_.end(),
                          [&](const auto& q) { return q->req.work.get() == target; });
  if (p2p != p2p_.end()) {
    (*p2p)->due = std::min((*p2p)->due, Clock::now());
    completer_wake_.now();
    return;
  }
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&](const auto& q) { return q->req.work.get() == target; });
  if (it == queue_.end()) return;  // it runs, or has completed
  const Clock::time_point now = Clock::now();
  for (auto q = queue_.begin(); q != std::next(it); ++q) (*q)->due = std::min((*q)->due, now);
  if (!executing_) wake_.now();
}

void GlooBackend::runOp(Pending& p) {
  if (p.post_error) throw gloo::IoException(*p.post_error);
  // An injected error is thrown where Gloo's own would surface, and takes the same path; once per
  // operation, even when a send or receive is run in several turns (claimP2PLocked).
  if (!p.started) {
    p.started = true;
    failpoints_.delayIfAsked();
    if (auto injected = failpoints_[p.req.kind].check()) {
      throw gloo::IoException(std::string(opKindName(p.req.kind)) + ": " +
                              errnoText(injected->failnum) + injected->suffix());
    }
  }
  switch (p.req.kind) {
    case OpKind::kSend:
      p.data_buf->waitSend(p.req.deadline);
      return;
    case OpKind::kRecv:
      p.data_buf->waitRecv(p.req.deadline);
      return;
    default: {
      const uint64_t seq = seq_++;
      p.check_id = calls_.begin(p.req, seq);
      CollectiveEnv env{ctx_, cfg_.rank, cfg_.size, seq, &channel_, &scratch_, &work_, &native_};
      p.collective = std::make_unique<Collective>(p.req, env);
      p.collective->run();
    }
  }
}

bool GlooBackend::execute(Pending& p, bool yieldable) {
  if (!isP2P(p.req)) channel_.setDeadline(p.req.deadline);
  try {
    runOp(p);
  } catch (const AbortedError&) {
    // An interruption with the channel intact is the yielder's: the caller's turn is over.
    if (yieldable && closeYield(p) && !channel_.aborted()) return true;
    finish(p, abortReason());
    return false;
  } catch (const OpTimeoutError& e) {
    if (yieldable) closeYield(p);
    report(p, Cause::kOpTimeout, -1,
           std::string(opKindName(p.req.kind)) + " passed its deadline (" + e.detail + ")");
    return false;
  } catch (const std::exception& e) {
    if (yieldable) closeYield(p);
    reportGlooError(p, e.what());
    return false;
  }
  // Completed; an interruption that came after the wait had succeeded is still pending on the
  // buffer, and the buffer is recycled on success: clear it.
  if (yieldable && closeYield(p) && p.data_buf) {
    p.data_buf->clearInterrupt(p.req.kind == OpKind::kSend);
  }
  finish(p, Status::Ok());
  return false;
}

// A transfer that fails because the connection closed or was reset means the member at the other
// end is gone (or cut off): say so, and name it, rather than blaming the library.
void GlooBackend::reportGlooError(Pending& p, const std::string& what) {
  int peer = sockets_.peerIn(what);
  if (peer < 0 && cfg_.size == 2) peer = 1 - cfg_.rank;  // only one member it can be
  static const char* kLost[] = {"Connection reset by peer", "Connection closed by peer",
                                "Broken pipe", "Socket closed"};
  for (const char* k : kLost) {
    if (what.find(k) != std::string::npos) {
      return report(p, Cause::kPeerDied, peer,
                    std::string("connection lost during ") + opKindName(p.req.kind) +
                        " (gloo: " + what + ")");
    }
  }
  report(p, Cause::kBackendError, peer, std::string("gloo: ") + what);
}

void GlooBackend::report(Pending& p, Cause cause, int peer, const std::string& detail) {
  finish(p, on_error_(cause, peer, detail));  // breaks the world, which aborts us
}

void GlooBackend::finish(Pending& p, Status s) {
  // After a failure Gloo's loop may still be signalling or filling this operation's buffers until
  // it has closed the world's (shut down) connections: only then are they ours to drop, and only
  // after that may the caller free the memory they point to.
  if (p.check_id != 0) calls_.end(p.check_id);
  if (!s.ok()) waitConnectionsQuiet();
  // A send or receive that succeeded was waited for: its buffer is idle and can serve the next
  // message over the same memory (see channel.h).
  if (s.ok() && p.data_buf) channel_.recycle(std::move(p.data_buf));
  p.data_buf.reset();
  p.collective.reset();
  p.req.work->complete(std::move(s));
}

Status GlooBackend::abortReason() {
  std::lock_guard lock(mu_);
  if (abort_reason_) return *abort_reason_;
  return Status(Code::kBackendError, "world '" + cfg_.world + "': operation failed");
}

void GlooBackend::waitConnectionsQuiet() {
  auto waitFor = [](auto done, std::chrono::milliseconds limit) {
    auto until = deadlineIn(limit);
    while (!done() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return done();
  };
  if (!waitFor([&] { return cut_.load(); }, kAbortLimit)) return;  // never aborted
  if (waitFor([&] { return sockets_.allClosed(); }, kQuietGrace)) return;
  // The channel is aborted and the sockets are shut down, so every operation of the world has
  // failed or is failing: nothing waits on these pairs any more.
  std::lock_guard lock(close_mu_);
  if (ctx_) sockets_.closeStragglers(*ctx_);
}

void GlooBackend::abort(const Status& reason) {
  {
    std::lock_guard lock(mu_);
    if (abort_reason_) return;
    abort_reason_ = reason;
    for (auto& p : queue_) graveyard_.push_back(std::move(p));
    queue_.clear();
    for (auto& p : p2p_) graveyard_.push_back(std::move(p));
    p2p_.clear();
  }
  channel_.abortAll();
  // Data may still arrive for buffers we drop; cut the connections so Gloo's loop closes them
  // itself instead of spinning on unread bytes (see pair_sockets.h). The executor fails the
  // queued operations once that is done; abort itself never waits (the watchdog calls it).
  sockets_.shutdownAll();
  cut_.store(true);
  wake_.now();
  completer_wake_.now();  // it re-arms the aborts while an operation is still in Gloo
}

void GlooBackend::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  abort(Status(Code::kAborted, "world '" + cfg_.world + "' was removed"));
  calls_.stop();
  {
    // Under mu_, where the executor reads it; the wake-up after it cannot be lost (it stays
    // pending until the executor's next wait).
    std::lock_guard lock(mu_);
    executor_.request_stop();
    completer_.request_stop();
    yielder_.request_stop();
  }
  wake_.now();
  completer_wake_.now();
  yield_wake_.now();
  if (executor_.joinable()) executor_.join();
  if (completer_.joinable()) completer_.join();
  if (yielder_.joinable()) yielder_.join();
  {
    // A thread running an operation inline finishes it promptly now that we are aborted (the
    // completer is gone: the aborts are re-armed here, see kRearmEvery).
    std::unique_lock lock(mu_);
    const auto idle = [&] { return !executing_ && p2p_running_ == 0; };
    while (!cv_.wait_for(lock, kRearmEvery, idle)) {
      lock.unlock();
      channel_.abortAll();
      lock.lock();
    }
    buryLocked(lock);
  }
  waitConnectionsQuiet();
  native_.clear();  // no operation runs any more; its buffers refer to the context
  std::lock_guard lock(close_mu_);
  // The pairs were closed above (their loop unregistered them itself): releasing the context
  // waits for no loop tick here, unlike after a failed rendezvous, and neither does releasing
  // the device, which joins its loop (loop_ticker.h).
  channel_.detach();
  ctx_.reset();
  releaseDevice(device_);
}

}  // namespace

Result<std::shared_ptr<Backend>> createGlooBackend(const GlooConfig& config, StoreClient& store,
                                                   BackendErrorHandler on_error,
                                                   Deadline deadline) {
  const std::string where = "world '" + config.world + "' (gloo, rank " +
                            std::to_string(config.rank) + " of " + std::to_string(config.size) +
                            ")";
  OpFailPoints failpoints("gloo", config.world);
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  // A failed rendezvous releases the pairs it made (in Gloo, while our store failure unwinds
  // through it, and here) at once, not a loop tick of 10 ms apiece (loop_ticker.h).
  std::optional<LoopTicker> ticker;
  auto release = [&] {
    if (!ticker) ticker.emplace(device);
    ctx.reset();
    ticker.reset();
  };
  try {
    if (auto injected = failpoints.init().check()) {
      throw gloo::IoException(errnoText(injected->failnum) + injected->suffix());
    }
    failpoints.delayIfAsked();  // a slow connection of the members
    gloo::transport::tcp::attr attr;
    attr.hostname = config.bind_host;
    device = gloo::transport::tcp::CreateDevice(attr);
    ctx = std::make_shared<gloo::rendezvous::Context>(config.rank, config.size);
    // Gloo waits up to five times the context's timeout for a pair to connect
    // (Pair::waitUntilConnected), for instance for a peer that read a stale address from a store
    // about to close and will never come: a fifth of what is left keeps that within our deadline.
    ctx->setTimeout(std::max(std::chrono::milliseconds(1), remaining(deadline) / 5));
    StoreAdapter adapter(store, "gloo/", deadline, [&] {
      if (!ticker) ticker.emplace(device);
    });
    ctx->connectFullMesh(adapter, device);
    // Our waits pass their own deadlines; this only bounds calls that pass none.
    ctx->setTimeout(std::chrono::hours(24));
    auto sockets = PairSockets::find(*ctx, config.rank, config.size);
    return std::shared_ptr<Backend>(
        std::make_shared<GlooBackend>(config, std::move(device), std::move(ctx), std::move(sockets),
                                      store, std::move(on_error), std::move(failpoints)));
  } catch (const StoreFailure& f) {
    release();
    return Status(f.status.code(), where + ": rendezvous failed: " + f.status.message());
  } catch (const std::exception& e) {
    release();
    Code code = Clock::now() >= deadline ? Code::kTimeout : Code::kBackendError;
    return Status(code, where + ": connecting to the other members failed: " + e.what());
  }
}

}  // namespace mw::detail
