#include "chaos/traffic_window.h"

#include <algorithm>

namespace mw::chaos {

void TrafficWindows::start(mw::Clock::time_point origin, mw::Clock::duration width) {
  std::lock_guard lock(mu_);
  origin_ = origin;
  width_ = width;
  next_ = 0;
  ring_.fill({});
}

int64_t TrafficWindows::indexOf(mw::Clock::time_point t) const {
  // (origin + k * width, origin + (k + 1) * width] is window k: an end belongs to its window.
  const auto since = (t - origin_).count();
  const auto w = width_.count();
  if (since <= 0) return -1;
  return (since - 1) / w;
}

void TrafficWindows::add(mw::Clock::time_point done, long long bytes, long long lat_ns) {
  std::lock_guard lock(mu_);
  const int64_t k = std::clamp(indexOf(done), next_, next_ + kRing - 1);
  WindowCounts& c = ring_[static_cast<size_t>(k % kRing)];
  c.bytes += bytes;
  ++c.ops;
  c.lat_sum_ns += lat_ns;
  c.lat_max_ns = std::max(c.lat_max_ns, lat_ns);
}

WindowCounts TrafficWindows::take() {
  std::lock_guard lock(mu_);
  WindowCounts& c = ring_[static_cast<size_t>(next_ % kRing)];
  const WindowCounts out = c;
  c = {};
  ++next_;
  return out;
}

}  // namespace mw::chaos
