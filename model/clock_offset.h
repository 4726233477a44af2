// A host's clock offset from the controller's, estimated from round trips (docs/hosts.md,
// "Clocks"): the controller notes its steady clock before it asks (t0) and when the answer comes
// (t1); the agent answers with its own steady clock (ta). With the answer taken at the middle of
// the round trip, offset = ta - (t0 + t1) / 2, wrong by at most half the round trip. The sample
// with the smallest round trip bounds it best, so it is the estimate, and half its round trip is
// the uncertainty.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace mw::agent {

struct ClockSample {
  int64_t t0_ns = 0;  // controller, before asking
  int64_t ta_ns = 0;  // agent, when answering
  int64_t t1_ns = 0;  // controller, when the answer came
};

struct ClockOffset {
  int64_t offset_ns = 0;       // agent clock - controller clock
  int64_t uncertainty_ns = 0;  // |true offset - offset_ns| is at most this
  int64_t rtt_ns = 0;          // the best sample's round trip
  int samples = 0;             // the samples it was made from (0: no estimate)
};

// The estimate from `samples` (those with t1 < t0 are ignored); samples == 0 when none is usable.
ClockOffset estimateOffset(const std::vector<ClockSample>& samples);

// A time on the agent's clock on the controller's.
inline int64_t toController(int64_t agent_ns, const ClockOffset& o) {
  return agent_ns - o.offset_ns;
}

}  // namespace mw::agent
