// What the NCCL backend asks of NCCL for one operation, and how it names NCCL's and CUDA's
// results in its errors.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "nccl/nccl_backend.h"

namespace mw::detail {

// CUDA's name and text for `e`: "cudaErrorInvalidValue (invalid argument)".
// REQUIRES: loadNcclApi() returned OK.
std::string cudaText(cudaError_t e);
// NCCL's name, number and text for `r`: "ncclRemoteError 6 (remote process exited ...)".
// REQUIRES: loadNcclApi() returned OK.
std::string ncclText(ncclResult_t r);

// Where an operation goes: the world's communicator, stream and barrier memory (one int on the
// device), and its shape.
struct NcclTarget {
  ncclComm_t comm;
  cudaStream_t stream;
  int* scratch;
  int rank;
  int size;
};

// Enqueues `op` on `t`: one NCCL call, or, for gather, scatter and all_to_all, point-to-point
// calls inside one NCCL group (closed even when a call inside fails). NCCL's result; ncclInProgress
// when NCCL completes the launch in the background. The caller holds the GPU's launch lock.
ncclResult_t enqueueOp(const OpRequest& op, const NcclTarget& t);

// The backend of a world whose communicator, stream and barrier memory init has made; it owns
// them from now on (nccl_backend.cc).
std::shared_ptr<Backend> makeNcclBackend(NcclConfig cfg, ncclComm_t comm, cudaStream_t stream,
                                         int* scratch, BackendErrorHandler on_error,
                                         OpFailPoints failpoints);

}  // namespace mw::detail
