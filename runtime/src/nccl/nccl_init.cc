// An NCCL world's creation: the device check, the communicator's initialization (in a thread of
// its own, cancellable) and the world's stream and barrier memory.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "base/mutex.h"
#include "base/thread_name.h"
#include "nccl/nccl_backend.h"
#include "nccl/nccl_loader.h"
#include "nccl/nccl_ops.h"
#include "nccl/nccl_resources.h"
#include "store/socket.h"

namespace mw::detail {

namespace {

using namespace std::chrono_literals;

// Makes the world's communicator, stream and barrier memory. A communicator made and then not used
// (init failed, timed out or was cancelled) is left in `*unused`, for the caller to abort on this
// same thread: NCCL 2.22-2.25's abort of an unfinished init uses this thread's job record.
Result<std::shared_ptr<Backend>> init(const NcclConfig& cfg, StoreClient& store,
                                      BackendErrorHandler on_error, Deadline deadline,
                                      ncclComm_t* unused) {
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
    auto v = store.get(key, deadline);  // ends at once when the join is cancelled
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
  config.commName = cfg.world.c_str();  // NCCL's logs and profilers name the world
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclApi().ncclCommInitRankConfig(&comm, cfg.size, id, cfg.rank, &config);
  while (r == ncclInProgress && comm != nullptr) {
    if (Clock::now() >= deadline) {
      *unused = comm;
      return Status(Code::kTimeout,
                    where + ": the members did not all initialize NCCL before the deadline");
    }
    // Sleeps 1 ms, or ends at once when the join is cancelled (World::cancelJoin).
    if (Status s = store::pause(1ms, deadline); s.code() == Code::kAborted) {
      *unused = comm;
      return Status(Code::kAborted, "cancelled");
    }
    if (ncclApi().ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
  }
  // NCCL 2.22-2.25 keep, in a non-blocking communicator, a pointer into this thread's storage
  // until ncclCommEnsureReady clears it, which the first operation would do from the executor,
  // after this thread has exited (a use after free). ncclCommCount calls it here.
  int count = 0;
  if (r == ncclSuccess) r = ncclApi().ncclCommCount(comm, &count);
  if (r == ncclSuccess && count != cfg.size) {
    *unused = comm;
    return Status(Code::kBackendError, where + ": NCCL made a communicator of " +
                                           std::to_string(count) + " ranks, not " +
                                           std::to_string(cfg.size));
  }
  if (r != ncclSuccess) {
    std::string last =
        comm != nullptr ? ncclApi().ncclGetLastError(comm) : ncclApi().ncclGetLastError(nullptr);
    *unused = comm;
    return Status(
        Code::kBackendError,
        where + ": ncclCommInitRankConfig: " + ncclText(r) +
            (last.empty()
                 ? ""
                 : " (NCCL's last error, one buffer for the whole process: " + last + ")"));
  }
  cudaStream_t stream = nullptr;
  cudaError_t e = ncclApi().cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    ncclApi().cudaGetLastError();
    *unused = comm;
    return Status(Code::kBackendError, where + ": creating its CUDA stream: " + cudaText(e));
  }
  Result<int*> scratch = takeScratch(cfg.device);
  if (!scratch.ok()) {
    ncclApi().cudaStreamDestroy(stream);
    *unused = comm;
    return Status(scratch.status().code(), where + ": " + scratch.status().message());
  }
  return makeNcclBackend(cfg, comm, stream, *scratch, std::move(on_error), std::move(failpoints));
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
    int driver = 0, runtime = 0;
    if (e == cudaErrorInsufficientDriver &&
        ncclApi().cudaDriverGetVersion(&driver) == cudaSuccess &&
        ncclApi().cudaRuntimeGetVersion(&runtime) == cudaSuccess && driver > 0) {
      auto cuda = [](int v) {
        return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
      };
      why = ": the NVIDIA driver is too old for the CUDA runtime " + ncclApi().cudart_file +
            " (CUDA " + cuda(runtime) + "): the driver supports CUDA " + cuda(driver) + " at most" +
            (runtime >= 13000 ? "; CUDA 13 needs driver 580 or newer" : "") + "";
    }
    return Status(Code::kUnavailable,
                  dev + " cannot be used: cudaGetDeviceCount: " + cudaText(e) + why + seen);
  }
  if (index < 0 || index >= count) {
    return Status(Code::kUnavailable, dev + " does not exist: this process sees " +
                                          std::to_string(count) + " GPU(s)" + seen);
  }
  return Status::Ok();
}

namespace {
std::atomic<int> init_threads_running{0};
}  // namespace

int ncclInitThreadsRunning() { return init_threads_running.load(); }

Result<std::shared_ptr<Backend>> createNcclBackend(const NcclConfig& config, StoreClient& store,
                                                   BackendErrorHandler on_error,
                                                   Deadline deadline) {
  MW_RETURN_IF_ERROR(checkCudaDevice(config.device));
  // In a thread of its own: NCCL's init leaves per-thread state behind, and the caller's current
  // device stays as it was. The thread waits for the store in the caller's CancelScope, so that
  // cancelJoin() ends it. It hands its result over first; a communicator it made and did not use
  // is then aborted on it, and the caller waits for that only briefly (see init).
  struct Handover {
    Mutex mu;
    std::condition_variable cv;
    std::optional<Result<std::shared_ptr<Backend>>> result MW_GUARDED_BY(mu);
    bool ended MW_GUARDED_BY(mu) = false;
  };
  auto handover = std::make_shared<Handover>();
  const int cancel_fd = store::currentCancelFd();
  init_threads_running.fetch_add(1);  // given back by the thread's last step
  auto run = [handover, config, &store, on_error = std::move(on_error), deadline,
              cancel_fd]() mutable {
    nameThisThread("mw-nccl-init");
    ncclComm_t unused = nullptr;
    Result<std::shared_ptr<Backend>> r = Status(Code::kAborted, "not run");
    {
      store::CancelScope cancellable(cancel_fd);
      r = init(config, store, std::move(on_error), deadline, &unused);
    }
    AbortCounted counted(unused != nullptr);  // waitForNcclAborts sees it from here on
    {
      MutexLock lock(handover->mu);
      handover->result = std::move(r);
    }
    handover->cv.notify_all();
    if (unused != nullptr) ncclApi().ncclCommAbort(unused);
    {
      MutexLock lock(handover->mu);
      handover->ended = true;
    }
    handover->cv.notify_all();
    init_threads_running.fetch_sub(1);
  };
  std::thread initializer;
  try {
    initializer = std::thread(std::move(run));
  } catch (...) {
    init_threads_running.fetch_sub(1);
    throw;
  }
  MutexLock lock(handover->mu);
  handover->cv.wait(lock.native(),
                    [&]() MW_REQUIRES(handover->mu) { return handover->result.has_value(); });
  const bool ended =
      handover->cv.wait_until(lock.native(), deadlineIn(kAbortWait),
                              [&]() MW_REQUIRES(handover->mu) { return handover->ended; });
  Result<std::shared_ptr<Backend>> result = std::move(*handover->result);
  lock.unlock();
  if (ended) {
    initializer.join();
  } else {
    initializer.detach();  // its abort waits for the GPU: it ends on its own
  }
  return result;
}

}  // namespace mw::detail
