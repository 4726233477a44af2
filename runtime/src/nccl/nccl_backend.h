// The NCCL backend: GPU worlds, one non-blocking NCCL communicator and one CUDA stream per world.
//
// The submitting thread launches an operation itself when the world has nothing queued (else the
// world's executor thread does, in order); a completer thread per world completes operations in
// order as the GPU passes their done events, after reading the communicator's asynchronous error;
// Work::wait() is stream-ordered (the caller's stream waits for the done event) unless the world
// waits on the host (CudaWait::kHost). Nothing blocks in a stream synchronize. A failed or
// removed world's communicator is aborted (ncclCommAbort, never finalized or destroyed: its peer
// may be dead) on a thread of its own, so that no abort waits behind another; every wait for the
// GPU is bounded, and past the bound the world's memory is left behind rather than freed under
// work that may still use it. Launches on one GPU are serialized across worlds.
//
// Built only where CUDA and NCCL are found (MW_WITH_NCCL); without them createNcclBackend says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "multiworld/store.h"

namespace mw::detail {

struct NcclConfig {
  std::string world;
  int rank = 0;
  int size = 1;
  int device = 0;          // CUDA ordinal as this process sees it (CUDA_VISIBLE_DEVICES applies)
  bool host_wait = false;  // Work::wait() blocks the host (CudaWait::kHost), else stream-ordered
};

// OK when CUDA device `index` can be used by this process. kUnavailable naming what is missing
// (no NCCL backend in this build, no driver, no GPU, an ordinal past the GPUs this process sees,
// with CUDA_VISIBLE_DEVICES when it is set).
Status checkCudaDevice(int index);

// Creates the world's communicator: rank 0 draws the NCCL unique id and publishes it in `store`
// (key "nccl/id"), the others read it; then every member initializes a non-blocking communicator
// until `deadline` (kTimeout, the communicator aborted). Does not change the calling thread's
// current CUDA device. `on_error` is called from the backend's thread when the world fails.
Result<std::shared_ptr<Backend>> createNcclBackend(const NcclConfig& config, StoreClient& store,
                                                   BackendErrorHandler on_error, Deadline deadline);

// Waits until every communicator abort started in this process so far has returned, or
// `deadline` passed; true when none is left (at once without the NCCL backend). An abort may wait
// for every kernel on its device, another world's stuck one included: a removal does not wait
// for it past a few milliseconds, and ~WorldManager waits here, bounded. Thread-safe.
bool waitForNcclAborts(Deadline deadline);

// The communicator aborts started and not yet returned in this process. Thread-safe.
int ncclAbortsInFlight();

// How a world's completer thread learns that the GPU passed an operation's done event
// (docs/design.md, "Completion"): kSpin polls the event without pause (lag about a microsecond,
// a core while operations are in flight); kBlocking sleeps in cudaEventSynchronize on a
// blocking-sync event (woken by the GPU's interrupt, no CPU while waiting); kHybrid polls for 20 us
// then sleeps as kBlocking does; kPredict sleeps (a timed wait) until 10 us before the operation's
// expected end (learned from the world's operations: an average of the durations it saw end while
// polling, shrunk when an operation was already complete at the first look, grown half way to one
// seen only after a blocked wait), polls from there until a quarter of that duration (at least
// 20 us) past it, then sleeps as kBlocking does.
// Polls query the event at most every microsecond. MW_NCCL_COMPLETION=spin|blocking|hybrid|
// predict chooses, read once per process; hybrid when unset. setNcclCompletionMode (benchmarks,
// tests) sets the mode of the worlds created after it. Thread-safe.
enum class NcclCompletion : uint8_t { kSpin, kBlocking, kHybrid, kPredict };
NcclCompletion ncclCompletionMode();
void setNcclCompletionMode(NcclCompletion m);
const char* ncclCompletionName(NcclCompletion m);

// Launches of the process's nccl worlds so far, by the thread that made them: the submitting
// thread itself, or a world's executor (a thread hand-off: the world was busy launching, or the
// GPU's launch lock was held by another world). Thread-safe.
struct NcclLaunchCounts {
  long caller = 0;
  long executor = 0;
};
NcclLaunchCounts ncclLaunchCounts();

// The initializing threads (mw-nccl-init) of this process that have not yet returned. NCCL's own
// threads started from one keep its name (NCCL names threads only with NCCL_SET_THREAD_NAME=1),
// so a thread's name cannot tell them apart: this count can. Thread-safe.
int ncclInitThreadsRunning();

}  // namespace mw::detail
