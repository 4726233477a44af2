#include "chaos/traffic_nonce.h"

#include <array>

#include "chaos/traffic_content.h"

namespace mw::chaos {
namespace {

// The first 8 bytes of the message: "mwnonce1".
constexpr uint64_t kNonceMagic = 0x3165636e6f6e776dULL;

}  // namespace

uint64_t agreeNonce(Communicator& comm, const WorkerTraffic& t, int rank, Device device,
                    DeviceBuffer* scratch) {
  // magic, nonce, ~nonce: an operation of the data that met this one by mistake is not a nonce.
  std::array<uint64_t, 4> m{};
  static_assert(sizeof m == kNonceBytes);
  if (rank == 0) {
    const uint64_t n = drawNonce();
    m = {kNonceMagic, n, ~n, 0};
  }
  const size_t bytes = sizeof m;
  DeviceBuffer* dev = device.kind == Device::Kind::kCpu ? nullptr : scratch;
  if (device.kind != Device::Kind::kCpu) {
    if (dev == nullptr || dev->size() < bytes || !(dev->device() == device)) return 0;
    if (!dev->write(0, m.data(), bytes).ok()) return 0;
  }
  void* data = dev == nullptr ? static_cast<void*>(m.data()) : dev->data();
  Tensor tensor{data, DType::kInt64, m.size(), device};
  Status s;
  if (t.pattern == TrafficPattern::kPipeline) {
    s = rank == 0 ? comm.send(t.world, tensor, 1) : comm.recv(t.world, tensor, 0);
  } else {
    s = comm.broadcast(t.world, tensor, 0).synchronize();
  }
  if (s.ok() && dev != nullptr) s = dev->read(0, m.data(), bytes);
  if (!s.ok() || m[0] != kNonceMagic || m[2] != ~m[1]) return 0;
  return m[1];
}

}  // namespace mw::chaos
