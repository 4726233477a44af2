// What NCCL worlds share in a process: the threads that abort communicators, and the device memory
// of barriers. Both exist because ncclCommAbort, cudaFree and cudaMalloc may wait for every kernel
// on the device (NVIDIA/nccl #549, #564; hangs in #829, #863, #1013): one world's stuck kernel must
// not hold another world's creation, removal or abort.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "multiworld/status.h"

namespace mw::detail {

// How long a world's teardown (or a failed init) waits for its communicator's abort before leaving
// it to finish on its own thread: an abort that frees device memory waits for every kernel on the
// device, another world's stuck kernel included.
inline constexpr auto kAbortWait = std::chrono::milliseconds(20);

// One abort in progress. Thread-safe.
class AbortTicket {
 public:
  // Waits until the abort returned or `until` passed; true when it returned.
  bool waitUntil(Clock::time_point until);
  // Marks it returned, waking its waiters (the abort's thread calls this).
  void finish();

 private:
  Mutex mu_;
  std::condition_variable cv_;
  bool done_ MW_GUARDED_BY(mu_) = false;
};

// Aborts `comm` (ncclCommAbort) on a thread of its own, with `device` current, and returns at once.
// Aborts never wait behind one another: each has its thread, detached, which nothing ever joins
// (not at exit either). Its name is mw-nccl-abort. When no thread can be made, the abort runs in
// the caller's thread. REQUIRES: loadNcclApi() returned OK; `comm` is not used by anyone after.
std::shared_ptr<AbortTicket> startAbort(ncclComm_t comm, int device);

// Counts, while it lives, an abort that the constructing thread runs itself (`counts` false: it
// counts nothing) among the aborts in flight.
class AbortCounted {
 public:
  explicit AbortCounted(bool counts);
  ~AbortCounted();
  AbortCounted(const AbortCounted&) = delete;
  AbortCounted& operator=(const AbortCounted&) = delete;

 private:
  const bool counts_;
};

// waitForNcclAborts and ncclAbortsInFlight (nccl_backend.h) see every abort started here.

// One int of device memory for a world's barrier, from a pool per device that is allocated in
// chunks and never freed (a cudaFree at a world's removal would wait for every other world's
// kernels). Its value is never read. kBackendError naming CUDA's error when a chunk cannot be
// allocated. REQUIRES: the calling thread's current device is `device`. Thread-safe.
Result<int*> takeScratch(int device);
// Returns a slot of takeScratch to the pool: only once no work on the GPU can still use it (a
// world whose drain timed out keeps its slot for good). Thread-safe.
void giveScratch(int device, int* slot);

}  // namespace mw::detail
