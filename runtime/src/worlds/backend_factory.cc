#include "worlds/backend_factory.h"

#include "gloo/gloo_backend.h"
#include "nccl/nccl_backend.h"

namespace mw::detail {

Status checkBackendAvailable(const WorldOptions& o) {
  if (o.backend != BackendKind::kNccl) return Status::Ok();
  return checkCudaDevice(o.device.index);
}

Result<std::shared_ptr<Backend>> createBackend(const WorldOptions& o, const std::string& bind_host,
                                               StoreClient& store, BackendErrorHandler on_error,
                                               Deadline deadline) {
  if (o.backend == BackendKind::kNccl) {
    return createNcclBackend(
        NcclConfig{o.name, o.rank, o.size, o.device.index, o.cuda_wait == CudaWait::kHost}, store,
        std::move(on_error), deadline);
  }
  return createGlooBackend(GlooConfig{o.name, o.rank, o.size, bind_host, o.executor_grace}, store,
                           std::move(on_error), deadline);
}

}  // namespace mw::detail
