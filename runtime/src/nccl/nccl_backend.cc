#include "nccl/nccl_backend.h"

#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/thread_name.h"
#include "nccl/nccl_loader.h"

namespace mw::detail {

namespace {

using namespace std::chrono_literals;

// An operation that has not completed within this long of being launched is polled with short
// sleeps instead of a spin (the first microseconds catch the small, fast ones).
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kPollSleep = std::chrono::microseconds(20);
// Operations launched and not yet complete, per world (the stream keeps them in order).
constexpr size_t kMaxInFlight = 64;
// How long a launch may hold its GPU's launch lock while NCCL finishes it in the background
// (connection setup on a first operation can take long, and forever when the peer is gone): after
// this the other worlds on the GPU may launch again.
constexpr auto kLaunchLockLimit = 100ms;
// After an abort, how long to wait for the stream's work to end before failing its operations.
constexpr auto kDrainLimit = 10s;

std::string cudaText(cudaError_t e) {
  return std::string(ncclApi().cudaGetErrorName(e)) + " (" + ncclApi().cudaGetErrorString(e) + ")";
}

const char* ncclName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

std::string ncclText(ncclResult_t r) {
  return std::string(ncclName(r)) + " " + std::to_string(static_cast<int>(r)) + " (" +
         ncclApi().ncclGetErrorString(r) + ")";
}

ncclDataType_t ncclType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kUInt8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Launches on one GPU are serialized across worlds (indexes alias modulo 64).
std::mutex& launchMutex(int device) {
  static std::array<std::mutex, 64> mutexes;
  return mutexes[static_cast<size_t>(device) & 63];
}

// One thread per process aborts communicators. Those handed over within a millisecond of each
// other (a process's worlds broken by one fault) are aborted inside one NCCL group (NCCL >= 2.22),
// so that no abort waits on a kernel of another communicator that is itself being aborted. The
// thread is owned by the process's one Aborter (made at the first NCCL world), which stops and
// joins it at exit, after the aborts handed to it (NCCL is opened with dlopen and never closed, so
// it is still there then).
class Aborter {
 public:
  static Aborter& instance() {
    static Aborter a;
    return a;
  }
  ~Aborter() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  // Aborts `comm` and returns NCCL's result once it is done.
  ncclResult_t abort(ncclComm_t comm) {
    auto req = std::make_shared<Request>();
    req->comm = comm;
    {
      std::lock_guard lock(mu_);
      pending_.push_back(req);
    }
    cv_.notify_one();
    std::unique_lock lock(req->mu);
    req->cv.wait(lock, [&] { return req->done; });
    return req->result;
  }

 private:
  struct Request {
    ncclComm_t comm = nullptr;
    ncclResult_t result = ncclSuccess;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  Aborter() : thread_([this] { loop(); }) {}

  void loop() {
    nameThisThread("mw-nccl-abort");
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !pending_.empty() || stopping_; });
        if (pending_.empty()) return;  // stopping, and nothing left to abort
      }
      std::this_thread::sleep_for(1ms);  // let the others that broke with it arrive
      std::vector<std::shared_ptr<Request>> batch;
      {
        std::lock_guard lock(mu_);
        batch.assign(pending_.begin(), pending_.end());
        pending_.clear();
      }
      const bool grouped = batch.size() > 1;  // the loader checked NCCL >= 2.22
      if (grouped) ncclApi().ncclGroupStart();
      for (auto& r : batch) r->result = ncclApi().ncclCommAbort(r->comm);
      if (grouped) {
        ncclResult_t end = ncclApi().ncclGroupEnd();
        for (auto& r : batch) {
          if (r->result == ncclSuccess) r->result = end;
        }
      }
      for (auto& r : batch) {
        {
          std::lock_guard lock(r->mu);
          r->done = true;
        }
        r->cv.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> pending_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                         // GUARDED_BY(mu_)
  std::thread thread_;                            // last: starts once the above exist
};

struct Failure {
  Cause cause;
  int peer;
  std::string detail;
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

  void submit(OpRequest op, bool /*caller_waits*/) override {
    std::unique_lock lock(mu_);
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

  void abort(const Status& reason) override {
    std::deque<OpRequest> dropped;  // never launched: nothing on the GPU uses their memory
    {
      std::lock_guard lock(mu_);
      if (abort_reason_) return;
      abort_reason_ = reason;
      dropped.swap(queue_);
    }
    cv_.notify_all();
    for (auto& op : dropped) {
      giveEvent(static_cast<cudaEvent_t>(op.ready));
      op.work->complete(reason);
    }
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    abort(Status(Code::kAborted, "world '" + cfg_.world + "' was removed"));
    if (executor_.joinable()) executor_.join();
    // The executor aborted the communicator and drained the stream.
    {
      std::lock_guard lock(events_mu_);
      for (cudaEvent_t e : events_) api_.cudaEventDestroy(e);
      events_.clear();
      free_events_.clear();
    }
    if (scratch_ != nullptr) api_.cudaFree(scratch_);
    if (stream_ != nullptr) api_.cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    stream_ = nullptr;
  }

 private:
  struct InFlight {
    OpRequest req;
    cudaEvent_t done;
  };

  void run();
  std::optional<Failure> launch(OpRequest& op, cudaEvent_t done);
  ncclResult_t enqueue(const OpRequest& op);
  ncclResult_t rooted(const OpRequest& op);
  ncclResult_t allToAll(const OpRequest& op);
  // Polls the communicator until the last call is no longer in progress or `until` passes
  // (then returns ncclInProgress).
  ncclResult_t settle(Clock::time_point until);
  std::optional<Failure> asyncFailure();
  Failure ncclFailure(const char* what, ncclResult_t r, const std::string& suffix = "");
  void fail(const Failure& f);
  void drain(std::deque<InFlight>& inflight);
  // Records op.ready on op.stream in the submitting thread (the CUDA stream contract,
  // multiworld/cuda_stream.h). kInvalidArgument when CUDA refuses the stream.
  Status orderAfterCaller(OpRequest& op);
  // An event of this world's device from the pool (nullptr when CUDA cannot make one); the
  // calling thread's current device must be the world's. giveEvent(nullptr) does nothing.
  cudaEvent_t takeEvent();
  void giveEvent(cudaEvent_t e);
  Status abortReason();

  const NcclConfig cfg_;
  const NcclApi& api_ = ncclApi();  // loaded before any backend is built
  ncclComm_t comm_;                 // executor thread only, until it has aborted it
  cudaStream_t stream_;
  int* scratch_;  // one int on the device, for barrier
  BackendErrorHandler on_error_;
  const OpFailPoints failpoints_;
  std::optional<Injection> async_injection_;  // executor thread only
  std::mutex events_mu_;                      // taken inside mu_, never around it
  std::vector<cudaEvent_t> events_;           // GUARDED_BY(events_mu_): all, for shutdown
  std::vector<cudaEvent_t> free_events_;      // GUARDED_BY(events_mu_)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OpRequest> queue_;         // GUARDED_BY(mu_)
  std::optional<Status> abort_reason_;  // GUARDED_BY(mu_)
  bool shut_down_ = false;              // GUARDED_BY(mu_)

  std::thread executor_;  // last: starts after everything above is built
};

cudaEvent_t NcclBackend::takeEvent() {
  std::lock_guard lock(events_mu_);
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
  std::lock_guard lock(events_mu_);
  free_events_.push_back(e);
}

Status NcclBackend::orderAfterCaller(OpRequest& op) {
  int previous = -1;
  const bool switched =
      api_.cudaGetDevice(&previous) != cudaSuccess || previous != cfg_.device;
  cudaError_t e = switched ? api_.cudaSetDevice(cfg_.device) : cudaSuccess;
  cudaEvent_t ready = nullptr;
  if (e == cudaSuccess) {
    ready = takeEvent();
    e = ready == nullptr ? cudaErrorMemoryAllocation
                         : api_.cudaEventRecord(ready, static_cast<cudaStream_t>(op.stream));
  }
  if (switched && previous >= 0) api_.cudaSetDevice(previous);
  if (e == cudaSuccess) {
    op.ready = ready;
    return Status::Ok();
  }
  api_.cudaGetLastError();  // not a sticky error: the caller's own CUDA calls go on
  giveEvent(ready);
  char stream[32];
  std::snprintf(stream, sizeof stream, "%p", op.stream);
  return Status(Code::kInvalidArgument,
                "world '" + cfg_.world + "': " + opKindName(op.kind) +
                    " cannot be ordered after the caller's CUDA stream " +
                    (op.stream == nullptr ? std::string("(the default stream)") : stream) +
                    ": cudaEventRecord: " + cudaText(e) +
                    " (the current stream must be a live stream of cuda:" +
                    std::to_string(cfg_.device) + ")");
}

Status NcclBackend::abortReason() {
  std::lock_guard lock(mu_);
  return abort_reason_ ? *abort_reason_
                       : Status(Code::kBackendError, "world '" + cfg_.world + "' failed");
}

void NcclBackend::run() {
  api_.cudaSetDevice(cfg_.device);
  std::deque<InFlight> inflight;
  auto last_progress = Clock::now();
  for (;;) {
    std::optional<OpRequest> next;
    {
      std::unique_lock lock(mu_);
      if (inflight.empty()) cv_.wait(lock, [&] { return abort_reason_ || !queue_.empty(); });
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
        fail(*f);
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
    } else if (now - last_progress > kSpinFor) {
      std::this_thread::sleep_for(kPollSleep);
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
    return ncclFailure(what, static_cast<ncclResult_t>(injected->failnum), injected->suffix());
  }
  ncclResult_t r = ncclSuccess;
  {
    std::unique_lock gpu(launchMutex(cfg_.device));
    r = enqueue(op);
    if (r == ncclInProgress) r = settle(std::min(op.deadline, Clock::now() + kLaunchLockLimit));
    if (r == ncclInProgress) {
      gpu.unlock();  // the other worlds on this GPU need not wait for this one's peers
      r = settle(op.deadline);
    }
  }
  if (r == ncclInProgress) {
    return Failure{Cause::kOpTimeout, -1,
                   std::string(what) + " passed its deadline while NCCL was launching it"};
  }
  if (r != ncclSuccess) return ncclFailure(what, r);
  if (cudaError_t e = api_.cudaEventRecord(done, stream_); e != cudaSuccess) {
    return Failure{Cause::kBackendError, -1,
                   std::string(what) + ": cudaEventRecord: " + cudaText(e)};
  }
  if (injected) async_injection_ = injected;  // failinfo 1: surfaces at the next poll
  return std::nullopt;
}

ncclResult_t NcclBackend::settle(Clock::time_point until) {
  ncclResult_t r = ncclInProgress;
  while (r == ncclInProgress) {
    if (api_.ncclCommGetAsyncError(comm_, &r) != ncclSuccess) return ncclInternalError;
    if (r != ncclInProgress || Clock::now() >= until) break;
    std::this_thread::sleep_for(kPollSleep);
  }
  return r;
}

ncclResult_t NcclBackend::enqueue(const OpRequest& op) {
  void* d = op.in.data;
  const size_t n = op.in.count;
  const ncclDataType_t dt = ncclType(op.in.dtype);
  switch (op.kind) {
    case OpKind::kSend:
      return api_.ncclSend(d, n, dt, op.peer, comm_, stream_);
    case OpKind::kRecv:
      return api_.ncclRecv(d, n, dt, op.peer, comm_, stream_);
    case OpKind::kBroadcast:
      return api_.ncclBroadcast(d, d, n, dt, op.peer, comm_, stream_);
    case OpKind::kAllReduce:
      return api_.ncclAllReduce(d, d, n, dt, ncclOp(op.reduce), comm_, stream_);
    case OpKind::kReduce:
      return api_.ncclReduce(d, d, n, dt, ncclOp(op.reduce), op.peer, comm_, stream_);
    case OpKind::kAllGather:
      return api_.ncclAllGather(d, op.out.data, n, dt, comm_, stream_);
    case OpKind::kReduceScatter:
      return api_.ncclReduceScatter(d, op.out.data, op.out.count, dt, ncclOp(op.reduce), comm_,
                                    stream_);
    case OpKind::kGather:
    case OpKind::kScatter:
      return rooted(op);
    case OpKind::kAllToAll:
      return allToAll(op);
    case OpKind::kBarrier:
      return api_.ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
  }
  return ncclInvalidUsage;
}

// Runs `body` inside one NCCL group; the group is closed even when a call inside fails.
template <typename Body>
ncclResult_t grouped(Body&& body) {
  if (ncclResult_t r = ncclApi().ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t inner = body();
  ncclResult_t end = ncclApi().ncclGroupEnd();
  return inner != ncclSuccess ? inner : end;
}

// gather and scatter as point-to-point messages in one group (the root's own block included,
// which NCCL allows within a group); every NCCL version with non-blocking communicators has them.
ncclResult_t NcclBackend::rooted(const OpRequest& op) {
  const bool gather = op.kind == OpKind::kGather;
  const Tensor& block = gather ? op.in : op.out;
  const size_t bytes = block.bytes();
  const ncclDataType_t dt = ncclType(block.dtype);
  const int root = op.peer;
  return grouped([&]() -> ncclResult_t {
    if (gather) {
      ncclResult_t r = api_.ncclSend(op.in.data, op.in.count, dt, root, comm_, stream_);
      if (r != ncclSuccess || cfg_.rank != root) return r;
      for (int i = 0; i < cfg_.size && r == ncclSuccess; ++i) {
        r = api_.ncclRecv(static_cast<char*>(op.out.data) + bytes * i, block.count, dt, i, comm_,
                          stream_);
      }
      return r;
    }
    ncclResult_t r = ncclSuccess;
    if (cfg_.rank == root) {
      for (int i = 0; i < cfg_.size && r == ncclSuccess; ++i) {
        r = api_.ncclSend(static_cast<const char*>(op.in.data) + bytes * i, block.count, dt, i,
                          comm_, stream_);
      }
    }
    return r != ncclSuccess ? r
                            : api_.ncclRecv(op.out.data, op.out.count, dt, root, comm_, stream_);
  });
}

ncclResult_t NcclBackend::allToAll(const OpRequest& op) {
  const size_t count = op.in.count / static_cast<size_t>(cfg_.size);
  const size_t bytes = count * dtypeSize(op.in.dtype);
  const ncclDataType_t dt = ncclType(op.in.dtype);
  return grouped([&]() -> ncclResult_t {
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < cfg_.size && r == ncclSuccess; ++j) {
      r = api_.ncclSend(static_cast<const char*>(op.in.data) + bytes * j, count, dt, j, comm_,
                        stream_);
      if (r == ncclSuccess) {
        r = api_.ncclRecv(static_cast<char*>(op.out.data) + bytes * j, count, dt, j, comm_,
                          stream_);
      }
    }
    return r;
  });
}

std::optional<Failure> NcclBackend::asyncFailure() {
  if (async_injection_) {
    Injection inj = *async_injection_;
    async_injection_.reset();
    return ncclFailure("asynchronous error", static_cast<ncclResult_t>(inj.failnum), inj.suffix());
  }
  ncclResult_t async = ncclSuccess;
  if (ncclResult_t r = api_.ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
  if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
  return ncclFailure("asynchronous error", async);
}

Failure NcclBackend::ncclFailure(const char* what, ncclResult_t r, const std::string& suffix) {
  std::string detail = std::string("nccl ") + what + ": " + ncclText(r);
  if (suffix.empty()) {
    const char* last = api_.ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') detail += ": " + std::string(last);
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
  // Never finalize or destroy a communicator whose peer may be dead: abort it. NCCL's kernels
  // then exit, and the stream's work ends.
  if (comm_ != nullptr) Aborter::instance().abort(comm_);
  comm_ = nullptr;
  const Status reason = abortReason();
  const auto until = deadlineIn(kDrainLimit);
  for (auto& f : inflight) {
    // Completing the work hands the caller's memory back: only once the GPU is done with it.
    while (f.done != nullptr && api_.cudaEventQuery(f.done) == cudaErrorNotReady &&
           Clock::now() < until) {
      std::this_thread::sleep_for(100us);
    }
    f.req.work->complete(reason);
  }
  inflight.clear();
}

Result<std::shared_ptr<Backend>> init(const NcclConfig& cfg, StoreClient& store,
                                      BackendErrorHandler on_error, Deadline deadline) {
  const std::string where = "world '" + cfg.world + "' (nccl, rank " + std::to_string(cfg.rank) +
                            " of " + std::to_string(cfg.size) +
                            ", cuda:" + std::to_string(cfg.device) + ")";
  OpFailPoints failpoints("nccl", cfg.world);
  if (cudaError_t e = ncclApi().cudaSetDevice(cfg.device); e != cudaSuccess) {
    return Status(Code::kUnavailable, where + ": cudaSetDevice: " + cudaText(e));
  }
  if (auto injected = failpoints.init().check()) {
    return Status(Code::kBackendError, where + ": ncclCommInitRankConfig: " +
                                           ncclText(static_cast<ncclResult_t>(injected->failnum)) +
                                           injected->suffix());
  }
  ncclUniqueId id{};
  const std::string key = "nccl/id";
  if (cfg.rank == 0) {
    if (ncclResult_t r = ncclApi().ncclGetUniqueId(&id); r != ncclSuccess) {
      return Status(Code::kBackendError, where + ": ncclGetUniqueId: " + ncclText(r));
    }
    Status s = store.set(key, std::string(id.internal, sizeof(id.internal)), deadline);
    if (!s.ok()) return Status(s.code(), where + ": publishing the NCCL id: " + s.message());
  } else {
    auto v = store.get(key, deadline);
    if (!v.ok()) {
      return Status(v.status().code(), where + ": reading the NCCL id: " + v.status().message());
    }
    if (v->size() != sizeof(id.internal)) {
      return Status(Code::kRemoteError, where + ": the NCCL id in the store has " +
                                            std::to_string(v->size()) + " bytes, not " +
                                            std::to_string(sizeof(id.internal)));
    }
    std::memcpy(id.internal, v->data(), sizeof(id.internal));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;    // every call returns at once; completion is polled against deadlines
  config.splitShare = 0;  // nothing shared with any other world's communicator
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclApi().ncclCommInitRankConfig(&comm, cfg.size, id, cfg.rank, &config);
  while (r == ncclInProgress && comm != nullptr) {
    if (Clock::now() >= deadline) {
      Aborter::instance().abort(comm);
      return Status(Code::kTimeout,
                    where + ": the members did not all initialize NCCL before the deadline");
    }
    std::this_thread::sleep_for(1ms);
    if (ncclApi().ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r != ncclSuccess) {
    std::string last =
        comm != nullptr ? ncclApi().ncclGetLastError(comm) : ncclApi().ncclGetLastError(nullptr);
    if (comm != nullptr) Aborter::instance().abort(comm);
    return Status(Code::kBackendError, where + ": ncclCommInitRankConfig: " + ncclText(r) +
                                           (last.empty() ? "" : ": " + last));
  }
  cudaStream_t stream = nullptr;
  int* scratch = nullptr;
  cudaError_t e = ncclApi().cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = ncclApi().cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(int));
  if (e == cudaSuccess) e = ncclApi().cudaMemset(scratch, 0, sizeof(int));
  if (e != cudaSuccess) {
    if (scratch != nullptr) ncclApi().cudaFree(scratch);
    if (stream != nullptr) ncclApi().cudaStreamDestroy(stream);
    Aborter::instance().abort(comm);
    return Status(Code::kBackendError, where + ": creating its CUDA stream: " + cudaText(e));
  }
  return std::shared_ptr<Backend>(std::make_shared<NcclBackend>(
      cfg, comm, stream, scratch, std::move(on_error), std::move(failpoints)));
}

}  // namespace

Status checkCudaDevice(int index) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string seen =
      visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : "";
  const std::string dev = "cuda:" + std::to_string(index);
  if (auto api = loadNcclApi(); !api.ok()) {
    return Status(Code::kUnavailable, dev + " cannot be used: " + api.status().message());
  }
  int count = 0;
  cudaError_t e = ncclApi().cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    ncclApi().cudaGetLastError();  // clear it for the program's own CUDA calls
    std::string why = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                          ? ": this machine has no usable NVIDIA driver or GPU"
                          : "";
    return Status(Code::kUnavailable,
                  dev + " cannot be used: cudaGetDeviceCount: " + cudaText(e) + why + seen);
  }
  if (index < 0 || index >= count) {
    return Status(Code::kUnavailable, dev + " does not exist: this process sees " +
                                          std::to_string(count) + " GPU(s)" + seen);
  }
  return Status::Ok();
}

Result<std::shared_ptr<Backend>> createNcclBackend(const NcclConfig& config, StoreClient& store,
                                                   BackendErrorHandler on_error,
                                                   Deadline deadline) {
  MW_RETURN_IF_ERROR(checkCudaDevice(config.device));
  // In a thread of its own: NCCL's init may leave per-thread state behind when it fails, and the
  // caller's current device stays as it was.
  Result<std::shared_ptr<Backend>> result = Status(Code::kAborted, "not run");
  std::thread([&] { result = init(config, store, std::move(on_error), deadline); }).join();
  return result;
}

}  // namespace mw::detail
