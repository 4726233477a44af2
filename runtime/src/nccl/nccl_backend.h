// The NCCL backend: GPU worlds, one non-blocking NCCL communicator and one CUDA stream per world.
//
// Completion is found by polling a CUDA event per operation and the communicator's asynchronous
// error against the operation's deadline; nothing ever blocks in a stream synchronize. A failed or
// removed world's communicator is aborted (ncclCommAbort, never finalized or destroyed: its peer
// may be dead) on a thread of its own, so that no abort waits behind another; every wait for the
// GPU is bounded, and past the bound the world's memory is left behind rather than freed under
// work that may still use it. Launches on one GPU are serialized across worlds.
//
// Built only where CUDA and NCCL are found (MW_WITH_NCCL); without them createNcclBackend says so.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "multiworld/store.h"

namespace mw::detail {

struct NcclConfig {
  std::string world;
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA ordinal as this process sees it (CUDA_VISIBLE_DEVICES applies)
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

// The initializing threads (mw-nccl-init) of this process that have not yet returned. NCCL's own
// threads started from one keep its name (NCCL names threads only with NCCL_SET_THREAD_NAME=1),
// so a thread's name cannot tell them apart: this count can. Thread-safe.
int ncclInitThreadsRunning();

}  // namespace mw::detail
