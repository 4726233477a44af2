#include "nccl/nccl_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_name.h"
#include "nccl/nccl_loader.h"
#include "nccl/nccl_ops.h"
#include "nccl/nccl_resources.h"

namespace mw::detail {

namespace {

using namespace std::chrono_literals;

// An operation that has not completed within this long of being launched is polled with sleeps
// instead of a spin (the first microseconds catch the small, fast ones); the sleeps double from
// kPollSleepMin up to kPollSleepMax, and start over at the next progress.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kPollSleepMin = std::chrono::microseconds(20);
constexpr auto kPollSleepMax = std::chrono::milliseconds(1);
// Operations launched and not yet complete, per world (the stream keeps them in order).
constexpr size_t kMaxInFlight = 64;
// How long a launch may hold its GPU's launch lock while NCCL finishes it in the background
// (connection setup on a first operation can take long, and forever when the peer is gone): after
// this the other worlds on the GPU may launch again.
constexpr auto kLaunchLockLimit = 100ms;
// After an abort, how long to wait for the stream's work to end before failing its operations and
// leaving the world's memory behind.
constexpr auto kDrainLimit = 10s;

// The next sleep of a poll that made no progress.
std::chrono::microseconds backOff(std::chrono::microseconds sleep) {
  return std::min<std::chrono::microseconds>(sleep * 2, kPollSleepMax);
}

// Launches on one GPU are serialized across worlds (indexes alias modulo 64).
std::mutex& launchMutex(int device) {
  static std::array<std::mutex, 64> mutexes;
  return mutexes[static_cast<size_t>(device) & 63];
}

struct Failure {
  Cause cause;
  int peer;
  std::string detail;
  bool aborting = false;  // the world was aborted meanwhile: nothing to report
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream, int* scratch,
              BackendErrorHandler on_error, OpFailPoints failpoints)
      : cfg_(std::move(cfg)),
        comm_(comm),
        stream_(stream),
        scratch_(scratch),
        on_error_(std::move(on_error)),
        failpoints_(std::move(failpoints)),
        executor_([this] { run(); }) {}

  ~NcclBackend() override { shutdown(); }

  void submit(OpRequest op, bool /*caller_waits*/) override MW_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    // Under mu_: shutdown destroys the events only after abort, which a submit sees here.
    Status s = abort_reason_ ? *abort_reason_ : orderAfterCaller(op);
    if (!s.ok()) {
      lock.unlock();
      op.work->complete(std::move(s));
      return;
    }
    queue_.push_back(std::move(op));
    lock.unlock();
    cv_.notify_one();
  }

  void abort(const Status& reason) override MW_EXCLUDES(mu_) {
    std::deque<OpRequest> dropped;  // never launched: nothing on the GPU uses their memory
    {
      MutexLock lock(mu_);
      if (abort_reason_) return;
      abort_reason_ = reason;
      aborting_.store(true);  // a launch in progress sees it (settle)
      dropped.swap(queue_);
    }
    cv_.notify_all();
    for (auto& op : dropped) {
      giveEvent(static_cast<cudaEvent_t>(op.ready));
      op.work->complete(reason);
    }
  }

  void shutdown() override MW_EXCLUDES(mu_) {
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

 private:
  struct InFlight {
    OpRequest req;
    cudaEvent_t done;
  };

  void run();
  std::optional<Failure> launch(OpRequest& op, cudaEvent_t done);
  ncclResult_t enqueue(const OpRequest& op);
  // Polls the communicator until the last call is no longer in progress, `until` passes (then
  // returns ncclInProgress) or the world is aborted (then sets *aborted, returns ncclInProgress).
  ncclResult_t settle(Clock::time_point until, bool* aborted);
  std::optional<Failure> asyncFailure();
  // An NCCL result as a failure. A synchronous one (an NCCL call's own result) carries NCCL's
  // last error text, labelled as the process-wide buffer it is; an asynchronous one never does
  // (that text may be any thread's, long after).
  Failure ncclFailure(const char* what, ncclResult_t r, bool synchronous,
                      const std::string& suffix = "");
  void fail(const Failure& f);
  // Hands the communicator to its abort, waits (bounded) for the stream's work, completes every
  // operation in flight, and releases the world's CUDA objects. On the executor thread, last.
  void drain(std::deque<InFlight>& inflight);
  void releaseCudaObjects(bool gpu_done);
  // Records op.ready on op.stream in the submitting thread (the CUDA stream contract,
  // multiworld/cuda_stream.h). kInvalidArgument when CUDA refuses the stream.
  Status orderAfterCaller(OpRequest& op) MW_REQUIRES(mu_);
  // An event of this world's device from the pool (nullptr when CUDA cannot make one); the
  // calling thread's current device must be the world's. giveEvent(nullptr) does nothing.
  cudaEvent_t takeEvent() MW_EXCLUDES(events_mu_);
  void giveEvent(cudaEvent_t e) MW_EXCLUDES(events_mu_);
  Status abortReason() MW_EXCLUDES(mu_);

  const NcclConfig cfg_;
  const NcclApi& api_ = ncclApi();     // loaded before any backend is built
  ncclComm_t comm_;                    // executor thread only, until it has aborted it
  cudaStream_t stream_;                // executor thread only, once built
  int* scratch_;                       // one int on the device, for barrier (takeScratch)
  std::atomic<bool> aborting_{false};  // abort_reason_ is set: read without mu_ while launching
  BackendErrorHandler on_error_;
  const OpFailPoints failpoints_;
  std::optional<Injection> async_injection_;                   // executor thread only
  Mutex events_mu_;                                            // taken inside mu_, never around it
  std::vector<cudaEvent_t> events_ MW_GUARDED_BY(events_mu_);  // all, for shutdown
  std::vector<cudaEvent_t> free_events_ MW_GUARDED_BY(events_mu_);

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<OpRequest> queue_ MW_GUARDED_BY(mu_);
  std::optional<Status> abort_reason_ MW_GUARDED_BY(mu_);
  bool shut_down_ MW_GUARDED_BY(mu_) = false;

  std::thread executor_;  // last: starts after everything above is built
};

cudaEvent_t NcclBackend::takeEvent() {
  MutexLock lock(events_mu_);
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (api_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  events_.push_back(e);
  return e;
}

void NcclBackend::giveEvent(cudaEvent_t e) {
  if (e == nullptr) return;
  MutexLock lock(events_mu_);
  free_events_.push_back(e);
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
  char stream[32];
  std::snprintf(stream, sizeof stream, "%p", op.stream);
  const std::string prefix = "world '" + cfg_.world + "': " + opKindName(op.kind) +
                             " cannot be ordered after the caller's CUDA stream " +
                             (op.stream == nullptr ? std::string("(the default stream)") : stream);
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

void NcclBackend::run() {
  api_.cudaSetDevice(cfg_.device);
  std::deque<InFlight> inflight;
  auto last_progress = Clock::now();
  std::chrono::microseconds sleep = kPollSleepMin;
  for (;;) {
    std::optional<OpRequest> next;
    {
      MutexLock lock(mu_);
      if (inflight.empty()) {
        cv_.wait(lock.native(),
                 [&]() MW_REQUIRES(mu_) { return abort_reason_ || !queue_.empty(); });
      }
      if (abort_reason_) break;
      if (!queue_.empty() && inflight.size() < kMaxInFlight) {
        next = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    bool progressed = false;
    if (next) {
      cudaEvent_t done = takeEvent();
      if (done == nullptr) {
        giveEvent(static_cast<cudaEvent_t>(next->ready));
        next->ready = nullptr;
      }
      std::optional<Failure> f =
          done == nullptr ? std::optional<Failure>(Failure{Cause::kBackendError, -1,
                                                           "cudaEventCreateWithFlags failed"})
                          : launch(*next, done);
      // A failed launch may have left part of its work on the stream: it is drained with the rest.
      inflight.push_back({std::move(*next), done});
      if (f) {
        if (!f->aborting) fail(*f);
        break;
      }
      progressed = true;
    }
    // An operation whose event completed succeeded only if the communicator reports no error:
    // NCCL's kernels also end (and the event fires) when a peer or the network failed under
    // them, with the output half written. So the error is checked before any success is given.
    bool checked = false;
    std::optional<Failure> failed;
    while (!inflight.empty()) {
      cudaError_t q = api_.cudaEventQuery(inflight.front().done);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) break;  // reported below with the communicator's state
      if (!checked) {
        checked = true;
        if ((failed = asyncFailure())) break;
      }
      giveEvent(inflight.front().done);
      inflight.front().req.work->complete(Status::Ok());
      inflight.pop_front();
      progressed = true;
    }
    if (failed) {
      fail(*failed);
      break;
    }
    if (inflight.empty()) continue;
    if (cudaError_t q = api_.cudaEventQuery(inflight.front().done);
        q != cudaSuccess && q != cudaErrorNotReady) {
      api_.cudaGetLastError();
      fail({Cause::kBackendError, -1,
            std::string(opKindName(inflight.front().req.kind)) + ": CUDA: " + cudaText(q)});
      break;
    }
    if (auto f = asyncFailure()) {
      fail(*f);
      break;
    }
    const auto now = Clock::now();
    if (now > inflight.front().req.deadline) {
      fail({Cause::kOpTimeout, -1,
            std::string(opKindName(inflight.front().req.kind)) +
                " passed its deadline (NCCL has not completed it)"});
      break;
    }
    if (progressed) {
      last_progress = now;
      sleep = kPollSleepMin;
    } else if (now - last_progress > kSpinFor) {
      std::this_thread::sleep_for(sleep);
      sleep = backOff(sleep);
    }
  }
  drain(inflight);
}

std::optional<Failure> NcclBackend::launch(OpRequest& op, cudaEvent_t done) {
  const char* what = opKindName(op.kind);
  if (op.ready != nullptr) {  // after the caller's stream, as it was at submission
    cudaEvent_t ready = static_cast<cudaEvent_t>(op.ready);
    op.ready = nullptr;
    cudaError_t e = api_.cudaStreamWaitEvent(stream_, ready, 0);
    giveEvent(ready);
    if (e != cudaSuccess) {
      return Failure{Cause::kBackendError, -1,
                     std::string(what) + ": cudaStreamWaitEvent: " + cudaText(e)};
    }
  }
  failpoints_.delayIfAsked();
  auto injected = failpoints_[op.kind].check();
  if (injected && injected->failinfo == 0) {
    return ncclFailure(what, static_cast<ncclResult_t>(injected->failnum), true,
                       injected->suffix());
  }
  ncclResult_t r = ncclSuccess;
  bool settled = false;  // r is then the communicator's asynchronous state, not the call's result
  bool aborted = false;
  {
    std::unique_lock gpu(launchMutex(cfg_.device));
    r = enqueue(op);
    if (r == ncclInProgress) {
      settled = true;
      r = settle(std::min(op.deadline, Clock::now() + kLaunchLockLimit), &aborted);
    }
    if (r == ncclInProgress && !aborted) {
      gpu.unlock();  // the other worlds on this GPU need not wait for this one's peers
      r = settle(op.deadline, &aborted);
    }
  }
  if (aborted) return Failure{Cause::kBackendError, -1, "", true};
  if (r == ncclInProgress) {
    return Failure{Cause::kOpTimeout, -1,
                   std::string(what) + " passed its deadline while NCCL was launching it"};
  }
  if (r != ncclSuccess) return ncclFailure(what, r, !settled);
  if (cudaError_t e = api_.cudaEventRecord(done, stream_); e != cudaSuccess) {
    return Failure{Cause::kBackendError, -1,
                   std::string(what) + ": cudaEventRecord: " + cudaText(e)};
  }
  if (injected) async_injection_ = injected;  // failinfo 1: surfaces at the next poll
  return std::nullopt;
}

ncclResult_t NcclBackend::settle(Clock::time_point until, bool* aborted) {
  ncclResult_t r = ncclInProgress;
  std::chrono::microseconds sleep = kPollSleepMin;
  while (r == ncclInProgress) {
    if (api_.ncclCommGetAsyncError(comm_, &r) != ncclSuccess) return ncclInternalError;
    if (r != ncclInProgress || Clock::now() >= until) break;
    // A peer that died before the connections formed keeps NCCL in progress forever: the
    // world's abort (its removal, or its break by the store) ends the wait.
    if (aborting_.load()) {
      *aborted = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(sleep);
    sleep = backOff(sleep);
  }
  return r;
}

ncclResult_t NcclBackend::enqueue(const OpRequest& op) {
  return enqueueOp(op, NcclTarget{comm_, stream_, scratch_, cfg_.rank, cfg_.size});
}

std::optional<Failure> NcclBackend::asyncFailure() {
  if (async_injection_) {
    Injection inj = *async_injection_;
    async_injection_.reset();
    return ncclFailure("asynchronous error", static_cast<ncclResult_t>(inj.failnum), false,
                       inj.suffix());
  }
  ncclResult_t async = ncclSuccess;
  if (ncclResult_t r = api_.ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
  if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
  return ncclFailure("asynchronous error", async, false);
}

Failure NcclBackend::ncclFailure(const char* what, ncclResult_t r, bool synchronous,
                                 const std::string& suffix) {
  std::string detail = std::string("nccl ") + what + ": " + ncclText(r);
  if (synchronous && suffix.empty()) {
    // One buffer for the whole process: right after this thread's failed call it is most likely,
    // not surely, this call's text.
    const char* last = api_.ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') {
      detail += " (NCCL's last error, one buffer for the whole process: " + std::string(last) + ")";
    }
  }
  detail += suffix;
  // A remote error means a peer exited or the network failed: the member is lost to us.
  return Failure{r == ncclRemoteError ? Cause::kPeerDied : Cause::kBackendError, -1, detail};
}

void NcclBackend::fail(const Failure& f) {
  Status s = on_error_(f.cause, f.peer, f.detail);  // breaks the world, which aborts us
  abort(s);                                         // in case the world was already on its way out
}

void NcclBackend::drain(std::deque<InFlight>& inflight) {
  // Never finalize or destroy a communicator whose peer may be dead: abort it, on a thread of its
  // own. NCCL's kernels then exit, and the stream's work ends.
  std::shared_ptr<AbortTicket> abort;
  if (comm_ != nullptr) abort = startAbort(comm_, cfg_.device);
  comm_ = nullptr;
  const Status reason = abortReason();
  const auto until = deadlineIn(kDrainLimit);
  bool gpu_done = true;
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
      f.req.work->complete(
          Status(Code::kBackendError,
                 "world '" + cfg_.world + "': " + opKindName(f.req.kind) +
                     " was not finished by the GPU " +
                     std::to_string(
                         std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count()) +
                     " s after the world's abort (" + reason.message() +
                     "): its communicator and memory are left behind, never freed under it"));
      continue;
    }
    f.req.work->complete(reason);
  }
  inflight.clear();
  api_.cudaGetLastError();
  // Usually done within microseconds; an abort that waits for another world's stuck kernel
  // finishes on its own thread.
  if (abort) abort->waitUntil(deadlineIn(kAbortWait));
  releaseCudaObjects(gpu_done);
}

void NcclBackend::releaseCudaObjects(bool gpu_done) {
  // Neither call waits for the GPU: queued work still runs, and the event's waits end.
  MutexLock lock(events_mu_);
  for (cudaEvent_t e : events_) api_.cudaEventDestroy(e);
  events_.clear();
  free_events_.clear();
  if (stream_ != nullptr) api_.cudaStreamDestroy(stream_);
  stream_ = nullptr;
  // The barrier's int goes back to the pool only when nothing on the GPU can still write it.
  if (gpu_done) giveScratch(cfg_.device, scratch_);
  scratch_ = nullptr;
}

}  // namespace

std::shared_ptr<Backend> makeNcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream,
                                         int* scratch, BackendErrorHandler on_error,
                                         OpFailPoints failpoints) {
  return std::make_shared<NcclBackend>(std::move(cfg), comm, stream, scratch, std::move(on_error),
                                       std::move(failpoints));
}

}  // namespace mw::detail
