// The memory of one mw_worker traffic loop's tensor: host memory, or device memory for a cuda
// world (through the CUDA runtime the library loads, multiworld/gpu.h: the worker does not link
// it), filled with ones there. A device tensor has a host mirror of the same size, where the data
// checks (chaos/traffic_check.h) write and read; toDevice and fromDevice copy parts of it.
//
// Thread rules: one owner; not shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "chaos/traffic_check.h"
#include "multiworld/gpu.h"
#include "multiworld/status.h"
#include "multiworld/world_manager.h"

namespace mw::chaos {

class TrafficBuffer {
 public:
  // `bytes` bytes on `device`. The status names the size when the device memory cannot be
  // allocated or filled ("... (a tensor of N bytes)").
  static Result<TrafficBuffer> make(size_t bytes, Device device);

  TrafficBuffer(TrafficBuffer&&) = default;
  TrafficBuffer& operator=(TrafficBuffer&&) = default;

  // The first byte, host or device: the tensor the operations use.
  void* data() { return device_.data() != nullptr ? device_.data() : host_.data(); }
  // A device tensor's kNonceBytes of device memory beside it, for agreeNonce (traffic_nonce.h);
  // null for a host tensor.
  DeviceBuffer* nonceScratch() { return onDevice() ? &nonce_ : nullptr; }
  // The first byte of host memory: the tensor itself, or its mirror for a device tensor.
  void* host() { return host_.data(); }
  bool onDevice() const { return device_.data() != nullptr; }
  // Sets every byte to `byte`, on the device too. kBackendError with CUDA's error otherwise.
  Status clear(uint8_t byte);
  // A device tensor: copies bytes [offset, offset + bytes) of the mirror to the device, or back.
  // A host tensor: nothing to do. Errors: DeviceBuffer::write's and read's.
  Status toDevice(size_t offset, size_t bytes);
  Status fromDevice(size_t offset, size_t bytes);
  // A device tensor of elements of `elem` bytes: points `check` at the mirror (TrafficCheck::
  // setMirror), copying what it reads from the device and what it writes to it; a copy that fails
  // calls `failed` with the error (the check then reads the mirror as it is). A host tensor:
  // nothing to do. The buffer must outlive `check`'s use of it and not move meanwhile.
  void mirror(TrafficCheck& check, size_t elem, std::function<void(const Status&)> failed);

 private:
  TrafficBuffer() = default;
  std::vector<char> host_;
  DeviceBuffer device_;
  DeviceBuffer nonce_;
};

}  // namespace mw::chaos
