// GPUs through the CUDA runtime that libmultiworld loads itself: how many this process can use,
// and device memory for the tensors of nccl worlds.
//
// The library links neither the CUDA runtime nor NCCL: it opens both at run time, the first time
// it needs them (docs/design.md, NCCL "Loading": $MW_CUDART_LIBRARY and $MW_NCCL_LIBRARY, a copy
// the process has loaded already, else the versions it was built with). The calls below go
// through the same loading, so a program that uses them instead of linking libcudart starts, and
// runs its CPU worlds, on a machine without the CUDA libraries, like the library itself. A program
// that makes its own CUDA calls as well may: a library the process has loaded is the one used.
//
// Thread rules: visibleGpuCount may be called from any thread. A DeviceBuffer is a value: one
// thread at a time uses a given buffer; different buffers may be used from different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "multiworld/status.h"
#include "multiworld/tensor.h"

namespace mw {

// The number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES applies). 0, never an
// error, when this libmultiworld has no NCCL backend, the CUDA runtime or NCCL cannot be loaded
// (the loading is tried once per process: see DeviceBuffer::allocate for the reason), or there is
// no driver or no GPU; CUDA's last error is cleared then, so the program's own CUDA calls do not
// see it. Never blocks on other threads beyond the first loading.
int visibleGpuCount() noexcept;

// Device memory on one CUDA device, freed when the buffer is destroyed. Move-only; a moved-from or
// default-constructed buffer holds nothing (data() nullptr, size() 0).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;

  // Allocates `bytes` bytes (cudaMalloc) on `device`; the contents are undefined (see fill). The
  // calling thread's current CUDA device is the same afterwards. 0 bytes gives a buffer that
  // holds nothing, once the device is known to be usable. Errors:
  // - kInvalidArgument: `device` is not a CUDA device, or `bytes` > kMaxTensorBytes.
  // - kUnavailable: the device cannot be used here, saying why: this libmultiworld has no NCCL
  //   backend, the CUDA runtime or NCCL cannot be loaded (the loader's message: the file and
  //   dlerror's text), no driver or GPU, an ordinal past the GPUs this process sees; or the device
  //   is out of memory (cudaErrorMemoryAllocation).
  // - kBackendError: any other CUDA failure, with CUDA's error name and text.
  static Result<DeviceBuffer> allocate(Device device, size_t bytes);

  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : device_(other.device_),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Sets every byte to `byte` (cudaMemset, on the legacy default stream of the buffer's device:
  // an operation of an nccl world submitted afterwards from a thread without a CudaStreamScope is
  // ordered after it). The calling thread's current device is the same afterwards. OK at once for
  // a buffer that holds nothing; kBackendError with CUDA's error name and text otherwise.
  Status fill(uint8_t byte);

  // Copies `bytes` bytes of host memory at `src` into the buffer from byte `offset` on (cudaMemcpy,
  // on the legacy default stream of the buffer's device, like fill: an operation of an nccl world
  // submitted afterwards from a thread without a CudaStreamScope is ordered after it). `src` may
  // be reused once it returns; the calling thread's current device is the same afterwards.
  // kInvalidArgument when [offset, offset + bytes) is not inside the buffer; kBackendError with
  // CUDA's error name and text.
  Status write(size_t offset, const void* src, size_t bytes);
  // Copies `bytes` bytes of the buffer from byte `offset` on into host memory at `dst`, and returns
  // once they are there (cudaMemcpy, on the legacy default stream of the buffer's device). An nccl
  // world's operation on the buffer is seen in full once it has completed (Work::synchronize, or
  // a blocking send/recv); the calling thread's current device is the same afterwards. Errors as
  // write's.
  Status read(size_t offset, void* dst, size_t bytes) const;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  DeviceBuffer(Device device, void* data, size_t size)
      : device_(device), data_(data), size_(size) {}
  // Frees the memory (cudaFree on the buffer's device, the calling thread's current device
  // restored; a CUDA error is cleared, not reported) and leaves the buffer empty.
  void release() noexcept;

  Device device_ = Device::cpu();
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mw
