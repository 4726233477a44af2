#include "nccl/nccl_backend_impl.h"

namespace mw::detail {

namespace nccl_impl {

using namespace std::chrono_literals;

cudaEvent_t NcclBackend::takeEvent() {
  MutexLock lock(events_mu_);
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  // Blocking sync: a completer that waits in cudaEventSynchronize sleeps until the GPU's
  // interrupt instead of spinning (the other modes only query).
  const unsigned flags = cudaEventDisableTiming |
                         (mode_ == NcclCompletion::kSpin ? 0u : unsigned{cudaEventBlockingSync});
  // The pool's events are the world's device's: the calling thread may be on another one.
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  if (switched) api_.cudaSetDevice(cfg_.device);
  const cudaError_t r = api_.cudaEventCreateWithFlags(&e, flags);
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (r != cudaSuccess) {
    api_.cudaGetLastError();
    return nullptr;
  }
  events_.push_back(e);
  return e;
}

void NcclBackend::giveEvent(cudaEvent_t e) {
  if (e == nullptr) return;
  MutexLock lock(events_mu_);
  free_events_.push_back(e);
}

std::string NcclBackend::streamName(void* stream) const {
  if (stream == nullptr) return "(the default stream)";
  char s[32];
  std::snprintf(s, sizeof s, "%p", stream);
  return s;
}

Status NcclBackend::orderAfterCaller(OpRequest& op) {
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  cudaError_t e = switched ? api_.cudaSetDevice(cfg_.device) : cudaSuccess;
  // A stream being captured into a CUDA graph would pull the world's stream into the capture
  // (cudaStreamWaitEvent on an event recorded there): the world's work would be recorded, not
  // run, and the caller's capture broken.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const char* call = "cudaStreamIsCapturing";
  if (e == cudaSuccess) {
    e = api_.cudaStreamIsCapturing(static_cast<cudaStream_t>(op.stream), &capture);
  }
  cudaEvent_t ready = nullptr;
  if (e == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
    call = "cudaEventRecord";
    ready = takeEvent();
    e = ready == nullptr ? cudaErrorMemoryAllocation
                         : api_.cudaEventRecord(ready, static_cast<cudaStream_t>(op.stream));
  }
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (e == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
    op.ready = ready;
    return Status::Ok();
  }
  if (e != cudaSuccess) api_.cudaGetLastError();  // not sticky: the caller's CUDA calls go on
  giveEvent(ready);
  const std::string prefix = "world '" + cfg_.world + "': " + opKindName(op.kind) +
                             " cannot be ordered after the caller's CUDA stream " +
                             streamName(op.stream);
  if (e == cudaSuccess) {
    return Status(Code::kInvalidArgument,
                  prefix +
                      ": it is being captured into a CUDA graph, and an nccl world's "
                      "operations cannot be captured (submit outside the capture)");
  }
  return Status(Code::kInvalidArgument, prefix + ": " + call + ": " + cudaText(e) +
                                            " (the current stream must be a live stream of cuda:" +
                                            std::to_string(cfg_.device) + ")");
}

Status NcclBackend::abortReason() {
  MutexLock lock(mu_);
  return abort_reason_ ? *abort_reason_
                       : Status(Code::kBackendError, "world '" + cfg_.world + "' failed");
}

// ---- submission and launch ----

void NcclBackend::submit(OpRequest op, bool /*caller_waits*/) {
  op.work->driver = weak_from_this();
  MutexLock lock(mu_);
  // Room: a caller that runs ahead of the GPU waits here, as a launch waits when CUDA's queue is
  // full. The abort, or the completion of the oldest operation, ends the wait.
  room_cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) {
    return abort_reason_ || inflight_.size() + queue_.size() < kMaxInFlight;
  });
  if (abort_reason_) {
    Status s = *abort_reason_;
    lock.unlock();
    op.work->complete(std::move(s));
    return;
  }
  if (!launching_ && queue_.empty()) {
    launching_ = true;  // the token: this thread launches, nobody else enqueues meanwhile
    lock.unlock();
    launchInline(std::move(op));
    return;
  }
  // Behind another launch: ordered after the caller's stream now, launched by the executor.
  // Under mu_: the drain destroys the events only after the abort, which this sees.
  Status s = orderAfterCaller(op);
  if (!s.ok()) {
    lock.unlock();
    op.work->complete(std::move(s));
    return;
  }
  queue_.push_back(std::move(op));
  lock.unlock();
  cv_.notify_one();
}

void NcclBackend::launchInline(OpRequest op) {
  Status s = orderAfterCaller(op);
  if (!s.ok()) {
    {
      MutexLock lock(mu_);
      launching_ = false;
    }
    cv_.notify_one();                 // the executor: ops may have queued meanwhile
    room_cv_.notify_all();            // the drain may wait for the token
    op.work->complete(std::move(s));  // a refused stream fails the operation, not the world
    return;
  }
  std::unique_lock gpu(launchMutex(cfg_.device), std::try_to_lock);
  if (!gpu.owns_lock()) {
    // Another world is launching on this GPU: the executor launches this one when it can.
    std::optional<Status> aborted;
    {
      MutexLock lock(mu_);
      if (abort_reason_) {
        aborted = *abort_reason_;  // the queue was dropped already
      } else {
        queue_.push_front(std::move(op));  // first: submitted before any queued behind it
      }
      launching_ = false;
    }
    cv_.notify_one();
    room_cv_.notify_all();
    if (aborted) {
      giveEvent(static_cast<cudaEvent_t>(op.ready));
      op.work->complete(*aborted);
    }
    return;
  }
  cudaEvent_t done = doneEventFor(op);
  InFlight f{op.work, op.kind, op.deadline, done, false};
  if (done == nullptr) {
    gpu.unlock();
    launchFailed(std::move(f), {Cause::kBackendError, -1, "cudaEventCreateWithFlags failed"});
    return;
  }
  std::optional<Failure> failure;
  const Launched l = startLaunch(op, done, Clock::now() + kInlineSettle, &failure);
  gpu.unlock();
  caller_launches.fetch_add(1, std::memory_order_relaxed);
  if (l == Launched::kDone) {
    finishLaunch(std::move(f));
  } else if (l == Launched::kSettling) {
    {
      MutexLock lock(mu_);
      settling_ = Settling{std::move(f), Clock::now()};  // the token goes with it
    }
    cv_.notify_one();
    room_cv_.notify_all();  // the drain may wait for the token
  } else {
    launchFailed(std::move(f), *failure);
  }
}

cudaEvent_t NcclBackend::doneEventFor(OpRequest& op) {
  // Submission ordered every operation after its caller's stream (orderAfterCaller): op.ready
  // is there; the pool is the fallback of an operation that has none.
  return op.ready != nullptr ? static_cast<cudaEvent_t>(op.ready) : takeEvent();
}

void NcclBackend::launchQueued(OpRequest op) {
  cudaEvent_t done = doneEventFor(op);
  InFlight f{op.work, op.kind, op.deadline, done, false};
  if (done == nullptr) {
    launchFailed(std::move(f), {Cause::kBackendError, -1, "cudaEventCreateWithFlags failed"});
    return;
  }
  executor_launches.fetch_add(1, std::memory_order_relaxed);
  std::optional<Failure> failure;
  Launched l;
  const auto started = Clock::now();
  {
    std::unique_lock gpu(launchMutex(cfg_.device));
    l = startLaunch(op, done, std::min(op.deadline, started + kLaunchLockLimit), &failure);
  }
  if (l == Launched::kSettling) {
    // The other worlds on this GPU need not wait for this one's peers.
    finishSettling(Settling{std::move(f), started});
    return;
  }
  if (l == Launched::kDone) {
    finishLaunch(std::move(f));
  } else {
    launchFailed(std::move(f), *failure);
  }
}

NcclBackend::Launched NcclBackend::startLaunch(OpRequest& op, cudaEvent_t done,
                                               Clock::time_point settle_until,
                                               std::optional<Failure>* failure) {
  const char* what = opKindName(op.kind);
  if (op.ready != nullptr) {  // after the caller's stream, as it was at submission
    cudaEvent_t ready = static_cast<cudaEvent_t>(op.ready);
    op.ready = nullptr;
    cudaError_t e = api_.cudaStreamWaitEvent(stream_, ready, 0);
    // The wait took the event's state: it may be recorded again, as `done` (the same event) or,
    // back in the pool, by another operation.
    if (ready != done) giveEvent(ready);
    if (e != cudaSuccess) {
      *failure = Failure{Cause::kBackendError, -1,
                         std::string(what) + ": cudaStreamWaitEvent: " + cudaText(e)};
      return Launched::kFailed;
    }
  }
  failpoints_.delayIfAsked();
  auto injected = failpoints_[op.kind].check();
  if (injected && injected->failinfo == 0) {
    *failure =
        ncclFailure(what, static_cast<ncclResult_t>(injected->failnum), true, injected->suffix());
    return Launched::kFailed;
  }
  ncclResult_t r = enqueue(op);
  if (injected && (r == ncclSuccess || r == ncclInProgress)) {
    // failinfo 1: the launch goes on; the error surfaces at the next check of the communicator.
    MutexLock lock(mu_);
    async_injection_ = injected;
  }
  bool aborted = false;
  const bool settled = r == ncclInProgress;
  if (settled) r = settle(std::min(op.deadline, settle_until), &aborted);
  if (aborted) {
    *failure = Failure{Cause::kBackendError, -1, "", true};
    return Launched::kFailed;
  }
  if (r == ncclInProgress) {
    if (Clock::now() >= op.deadline) {
      *failure = Failure{Cause::kOpTimeout, -1,
                         std::string(what) + " passed its deadline while NCCL was launching it"};
      return Launched::kFailed;
    }
    return Launched::kSettling;
  }
  if (r != ncclSuccess) {
    *failure = ncclFailure(what, r, !settled);
    return Launched::kFailed;
  }
  if (cudaError_t e = api_.cudaEventRecord(done, stream_); e != cudaSuccess) {
    *failure =
        Failure{Cause::kBackendError, -1, std::string(what) + ": cudaEventRecord: " + cudaText(e)};
    return Launched::kFailed;
  }
  return Launched::kDone;
}

void NcclBackend::finishSettling(Settling s) {
  const char* what = opKindName(s.op.kind);
  bool aborted = false;
  ncclResult_t r = ncclInProgress;
  {
    // The rest of the launch lock's time first (a caller's hand-over let it go for a moment).
    std::unique_lock gpu(launchMutex(cfg_.device));
    r = settle(std::min(s.op.deadline, s.started + kLaunchLockLimit), &aborted);
  }
  if (r == ncclInProgress && !aborted) r = settle(s.op.deadline, &aborted);
  if (aborted) return launchFailed(std::move(s.op), Failure{Cause::kBackendError, -1, "", true});
  if (r == ncclInProgress) {
    return launchFailed(std::move(s.op),
                        {Cause::kOpTimeout, -1,
                         std::string(what) + " passed its deadline while NCCL was launching it"});
  }
  if (r != ncclSuccess) return launchFailed(std::move(s.op), ncclFailure(what, r, false));
  if (cudaError_t e = api_.cudaEventRecord(s.op.done, stream_); e != cudaSuccess) {
    return launchFailed(std::move(s.op), {Cause::kBackendError, -1,
                                          std::string(what) + ": cudaEventRecord: " + cudaText(e)});
  }
  finishLaunch(std::move(s.op));
}

void NcclBackend::finishLaunch(InFlight f) {
  f.work->markLaunched(f.done);  // before anyone can complete it and reuse the event
  f.launched = Clock::now();
  bool queued = false, idle = false;
  {
    MutexLock lock(mu_);
    inflight_.push_back(std::move(f));
    launches_.fetch_add(1, std::memory_order_release);
    launching_ = false;
    queued = !queue_.empty();
    idle = completer_idle_;
  }
  if (idle) done_cv_.notify_one();  // a system call: only when the completer waits for work
  if (queued) cv_.notify_one();
  room_cv_.notify_all();  // the drain may wait for the token
}

void NcclBackend::launchFailed(InFlight f, const Failure& failure) {
  // A failed launch may have left part of its work on the stream: it is drained with the rest,
  // never completed OK. Its done event was not recorded on the world's stream for it (the
  // record is a launch's last step): the drain need not wait for it, and it goes back to the
  // pool while this thread holds the token (the drain destroys the pool only after).
  giveEvent(f.done);
  f.done = nullptr;
  f.failed = true;
  {
    MutexLock lock(mu_);
    inflight_.push_back(std::move(f));
    launches_.fetch_add(1, std::memory_order_release);
    launching_ = false;
  }
  cv_.notify_one();
  room_cv_.notify_all();
  if (!failure.aborting) fail(failure);
}

ncclResult_t NcclBackend::settle(Clock::time_point until, bool* aborted) {
  const ncclComm_t comm = launch_comm_;  // the token holder's
  ncclResult_t r = ncclInProgress;
  std::chrono::microseconds sleep = kPollSleepMin;
  while (r == ncclInProgress) {
    if (api_.ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    if (r != ncclInProgress || Clock::now() >= until) break;
    // A peer that died before the connections formed keeps NCCL in progress forever: the
    // world's abort (its removal, or its break by the store) ends the wait.
    if (aborting_.load()) {
      *aborted = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, until - Clock::now()));
    sleep = backOff(sleep);
  }
  return r;
}

ncclResult_t NcclBackend::enqueue(const OpRequest& op) {
  return enqueueOp(op, NcclTarget{launch_comm_, stream_, scratch_, cfg_.rank, cfg_.size});
}

}  // namespace nccl_impl

using nccl_impl::NcclBackend;

NcclLaunchCounts ncclLaunchCounts() {
  return {nccl_impl::caller_launches.load(), nccl_impl::executor_launches.load()};
}

NcclCompletion ncclCompletionMode() { return nccl_impl::completionMode().load(); }

void setNcclCompletionMode(NcclCompletion m) { nccl_impl::completionMode().store(m); }

const char* ncclCompletionName(NcclCompletion m) {
  switch (m) {
    case NcclCompletion::kSpin:
      return "spin";
    case NcclCompletion::kBlocking:
      return "blocking";
    case NcclCompletion::kHybrid:
      return "hybrid";
    case NcclCompletion::kPredict:
      return "predict";
  }
  return "unknown";
}

std::shared_ptr<Backend> makeNcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream,
                                         int* scratch, BackendErrorHandler on_error,
                                         OpFailPoints failpoints) {
  auto b = std::make_shared<NcclBackend>(std::move(cfg), comm, stream, scratch, std::move(on_error),
                                         std::move(failpoints));
  b->start();
  return b;
}

}  // namespace mw::detail