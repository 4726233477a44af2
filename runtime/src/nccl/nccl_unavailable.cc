// The NCCL backend's entry points, and multiworld/gpu.h, in a library built without CUDA and NCCL.
#include <string>

#include "multiworld/gpu.h"
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

int ncclInitThreadsRunning() { return 0; }

NcclCompletion ncclCompletionMode() { return NcclCompletion::kHybrid; }

void setNcclCompletionMode(NcclCompletion) {}

const char* ncclCompletionName(NcclCompletion) { return "none"; }

NcclLaunchCounts ncclLaunchCounts() { return {}; }

}  // namespace mw::detail

// multiworld/gpu.h without the NCCL backend: no GPU can be used, and no buffer ever holds memory.
namespace mw {

int visibleGpuCount() noexcept { return 0; }

Result<DeviceBuffer> DeviceBuffer::allocate(Device device, size_t) {
  if (device.kind != Device::Kind::kCuda) {
    return Status(Code::kInvalidArgument,
                  "DeviceBuffer::allocate: " + device.str() + " is not a CUDA device");
  }
  return detail::checkCudaDevice(device.index);  // kUnavailable: this build has no NCCL backend
}

Status DeviceBuffer::fill(uint8_t) { return Status::Ok(); }

// A buffer here holds nothing: only a copy of 0 bytes at offset 0 is inside it.
Status DeviceBuffer::write(size_t offset, const void*, size_t bytes) {
  if (offset == 0 && bytes == 0) return Status::Ok();
  return Status(Code::kInvalidArgument, "DeviceBuffer::write: bytes [" + std::to_string(offset) +
                                            ", +" + std::to_string(bytes) + ") of an empty buffer");
}

Status DeviceBuffer::read(size_t offset, void*, size_t bytes) const {
  if (offset == 0 && bytes == 0) return Status::Ok();
  return Status(Code::kInvalidArgument, "DeviceBuffer::read: bytes [" + std::to_string(offset) +
                                            ", +" + std::to_string(bytes) + ") of an empty buffer");
}

void DeviceBuffer::release() noexcept {}

}  // namespace mw
