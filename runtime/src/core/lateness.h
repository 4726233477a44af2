// LatenessMeter: how long a judging thread was kept from running when it should have run.
//
// The watchdog and the store server judge a peer silent when they have heard nothing from it for
// its heartbeat timeout. On a starved machine (more runnable threads than cores, a VM's stolen
// time, a whole process stopped) the judge itself may not run for a while, and on waking finds
// every peer "silent" although the silence was its own. So each judge measures how far past its
// planned wake-up it woke, and peers' silence is counted only over time in which the judge ran on
// schedule: effective silence = (now - last heard) - (lateness accrued since then).
//
// Thread rules: one thread (the judge's own).
#pragma once

#include <algorithm>

#include "multiworld/status.h"

namespace mw::detail {

class LatenessMeter {
 public:
  // Wake-ups later than planned by no more than this are the scheduler's ordinary jitter.
  static constexpr Clock::duration kSlack = std::chrono::milliseconds(2);

  // The thread is about to sleep until `until` at the latest.
  void sleeping(Clock::time_point until) { planned_ = until; }
  // The thread runs again at `now`: what passed beyond the planned wake-up (and kSlack) is
  // lateness. A thread woken early by an event accrues none.
  void woke(Clock::time_point now) {
    if (planned_ != Clock::time_point::max() && now > planned_ + kSlack) total_ += now - planned_;
    planned_ = Clock::time_point::max();
  }
  // Lateness accrued since this meter was made.
  Clock::duration total() const { return total_; }

  // The time a peer confirmed silent must have been silent beyond its timeout, over time the judge
  // ran on schedule: a suspicion (silence past the timeout) holds this much longer before a world
  // breaks, long enough for a peer whose thread was merely delayed to be heard, short enough to
  // keep detection within timeout + 100 ms.
  static Clock::duration confirmation(Clock::duration timeout) {
    return std::min<Clock::duration>(timeout / 5, std::chrono::milliseconds(100));
  }

 private:
  Clock::time_point planned_ = Clock::time_point::max();
  Clock::duration total_{0};
};

}  // namespace mw::detail
