// The memory of one mw_worker traffic loop's tensor: host memory, or device memory for a cuda
// world (through the CUDA runtime the library loads, multiworld/gpu.h: the worker does not link
// it), filled with ones there.
//
// Thread rules: one owner; not shared.
#pragma once

#include <cstddef>
#include <vector>

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

  // The first byte, host or device.
  void* data() { return device_.data() != nullptr ? device_.data() : host_.data(); }

 private:
  TrafficBuffer() = default;
  std::vector<char> host_;
  DeviceBuffer device_;
};

}  // namespace mw::chaos
