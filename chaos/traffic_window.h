// One world's traffic counts in mw_worker, kept by the window each operation completed in.
//
// The worker reports a metrics line per world per window (100 ms by default), each stamped with the
// end of its window. A reporter thread that wakes late (a loaded machine: seen for hundreds of ms
// beside busy loops) must still report each window's own operations. Counting by completion time
// does that: a late reporter writes the windows it missed one after another, each with what
// completed in it, instead of one window with everything since the last report and then empty ones
// (a burst and zeros that only the reporter's lateness made, which the throughput verdicts read as
// the traffic's own variance). It also takes the reporter's wake-up jitter out of every count.
//
// Thread rules: start() is called once, before any other call and before the threads that call
// add() and take() start. add() may be called from any thread; take() by one thread (the
// reporter), once per window, at or after the window's end.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "multiworld/status.h"

namespace mw::chaos {

// What completed in one window.
struct WindowCounts {
  long long bytes = 0, ops = 0, lat_sum_ns = 0, lat_max_ns = 0;
};

class TrafficWindows {
 public:
  // The windows from here on: window k covers (origin + k * width, origin + (k + 1) * width].
  // width > 0.
  void start(mw::Clock::time_point origin, mw::Clock::duration width);

  // Counts one operation that moved `bytes` and took `lat_ns`, completed at `done`, in the window
  // `done` falls in. An operation that completed in a window already taken, or before the origin,
  // counts in the oldest window not yet taken; one more than kRing windows ahead of it counts in
  // the newest window the ring holds (the reporter is that late: its counts stay, in a later line).
  void add(mw::Clock::time_point done, long long bytes, long long lat_ns);

  // The counts of the oldest window not yet taken (the first is window 0, ending at origin +
  // width), and forgets them: the next call takes the window after it.
  WindowCounts take();

  static constexpr int64_t kRing = 256;  // windows held: 25.6 s at 100 ms

 private:
  int64_t indexOf(mw::Clock::time_point t) const;  // may be < 0

  std::mutex mu_;
  mw::Clock::time_point origin_{};
  mw::Clock::duration width_{std::chrono::milliseconds(100)};
  int64_t next_ = 0;                        // the oldest window not yet taken; GUARDED_BY(mu_)
  std::array<WindowCounts, kRing> ring_{};  // window k at k % kRing; GUARDED_BY(mu_)
};

}  // namespace mw::chaos
