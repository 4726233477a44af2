// The NCCL backend's entry points in a library built without CUDA and NCCL.
#include "nccl/nccl_backend.h"

namespace mw::detail {

namespace {
Status notBuilt(int index) {
  return Status(Code::kUnavailable,
                "cuda:" + std::to_string(index) +
                    " cannot be used: this libmultiworld was built without the NCCL backend "
                    "(CUDA and NCCL were not found at build time; install them and configure "
                    "with -DMW_WITH_NCCL=ON)");
}
}  // namespace

Status checkCudaDevice(int index) { return notBuilt(index); }

Result<std::shared_ptr<Backend>> createNcclBackend(const NcclConfig& config, StoreClient&,
                                                   BackendErrorHandler, Deadline) {
  return notBuilt(config.device);
}

bool waitForNcclAborts(Deadline) { return true; }

int ncclAbortsInFlight() { return 0; }

}  // namespace mw::detail
