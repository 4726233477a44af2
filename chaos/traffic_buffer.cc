#include "chaos/traffic_buffer.h"

#include <string>
#include <utility>

namespace mw::chaos {

Result<TrafficBuffer> TrafficBuffer::make(size_t bytes, Device device) {
  TrafficBuffer b;
  if (device.kind == Device::Kind::kCpu) {
    b.host_.assign(bytes, 1);
    return b;
  }
  const std::string what = " (a tensor of " + std::to_string(bytes) + " bytes)";
  auto buf = DeviceBuffer::allocate(device, bytes);
  if (!buf.ok()) return Status(buf.status().code(), buf.status().message() + what);
  b.device_ = std::move(buf).value();
  if (Status s = b.device_.fill(1); !s.ok()) return Status(s.code(), s.message() + what);
  return b;
}

}  // namespace mw::chaos
