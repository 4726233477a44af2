// multiworld/gpu.h with the NCCL backend: through the CUDA runtime that nccl_loader.h opens.
#include "multiworld/gpu.h"

#include <string>

#include "nccl/nccl_backend.h"
#include "nccl/nccl_loader.h"

namespace mw {

namespace {

using detail::ncclApi;

// Clears CUDA's last error (the program's own CUDA calls must not see ours) and describes it.
std::string takeError(cudaError_t e) {
  ncclApi().cudaGetLastError();
  return std::string(ncclApi().cudaGetErrorName(e)) + " (" + ncclApi().cudaGetErrorString(e) + ")";
}

// Makes `device` the calling thread's current device for the scope's lifetime, then restores the
// one before.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    if (ncclApi().cudaGetDevice(&previous_) != cudaSuccess) {
      ncclApi().cudaGetLastError();
      previous_ = -1;
    }
    switched_ = previous_ != device;
    if (switched_) error_ = ncclApi().cudaSetDevice(device);
  }
  ~OnDevice() {
    if (switched_ && previous_ >= 0 && error_ == cudaSuccess) ncclApi().cudaSetDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace

int visibleGpuCount() noexcept {
  try {
    if (!detail::loadNcclApi().ok()) return 0;
    int count = 0;
    if (cudaError_t e = ncclApi().cudaGetDeviceCount(&count); e != cudaSuccess) {
      ncclApi().cudaGetLastError();
      return 0;
    }
    return count;
  } catch (...) {  // an allocation in the loader's messages
    return 0;
  }
}

Result<DeviceBuffer> DeviceBuffer::allocate(Device device, size_t bytes) {
  if (device.kind != Device::Kind::kCuda) {
    return Status(Code::kInvalidArgument,
                  "DeviceBuffer::allocate: " + device.str() + " is not a CUDA device");
  }
  if (bytes > kMaxTensorBytes) {
    return Status(Code::kInvalidArgument,
                  "DeviceBuffer::allocate: " + std::to_string(bytes) + " bytes is too large");
  }
  MW_RETURN_IF_ERROR(detail::checkCudaDevice(device.index));  // loads the CUDA runtime
  if (bytes == 0) return DeviceBuffer(device, nullptr, 0);
  const std::string what = "DeviceBuffer::allocate: " + device.str();
  OnDevice on(device.index);
  if (on.error() != cudaSuccess) {
    return Status(Code::kBackendError, what + ": cudaSetDevice: " + takeError(on.error()));
  }
  void* data = nullptr;
  if (cudaError_t e = ncclApi().cudaMalloc(&data, bytes); e != cudaSuccess) {
    return Status(e == cudaErrorMemoryAllocation ? Code::kUnavailable : Code::kBackendError,
                  what + ": cudaMalloc of " + std::to_string(bytes) + " bytes: " + takeError(e));
  }
  return DeviceBuffer(device, data, bytes);
}

Status DeviceBuffer::fill(uint8_t byte) {
  if (data_ == nullptr) return Status::Ok();
  const std::string what = "DeviceBuffer::fill: " + device_.str();
  OnDevice on(device_.index);
  if (on.error() != cudaSuccess) {
    return Status(Code::kBackendError, what + ": cudaSetDevice: " + takeError(on.error()));
  }
  if (cudaError_t e = ncclApi().cudaMemset(data_, byte, size_); e != cudaSuccess) {
    return Status(Code::kBackendError, what + ": cudaMemset: " + takeError(e));
  }
  return Status::Ok();
}

namespace {

// The copy of `bytes` bytes at `offset` of a buffer of `size` bytes on `device`, `to_device` or
// back (DeviceBuffer::write and read).
Status copyBytes(const char* what, Device device, char* data, size_t size, size_t offset,
                 void* host, size_t bytes, bool to_device) {
  if (offset > size || bytes > size - offset) {
    return Status(Code::kInvalidArgument, std::string(what) + ": bytes [" + std::to_string(offset) +
                                              ", +" + std::to_string(bytes) + ") of a buffer of " +
                                              std::to_string(size));
  }
  if (bytes == 0) return Status::Ok();
  const std::string where = std::string(what) + ": " + device.str();
  OnDevice on(device.index);
  if (on.error() != cudaSuccess) {
    return Status(Code::kBackendError, where + ": cudaSetDevice: " + takeError(on.error()));
  }
  cudaError_t e = to_device
                      ? ncclApi().cudaMemcpy(data + offset, host, bytes, cudaMemcpyHostToDevice)
                      : ncclApi().cudaMemcpy(host, data + offset, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return Status(Code::kBackendError, where + ": cudaMemcpy: " + takeError(e));
  return Status::Ok();
}

}  // namespace

Status DeviceBuffer::write(size_t offset, const void* src, size_t bytes) {
  return copyBytes("DeviceBuffer::write", device_, static_cast<char*>(data_), size_, offset,
                   const_cast<void*>(src), bytes, true);
}

Status DeviceBuffer::read(size_t offset, void* dst, size_t bytes) const {
  return copyBytes("DeviceBuffer::read", device_, static_cast<char*>(data_), size_, offset, dst,
                   bytes, false);
}

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  {
    OnDevice on(device_.index);
    if (on.error() != cudaSuccess || ncclApi().cudaFree(data_) != cudaSuccess) {
      ncclApi().cudaGetLastError();
    }
  }
  data_ = nullptr;
  size_ = 0;
}

}  // namespace mw
