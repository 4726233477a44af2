// The NCCL backend's waiting, executor, completer, failure and drain (nccl_backend_impl.h).
#include "nccl/nccl_backend_impl.h"

namespace mw::detail::nccl_impl {

using namespace std::chrono_literals;

// ---- waiting ----

std::optional<Status> NcclBackend::orderStream(WorkState* target, void* stream, Deadline deadline) {
  if (cfg_.host_wait) return std::nullopt;
  MutexLock lock(target->mu);
  // An operation queued behind others: its done event exists once it is launched.
  if (!target->cv.wait_until(lock.native(), deadline, [&]() MW_REQUIRES(target->mu) {
        return target->done || target->launched;
      })) {
    return Status(Code::kTimeout, "operation in world '" + cfg_.world +
                                      "' was not launched before the caller's deadline");
  }
  if (target->done) return target->status;
  // Under target->mu: the event is not reused before the work completes (complete() takes it).
  int previous = -1;
  const bool switched = api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  cudaError_t e = switched ? api_.cudaSetDevice(cfg_.device) : cudaSuccess;
  if (e == cudaSuccess) {
    e = api_.cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                 static_cast<cudaEvent_t>(target->gpu_done), 0);
  }
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (e == cudaSuccess) return Status::Ok();
  api_.cudaGetLastError();  // not sticky: the caller's CUDA calls go on
  return Status(Code::kInvalidArgument,
                "world '" + cfg_.world + "': the caller's CUDA stream " + streamName(stream) +
                    " cannot be ordered after the operation: cudaStreamWaitEvent: " + cudaText(e) +
                    " (the current stream must be a live stream of cuda:" +
                    std::to_string(cfg_.device) + "; synchronize() waits on the host instead)");
}

void NcclBackend::driveUntil(const WorkState* target, Deadline deadline) {
  const auto until = std::min(deadline, Clock::now() + kHostSpin);
  for (;;) {
    cudaError_t q = cudaErrorNotReady;
    {
      MutexLock lock(target->mu);
      if (target->done) return;
      // Under target->mu: the event is not reused before the work completes.
      if (target->launched) q = api_.cudaEventQuery(static_cast<cudaEvent_t>(target->gpu_done));
    }
    if (q == cudaSuccess) return completeThrough(target);
    if (q != cudaErrorNotReady) {
      api_.cudaGetLastError();  // the executor reports the event's error
      return;
    }
    if (Clock::now() >= until) return;  // the completer completes it; synchronize sleeps
    pollGap();
  }
}

void NcclBackend::completeThrough(const WorkState* target) {
  if (auto f = asyncFailure()) {
    if (!f->aborting) fail(*f);
    return;
  }
  std::vector<std::shared_ptr<WorkState>> works;
  {
    MutexLock lock(mu_);
    if (abort_reason_ || failed_) return;
    works = completing_;
    bool found = false;
    for (const InFlight& f : inflight_) {
      if (f.failed) return;
      works.push_back(f.work);
      if (f.work.get() == target) {
        found = true;
        break;
      }
    }
    // Not in flight: completed already, or taken by the completer, which completes it in order.
    if (!found) return;
  }
  // In stream order: every operation launched before target is complete on the GPU too, and
  // those the completer took off the list and has not completed yet come first, so that a Work
  // never completes before an earlier one of its world (complete() is once-wins).
  for (auto& w : works) w->complete(Status::Ok());
}

// ---- the executor: hand-overs, queued launches, supervision ----

void NcclBackend::run() {
  nameThisThread("mw-nccl", cfg_.world);
  api_.cudaSetDevice(cfg_.device);
  for (;;) {
    std::optional<Settling> settling;
    std::optional<OpRequest> next;
    bool supervising = false;
    {
      MutexLock lock(mu_);
      auto work = [&]() MW_REQUIRES(mu_) {
        return abort_reason_.has_value() || settling_.has_value() ||
               (!launching_ && !queue_.empty());
      };
      if (inflight_.empty()) supervising_ = false;
      if (supervising_) {
        cv_.wait_for(lock.native(), kSupervise, work);
      } else {  // until there is work, or the completer asks for supervision
        // (supervising_ alone: the operation may be complete by the time this thread runs, and
        // the flag, left set, would then keep the completer from asking again)
        cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) { return work() || supervising_; });
      }
      if (abort_reason_) break;
      if (settling_) {
        settling.swap(settling_);  // the token came with it
      } else if (!launching_ && !queue_.empty()) {
        launching_ = true;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      supervising = supervising_ && !inflight_.empty();
    }
    if (settling) {
      finishSettling(std::move(*settling));
    } else if (next) {
      launchQueued(std::move(*next));
    }
    if (supervising) supervise();
  }
  drain();
}

void NcclBackend::supervise() {
  cudaEvent_t front = nullptr;
  OpKind kind = OpKind::kBarrier;
  Clock::time_point deadline{};
  {
    MutexLock lock(mu_);
    if (abort_reason_ || inflight_.empty() || inflight_.front().failed) return;
    front = inflight_.front().done;
    kind = inflight_.front().kind;
    deadline = inflight_.front().deadline;
    // Under mu_: the completer gives the event back only after taking it off the list (under
    // mu_), and it can be recorded again only after that.
    const cudaError_t q = api_.cudaEventQuery(front);
    if (q == cudaSuccess) front = nullptr;  // the completer's to complete
    if (q != cudaSuccess && q != cudaErrorNotReady) {
      api_.cudaGetLastError();
      lock.unlock();
      return fail(
          {Cause::kBackendError, -1, std::string(opKindName(kind)) + ": CUDA: " + cudaText(q)});
    }
  }
  if (auto f = asyncFailure()) {
    if (!f->aborting) fail(*f);
    return;
  }
  if (front != nullptr && Clock::now() > deadline) {
    fail({Cause::kOpTimeout, -1,
          std::string(opKindName(kind)) + " passed its deadline (NCCL has not completed it)"});
  }
}

// ---- the completer ----

bool NcclBackend::awaitEvent(const std::shared_ptr<CompleterState>& st, const InFlight& front,
                             cudaError_t* seen) {
  *seen = cudaErrorNotReady;
  // When the operation starts on the GPU: once the one before it ended (stream order), and not
  // before its launch.
  const auto began = std::max(front.launched, last_done_);
  auto poll_until = Clock::time_point::max();  // spin
  if (mode_ == NcclCompletion::kHybrid) poll_until = Clock::now() + kHybridSpin;
  if (mode_ == NcclCompletion::kPredict) {
    if (estimate_.count() > 0) {
      const auto wake = began + estimate_ - kPredictMargin;
      if (wake - Clock::now() > kMinSleep) {
        MutexLock lock(mu_);
        if (done_cv_.wait_until(lock.native(), wake,
                                [&]() MW_REQUIRES(mu_) { return abort_reason_.has_value(); })) {
          return false;
        }
      }
    }
    poll_until = std::max(Clock::now(), began + estimate_) +
                 std::max<Clock::duration>(kHybridSpin, estimate_ / 4);
  }
  if (mode_ != NcclCompletion::kBlocking) {
    // Polling: the completer watches the world itself (the communicator's error and the
    // deadline, every kSpinCheck), so the executor need not wake.
    auto check = Clock::now() + kSpinCheck;
    for (bool first = true;; first = false) {
      if (aborting_.load(std::memory_order_relaxed)) return false;
      if ((*seen = api_.cudaEventQuery(front.done)) != cudaErrorNotReady) {
        // Done at the first look: it ended at some time before now, so the estimate shrinks
        // to look earlier next time; seen ending while polled: its duration, within a gap.
        if (mode_ == NcclCompletion::kPredict) learn(Clock::now() - began, !first, false);
        return true;
      }
      const auto now = Clock::now();
      if (now >= check) {
        check = now + kSpinCheck;
        if (auto f = asyncFailure()) {
          if (!f->aborting) fail(*f);
          return false;
        }
        if (now > front.deadline) {
          fail({Cause::kOpTimeout, -1,
                std::string(opKindName(front.kind)) +
                    " passed its deadline (NCCL has not completed it)"});
          return false;
        }
      }
      if (now > poll_until) break;
      pollGap();
    }
  }
  // Blind while blocked: the executor watches the world meanwhile, every kSupervise.
  bool wake = false;
  {
    MutexLock lock(mu_);
    if (!supervising_) supervising_ = wake = true;
  }
  if (wake) cv_.notify_one();
  {
    MutexLock lock(st->mu);
    if (st->stop) return false;
    st->blocked_on = front.done;
  }
  // Returns once the GPU has passed the event (an abort ends the kernels of the world's
  // communicator, so a failure ends the wait too), or with the event's error.
  api_.cudaEventSynchronize(front.done);
  MutexLock lock(st->mu);
  st->blocked_on = nullptr;
  if (st->stop) return false;
  // Longer than expected and seen late (the interrupt's delay on top).
  if (mode_ == NcclCompletion::kPredict) learn(Clock::now() - began, false, true);
  return true;
}

void NcclBackend::learn(Clock::duration took, bool exact, bool late) {
  if (estimate_.count() == 0) {
    estimate_ = took;
  } else if (exact) {  // an average, so that one odd operation moves it a quarter
    estimate_ = (3 * estimate_ + took) / 4;
  } else if (late) {  // half way to what was seen, which overstates it by the wake-up's delay
    estimate_ += (took - estimate_) / 2;
  } else {  // done before the first look: look earlier next time
    estimate_ = estimate_ * 7 / 8;
  }
}

void NcclBackend::complete(const std::shared_ptr<CompleterState>& st) {
  nameThisThread("mw-ncclc", cfg_.world);
  // Timed sleeps (predict mode) end within a microsecond of their time, not the default 50 us.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  api_.cudaSetDevice(cfg_.device);
  bool drained = false;  // the last batch left nothing in flight
  uint64_t seen = 0;     // launches_ then
  for (;;) {
    if (drained) {  // the next launch, watched a while before sleeping (idleSpinLength)
      const auto until = Clock::now() + idleSpinLength();
      while (launches_.load(std::memory_order_acquire) == seen && Clock::now() < until) cpuRelax();
    }
    InFlight front;
    {
      MutexLock lock(mu_);
      completing_.clear();  // the last batch is complete
      completer_idle_ = true;
      done_cv_.wait(lock.native(), [&]() MW_REQUIRES(mu_) {
        return abort_reason_.has_value() || (!inflight_.empty() && !inflight_.front().failed);
      });
      completer_idle_ = false;
      if (abort_reason_) break;
      const InFlight& f = inflight_.front();  // only this thread takes operations off the list
      front = InFlight{nullptr, f.kind, f.deadline, f.done, false, f.launched};
    }
    const cudaEvent_t e = front.done;
    cudaError_t q = cudaErrorNotReady;
    if (!awaitEvent(st, front, &q)) break;  // stopped: the backend may be gone; touch nothing of it
    if (q == cudaErrorNotReady) q = api_.cudaEventQuery(e);  // after a blocked wait
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) {
      api_.cudaGetLastError();
      fail({Cause::kBackendError, -1, std::string("operation's event: CUDA: ") + cudaText(q)});
      break;
    }
    // A completed event is not yet a success: NCCL's kernels also end when a peer or the network
    // failed under them. The communicator's error is read before any success is given.
    if (auto f = asyncFailure()) {
      if (!f->aborting) fail(*f);
      break;
    }
    {
      MutexLock lock(mu_);
      if (abort_reason_ || failed_) break;
      while (!inflight_.empty() && !inflight_.front().failed) {
        InFlight& f = inflight_.front();
        if (f.done != e && api_.cudaEventQuery(f.done) != cudaSuccess) break;
        completing_.push_back(f.work);
        batch_.push_back(std::move(f));
        inflight_.pop_front();
      }
      drained = inflight_.empty();
      seen = launches_.load(std::memory_order_relaxed);
    }
    last_done_ = Clock::now();
    room_cv_.notify_all();
    for (InFlight& f : batch_) {
      f.work->complete(Status::Ok());  // first: the event is reused only after
      giveEvent(f.done);
    }
    batch_.clear();  // its capacity stays
  }
  MutexLock lock(st->mu);
  st->exited = true;
  st->cv.notify_all();
}

// ---- failure and the end ----

void NcclBackend::abort(const Status& reason) {
  std::deque<OpRequest> dropped;  // never launched: nothing on the GPU uses their memory
  {
    MutexLock lock(mu_);
    if (abort_reason_) return;
    abort_reason_ = reason;
    aborting_.store(true);  // a launch in progress sees it (settle)
    dropped.swap(queue_);
  }
  cv_.notify_all();
  done_cv_.notify_all();
  room_cv_.notify_all();
  for (auto& op : dropped) {
    giveEvent(static_cast<cudaEvent_t>(op.ready));
    op.work->complete(reason);
  }
}

void NcclBackend::shutdown() {
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  abort(Status(Code::kAborted, "world '" + cfg_.world + "' was removed"));
  // The executor hands the communicator to its abort, drains the stream and releases the
  // world's CUDA objects, on its own thread (its current device is the world's): nothing here
  // may wait for the GPU.
  if (executor_.joinable()) executor_.join();
}

std::optional<Failure> NcclBackend::asyncFailure() {
  ncclComm_t comm;
  {
    MutexLock lock(mu_);
    // Once a failure was seen, nothing may be reported successful, even before the abort.
    if (abort_reason_ || failed_) return Failure{Cause::kBackendError, -1, "", true};
    if (async_injection_) {
      Injection inj = *async_injection_;
      async_injection_.reset();
      failed_ = true;
      lock.unlock();
      return ncclFailure("asynchronous error", static_cast<ncclResult_t>(inj.failnum), false,
                         inj.suffix());
    }
    comm = comm_;
    // Read under mu_: the drain takes the communicator to its abort under mu_.
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = api_.ncclCommGetAsyncError(comm, &async); r != ncclSuccess) async = r;
    if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
    failed_ = true;
    lock.unlock();
    return ncclFailure("asynchronous error", async, false);
  }
}

Failure NcclBackend::ncclFailure(const char* what, ncclResult_t r, bool synchronous,
                                 const std::string& suffix) {
  std::string detail = std::string("nccl ") + what + ": " + ncclText(r);
  if (synchronous && suffix.empty()) {
    // One buffer for the whole process: right after this thread's failed call it is most likely,
    // not surely, this call's text.
    const char* last = api_.ncclGetLastError(nullptr);
    if (last != nullptr && *last != '\0') {
      detail += " (NCCL's last error, one buffer for the whole process: " + std::string(last) + ")";
    }
  }
  detail += suffix;
  // A remote error means a peer exited or the network failed: the member is lost to us.
  return Failure{r == ncclRemoteError ? Cause::kPeerDied : Cause::kBackendError, -1, detail};
}

void NcclBackend::fail(const Failure& f) {
  {
    MutexLock lock(mu_);
    failed_ = true;  // from now on no operation completes OK
  }
  Status s = on_error_(f.cause, f.peer, f.detail);  // breaks the world, which aborts us
  abort(s);                                         // in case the world was already on its way out
}

void NcclBackend::drain() {
  ncclComm_t comm = nullptr;
  {
    MutexLock lock(mu_);
    // A caller launching in its own thread ends soon (its settle sees the abort), or hands its
    // launch over (settling_), whose token is then ours.
    for (;;) {
      if (settling_) {
        settling_->op.failed = true;
        inflight_.push_back(std::move(settling_->op));
        settling_.reset();
        launching_ = false;
      }
      if (!launching_) break;
      room_cv_.wait(lock.native(),
                    [&]() MW_REQUIRES(mu_) { return !launching_ || settling_.has_value(); });
    }
    comm = comm_;
    comm_ = nullptr;
  }
  // Never finalize or destroy a communicator whose peer may be dead: abort it, on a thread of its
  // own. NCCL's kernels then exit, and the stream's work ends.
  std::shared_ptr<AbortTicket> aborted;
  if (comm != nullptr) aborted = startAbort(comm, cfg_.device);
  {
    MutexLock lock(completer_state_->mu);
    completer_state_->stop = true;
  }
  done_cv_.notify_all();
  const Status reason = abortReason();
  const auto until = deadlineIn(kDrainLimit);
  bool gpu_done = true;
  std::deque<InFlight> inflight;
  {
    MutexLock lock(mu_);
    inflight.swap(inflight_);
  }
  for (auto& f : inflight) {
    // Completing the work hands the caller's memory back: only once the GPU is done with it.
    std::chrono::microseconds sleep = kPollSleepMin;
    while (f.done != nullptr && api_.cudaEventQuery(f.done) == cudaErrorNotReady &&
           Clock::now() < until) {
      std::this_thread::sleep_for(sleep);
      sleep = backOff(sleep);
    }
    if (f.done != nullptr && api_.cudaEventQuery(f.done) == cudaErrorNotReady) {
      gpu_done = false;
      f.work->complete(Status(
          Code::kBackendError,
          "world '" + cfg_.world + "': " + opKindName(f.kind) + " was not finished by the GPU " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count()) +
              " s after the world's abort (" + reason.message() +
              "): its communicator and memory are left behind, never freed under it"));
      continue;
    }
    f.work->complete(reason);
  }
  inflight.clear();
  api_.cudaGetLastError();
  // The completer ends at once unless it waits in cudaEventSynchronize for an event the GPU has
  // not passed: then it is left behind with that event, which is never destroyed under it.
  cudaEvent_t keep = nullptr;
  {
    MutexLock lock(completer_state_->mu);
    completer_state_->cv.wait(lock.native(), [&]() MW_REQUIRES(completer_state_->mu) {
      return completer_state_->exited || completer_state_->blocked_on != nullptr;
    });
    if (!completer_state_->exited) {
      const bool ended = completer_state_->cv.wait_for(
          lock.native(), gpu_done ? kDrainLimit : 10ms,
          [&]() MW_REQUIRES(completer_state_->mu) { return completer_state_->exited; });
      if (!ended) keep = completer_state_->blocked_on;
    }
  }
  if (keep == nullptr) {
    if (completer_.joinable()) completer_.join();
  } else {
    gpu_done = false;
    completer_.detach();  // it touches only its CompleterState from now on
  }
  // Usually done within microseconds; an abort that waits for another world's stuck kernel
  // finishes on its own thread.
  if (aborted) aborted->waitUntil(deadlineIn(kAbortWait));
  releaseCudaObjects(gpu_done, keep);
}

void NcclBackend::releaseCudaObjects(bool gpu_done, cudaEvent_t keep) {
  // Neither call waits for the GPU: queued work still runs, and the event's waits end.
  MutexLock lock(events_mu_);
  for (cudaEvent_t e : events_) {
    if (e != keep) api_.cudaEventDestroy(e);
  }
  events_.clear();
  free_events_.clear();
  if (stream_ != nullptr) api_.cudaStreamDestroy(stream_);
  stream_ = nullptr;
  // The barrier's int goes back to the pool only when nothing on the GPU can still write it.
  if (gpu_done) giveScratch(cfg_.device, scratch_);
  scratch_ = nullptr;
}

}  // namespace mw::detail::nccl_impl
