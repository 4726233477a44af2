#include "chaos/traffic_buffer.h"

#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "chaos/traffic_nonce.h"

namespace mw::chaos {

Result<TrafficBuffer> TrafficBuffer::make(size_t bytes, Device device) {
  TrafficBuffer b;
  b.host_.assign(bytes, 1);
  if (device.kind == Device::Kind::kCpu) return b;
  const std::string what = " (a tensor of " + std::to_string(bytes) + " bytes)";
  auto buf = DeviceBuffer::allocate(device, bytes);
  if (!buf.ok()) return Status(buf.status().code(), buf.status().message() + what);
  b.device_ = std::move(buf).value();
  auto nonce = DeviceBuffer::allocate(device, kNonceBytes);
  if (!nonce.ok()) return Status(nonce.status().code(), nonce.status().message() + what);
  b.nonce_ = std::move(nonce).value();
  if (Status s = b.device_.fill(1); !s.ok()) return Status(s.code(), s.message() + what);
  return b;
}

Status TrafficBuffer::clear(uint8_t byte) {
  std::memset(host_.data(), byte, host_.size());
  return onDevice() ? device_.fill(byte) : Status::Ok();
}

Status TrafficBuffer::toDevice(size_t offset, size_t bytes) {
  if (!onDevice()) return Status::Ok();
  if (offset > host_.size()) return device_.write(offset, nullptr, bytes);  // names the range
  return device_.write(offset, host_.data() + offset, bytes);
}

Status TrafficBuffer::fromDevice(size_t offset, size_t bytes) {
  if (!onDevice()) return Status::Ok();
  if (offset > host_.size()) return device_.read(offset, nullptr, bytes);
  return device_.read(offset, host_.data() + offset, bytes);
}

void TrafficBuffer::mirror(TrafficCheck& check, size_t elem,
                           std::function<void(const Status&)> failed) {
  if (!onDevice()) return;
  using Range = TrafficCheck::Range;
  auto copy = [this, elem, failed](std::span<const Range> rs, bool to_device) {
    for (const Range& r : rs) {
      const size_t offset = r.begin * elem, bytes = (r.end - r.begin) * elem;
      const Status s = to_device ? toDevice(offset, bytes) : fromDevice(offset, bytes);
      if (!s.ok()) failed(s);
    }
  };
  check.setMirror({[copy](std::span<const Range> rs) { copy(rs, false); },
                   [copy](std::span<const Range> rs) { copy(rs, true); }});
}

}  // namespace mw::chaos
