#include "gloo/gloo_backend.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include <functional>

#include "base/thread_name.h"
#include "gloo/gloo_backend_impl.h"
#include "gloo/loop_ticker.h"

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
    got_.push_back(*v);
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
  // Every value Gloo read: the other members' published pair addresses among them.
  const std::vector<std::string>& got() const { return got_; }

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
  std::vector<std::string> got_;
};

}  // namespace

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
    MutexLock lock(mu_);
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

void GlooBackend::buryLocked() {
  while (!graveyard_.empty()) {
    auto dead = std::move(graveyard_);
    Status reason = abort_reason_ ? *abort_reason_ : Status(Code::kAborted, "aborted");
    mu_.unlock();
    for (auto& p : dead) finish(*p, reason);
    mu_.lock();
  }
}

void GlooBackend::executorLoop(std::stop_token st) {
  nameThisThread("mw-exec", cfg_.world);
  MutexLock lock(mu_);
  for (;;) {
    buryLocked();
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
  MutexLock lock(mu_);
  if (claimP2PLocked(target, deadline)) return;
  auto queued = [&]() MW_REQUIRES(mu_) {
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
      for (; p.copies_sent < p.copies; ++p.copies_sent) p.data_buf->waitSend(p.req.deadline);
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

bool GlooBackend::execute(Pending& p, bool yieldable) noexcept {
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
  corruptIfAsked(p);
  finish(p, Status::Ok());
  return false;
}

void GlooBackend::corruptIfAsked(const Pending& p) {
  const OpRequest& r = p.req;
  const bool root = r.peer == cfg_.rank;
  bool receives = false;
  switch (r.kind) {
    case OpKind::kSend:
    case OpKind::kBarrier:
      break;
    case OpKind::kBroadcast:
      receives = !root;
      break;
    case OpKind::kReduce:
    case OpKind::kGather:
      receives = root;
      break;
    default:
      receives = true;
  }
  if (!receives) return;
  const auto injected = failpoints_.corrupt().check();
  if (!injected) return;
  // In-place operations received into `in` (OpRequest), the others into `out`.
  const bool in_place = r.kind == OpKind::kRecv || r.kind == OpKind::kBroadcast ||
                        r.kind == OpKind::kAllReduce || r.kind == OpKind::kReduce;
  const Tensor& t = in_place ? r.in : r.out;
  if (t.bytes() == 0 || t.data == nullptr) return;
  auto* bytes = static_cast<unsigned char*>(t.data);
  // failnum counts the bytes from 1 (libfiu refuses a failnum of 0).
  const size_t at = static_cast<size_t>(std::max(injected->failnum, 1) - 1) % t.bytes();
  bytes[at] ^= 0x01;
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

void GlooBackend::finish(Pending& p, Status s) noexcept {
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
  MutexLock lock(mu_);
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
  MutexLock lock(close_mu_);
  if (ctx_) sockets_.closeStragglers(*ctx_);
}

void GlooBackend::abort(const Status& reason) {
  {
    MutexLock lock(mu_);
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
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  abort(Status(Code::kAborted, "world '" + cfg_.world + "' was removed"));
  calls_.stop();
  {
    // Under mu_, where the executor reads it; the wake-up after it cannot be lost (it stays
    // pending until the executor's next wait).
    MutexLock lock(mu_);
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
    MutexLock lock(mu_);
    const auto idle = [&]() MW_REQUIRES(mu_) { return !executing_ && p2p_running_ == 0; };
    while (!cv_.wait_for(lock.native(), kRearmEvery, idle)) {
      lock.unlock();
      channel_.abortAll();
      lock.lock();
    }
    buryLocked();
  }
  waitConnectionsQuiet();
  native_.clear();  // no operation runs any more; its buffers refer to the context
  MutexLock lock(close_mu_);
  // The pairs were closed above (their loop unregistered them itself): releasing the context
  // waits for no loop tick here, unlike after a failed rendezvous, and neither does releasing
  // the device, which joins its loop (loop_ticker.h).
  channel_.detach();
  ctx_.reset();
  releaseDevice(device_);
}

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
    auto sockets = PairSockets::find(*ctx, config.rank, config.size, adapter.got());
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