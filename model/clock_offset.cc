#include "model/clock_offset.h"

namespace mw::agent {

ClockOffset estimateOffset(const std::vector<ClockSample>& samples) {
  ClockOffset best;
  for (const auto& s : samples) {
    const int64_t rtt = s.t1_ns - s.t0_ns;
    if (rtt < 0) continue;
    if (best.samples > 0 && rtt >= best.rtt_ns) {
      ++best.samples;
      continue;
    }
    const int samples_so_far = best.samples;
    // (t0 + t1) / 2 without overflow.
    const int64_t mid = s.t0_ns + rtt / 2;
    best.offset_ns = s.ta_ns - mid;
    best.rtt_ns = rtt;
    best.uncertainty_ns = (rtt + 1) / 2;
    best.samples = samples_so_far + 1;
  }
  return best;
}

}  // namespace mw::agent
