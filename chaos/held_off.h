// How long a waiting thread was held off the CPU: the part of a wait past its timeout. Used by the
// host agent and its client (agent/) for leases and answers, and by runProgram (process.h) for a
// command's limit.
//
// A lease or an answer's limit judges the other side's silence. Time this side could not run
// (its whole machine frozen, which this project's two-core test VM does for 5 to 30 s at a time
// under load, see docs/hosts.md "The lease"; the process stopped; a starved scheduler) is no
// silence of the other side: both sides were frozen alike, and its frames may be on their way.
// So each wait (a poll with a timeout) is measured, and what it overslept past its timeout, beyond
// a slack that ordinary scheduling delay stays under, is added back to the deadline, with a
// quarter of the whole bound at least left after it (the other side, frozen alike, needs a moment
// to speak again). The other side's real silence is still judged in full: only this side's own
// missing time is excused.
#pragma once

#include <chrono>
#include <cstdint>

namespace mw::chaos {

// Oversleeping less than this is ordinary scheduling delay, and counts as waiting.
inline constexpr std::chrono::milliseconds kHeldOffSlack{250};

// Longest single wait of a loop that measures itself: a frozen stretch is told from a long quiet
// one only when each wait is this short or shorter.
inline constexpr std::chrono::milliseconds kLongestWait{1000};

// The time a wait that began at `start` with timeout `timeout` overslept past it, when more than
// kHeldOffSlack; zero otherwise (it ended in time, or early on an event).
inline std::chrono::steady_clock::duration heldOff(std::chrono::steady_clock::time_point start,
                                                   std::chrono::steady_clock::duration timeout) {
  const auto over = std::chrono::steady_clock::now() - start - timeout;
  return over > kHeldOffSlack ? over : std::chrono::steady_clock::duration::zero();
}

// The steady clock (CLOCK_MONOTONIC) now, in nanoseconds: the agent protocol's times (t_ns).
inline int64_t monoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace mw::chaos
