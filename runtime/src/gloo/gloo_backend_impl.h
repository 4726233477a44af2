// The Gloo backend's class, shared by its two files: gloo_backend.cc (submission, the executor,
// running and finishing operations, abort and shutdown) and p2p_queue.cc (the point-to-point
// queue: posting at submission, claims by waiting callers, the completer and the yielder).
// Private to gloo/; everything else reaches the backend through gloo_backend.h.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/deferred_wake.h"
#include "base/mutex.h"
#include "gloo/call_check.h"
#include "gloo/channel.h"
#include "gloo/collectives.h"
#include "gloo/gloo_backend.h"
#include "gloo/pair_sockets.h"

namespace mw::detail {

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

  void submit(OpRequest op, bool caller_waits) override MW_EXCLUDES(mu_);
  void abort(const Status& reason) override MW_EXCLUDES(mu_);
  void shutdown() override MW_EXCLUDES(mu_, close_mu_);
  void tick(Clock::time_point now) override { calls_.tick(now); }

  // WorkDriver. driveUntil runs queued operations in this thread until `target` completes, while
  // nobody else runs them and each one's deadline is no later than `deadline`; what it leaves is
  // expedited.
  void driveUntil(const WorkState* target, Deadline deadline) override MW_EXCLUDES(mu_);
  void expedite(const WorkState* target) override MW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    expediteLocked(target);
  }

 private:
  struct Pending {
    OpRequest req;
    // Fields below marked "mu_" are the backend's mu_ once the operation is queued (the
    // analysis cannot name another object's mutex from here).
    Clock::time_point due;  // when the executor takes it (mu_)
    uint64_t check_id = 0;  // in calls_, while it runs; 0 when not registered
    std::unique_ptr<Buf> data_buf;
    std::unique_ptr<Collective> collective;  // dropped with the buffers, in finish()
    std::optional<std::string> post_error;
    bool started = false;  // runOp has looked at the failpoints (once per operation)
    // A send's copies on the wire: 1, or 0 (mw/gloo/drop) or 2 (mw/gloo/repeat); and how many
    // of them runOp has waited for (a send run in several turns resumes where it was).
    int copies = 1;
    int copies_sent = 0;
    // A send or receive run by a caller who may leave before its deadline (claimP2PLocked): at
    // yield_at the yielder interrupts the caller's wait (yield_fired), and the caller hands the
    // operation back (mu_).
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
  bool closeYield(Pending& p) MW_EXCLUDES(mu_);
  // Takes the oldest due point-to-point operation out of p2p_, or returns nullptr and sets `next`
  // to when the next one is due. REQUIRES: mu_ held.
  std::unique_ptr<Pending> takeDueP2PLocked(Clock::time_point now, Clock::time_point* next)
      MW_REQUIRES(mu_);
  // Runs `target`, a queued point-to-point operation, in this thread until it completes or, when
  // its deadline is later than `deadline`, until `deadline`: then the operation goes back to
  // p2p_ for the completer (or the caller's next wait). Returns false when `target` is not in
  // p2p_ (running or done). REQUIRES: mu_ held (released meanwhile).
  bool claimP2PLocked(const WorkState* target, Deadline deadline) MW_REQUIRES(mu_);
  // Fails the operations in graveyard_. REQUIRES: mu_ held (released meanwhile).
  // (This and claimP2PLocked release mu_ itself and take it again before they return, so the
  // caller's MutexLock holds it again, as the analysis assumes.)
  void buryLocked() MW_REQUIRES(mu_);
  // Makes `target` and every operation queued before it due now, and wakes the executor for them
  // unless an operation is running (releaseLocked wakes it then). REQUIRES: mu_ held.
  void expediteLocked(const WorkState* target) MW_REQUIRES(mu_);
  // Takes the next operation to run, or nullptr. REQUIRES: mu_ held.
  std::unique_ptr<Pending> claimLocked() MW_REQUIRES(mu_);
  void releaseLocked() MW_REQUIRES(mu_);
  // Runs `p` and finishes it. With `yieldable` (a bounded run of a send or receive), an
  // interruption by the yielder returns true instead, the operation unfinished and not failed.
  // Gloo's errors are caught inside; anything else escaping (memory exhausted while reporting)
  // ends the process: the callers release mu_ around it and count it running, and a half-done
  // operation would leave both wrong (a hang at shutdown).
  bool execute(Pending& p, bool yieldable = false) noexcept MW_EXCLUDES(mu_);
  void runOp(Pending& p);
  // mw/gloo/corrupt: flips the lowest bit of one byte (the failnum-th, counted from 1, modulo the
  // size) of what a receiving operation that succeeded received, when the point fires.
  void corruptIfAsked(const Pending& p);
  void report(Pending& p, Cause cause, int peer, const std::string& detail) MW_EXCLUDES(mu_);
  void reportGlooError(Pending& p, const std::string& what) MW_EXCLUDES(mu_);
  // Completes `p` with `s` (noexcept: see execute).
  void finish(Pending& p, Status s) noexcept MW_EXCLUDES(mu_);
  Status abortReason() MW_EXCLUDES(mu_);
  // After an abort: returns once every connection of the world is closed, after closing the ones
  // Gloo's loop has not closed within kQuietGrace. Gloo no longer touches any buffer then.
  void waitConnectionsQuiet();

  const GlooConfig cfg_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;  // reset under close_mu_ at shutdown
  const PairSockets sockets_;
  Mutex close_mu_;                // serializes closing the pairs with dropping ctx_
  std::atomic<bool> cut_{false};  // abort() has shut the sockets down
  Channel channel_;
  BackendErrorHandler on_error_;
  CallCheck calls_;  // names disagreeing calls; stopped at shutdown, before the store goes
  const OpFailPoints failpoints_;

  Mutex mu_;
  std::condition_variable cv_;  // shutdown() waits on it for !executing_
  DeferredWake wake_;           // wakes the executor: queued work is due, a burial, a stop
  // Collectives, run one at a time in submission order.
  std::deque<std::unique_ptr<Pending>> queue_ MW_GUARDED_BY(mu_);
  // Point-to-point operations, posted at submission and completed in any order: by a thread that
  // waits for one (it claims it), else by the completer once due. They never wait behind a
  // collective, nor a collective behind them.
  std::list<std::unique_ptr<Pending>> p2p_ MW_GUARDED_BY(mu_);
  int p2p_running_ MW_GUARDED_BY(mu_) = 0;  // run by waiting threads or the completer
  DeferredWake completer_wake_;             // wakes the completer: a due operation, a stop
  std::vector<Pending*> yielding_ MW_GUARDED_BY(mu_);  // bounded runs of sends and receives
  DeferredWake yield_wake_;  // wakes the yielder: a new bounded run, a stop
  // Aborted before they ran: the executor fails them once Gloo has let go of their buffers.
  std::deque<std::unique_ptr<Pending>> graveyard_ MW_GUARDED_BY(mu_);
  // Messages posted per (peer, tag), sends and receives apart: the n-th send to a peer on a tag
  // matches the n-th receive from us on that tag, and only that one.
  Mutex p2p_mu_;
  std::map<std::pair<int, int>, uint64_t> sent_ MW_GUARDED_BY(p2p_mu_);
  std::map<std::pair<int, int>, uint64_t> received_ MW_GUARDED_BY(p2p_mu_);
  std::optional<Status> abort_reason_ MW_GUARDED_BY(mu_);
  bool shut_down_ MW_GUARDED_BY(mu_) = false;
  bool executing_ MW_GUARDED_BY(mu_) = false;  // an operation is running

  // Only the thread running an operation (executing_ hands them over under mu_).
  uint64_t seq_ = 0;
  std::vector<char> scratch_;
  std::vector<char> work_;
  NativeOptionsCache native_;  // cleared at shutdown, before the context goes

  std::jthread executor_;  // last three: start once everything above exists
  std::jthread completer_;
  std::jthread yielder_;
};

}  // namespace mw::detail
