// Counts kept by the window they happened in: what the `metrics` and `app` lines of the telemetry
// protocol (multiworld/telemetry_lines.h) report, one line per window (100 ms by default), each
// stamped with the end of its window.
//
// Whoever writes those lines (the runtime's telemetry thread for a program role, mw_worker for the
// built-in traffic) is a thread that can wake late on a loaded machine: beside busy loops it was
// seen hundreds of milliseconds late. Counting each operation in the window it completed in, not
// in whatever window the writer is at when it wakes, keeps every window's own counts: a late
// writer writes the windows it missed one after another, each with what completed in it, instead
// of one burst window and then empty or missing ones (which the throughput verdicts would read as
// the traffic's own variance). It also takes the writer's wake-up jitter out of every count.
//
// Thread rules: start() before any other call, and again only while no other thread uses the
// ring (the runtime restarts the ring of a program's metrics under the lock its callers take).
// add() from any thread; takeThrough() from one thread at a time (the writer).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "multiworld/status.h"

namespace mw {

// A ring of the most recent windows of `Counts`, which must be default-constructible (the empty
// window) and have `operator+=` (the sum of two windows).
template <class Counts>
class WindowRing {
 public:
  static constexpr int64_t kRing = 256;  // windows held: 25.6 s at 100 ms

  // The windows from here on: window k covers (origin + k * width, origin + (k + 1) * width]; an
  // instant on a boundary belongs to the window it ends. width > 0.
  void start(Clock::time_point origin, Clock::duration width) {
    std::lock_guard lock(mu_);
    origin_ = origin;
    width_ = width;
    next_ = 0;
    ring_.fill(Counts{});
  }

  // Calls fn(Counts&) on the window that `at` falls in, under the ring's lock. A time in a window
  // already taken, or before the origin, counts in the oldest window not yet taken; one more than
  // kRing windows ahead of it counts in the newest window the ring holds (the writer is that late:
  // the counts stay, in a later line). Nothing is ever dropped.
  template <class Fn>
  void add(Clock::time_point at, Fn&& fn) {
    std::lock_guard lock(mu_);
    const int64_t k = std::clamp(indexOf(at), next_, next_ + kRing - 1);
    fn(ring_[slot(k)]);
  }

  // The sum of every window not yet taken that ends at or before `end` (none: an empty Counts),
  // and forgets them. A writer that calls it once per window, with that window's end, gets each
  // window's own counts; one whose window ends are not this ring's (a writer that took over from
  // another) gets each count at most one window late.
  Counts takeThrough(Clock::time_point end) {
    std::lock_guard lock(mu_);
    Counts sum{};
    const auto since = (end - origin_).count();
    const auto w = width_.count();
    const int64_t last = since < w ? -1 : since / w - 1;  // the last window ending by `end`
    // Windows more than the ring behind hold nothing of their own: each slot is read once.
    const int64_t first = std::max(next_, last - kRing + 1);
    for (int64_t k = first; k <= last; ++k) sum += std::exchange(ring_[slot(k)], Counts{});
    next_ = std::max(next_, last + 1);
    return sum;
  }

 private:
  static size_t slot(int64_t k) { return static_cast<size_t>(k % kRing); }
  int64_t indexOf(Clock::time_point t) const {  // may be < 0
    const auto since = (t - origin_).count();
    if (since <= 0) return -1;
    return (since - 1) / width_.count();
  }

  std::mutex mu_;
  Clock::time_point origin_{};
  Clock::duration width_{std::chrono::milliseconds(100)};
  int64_t next_ = 0;                  // the oldest window not yet taken; guarded by mu_
  std::array<Counts, kRing> ring_{};  // window k at k % kRing; guarded by mu_
};

// What completed in one window of a world: the `metrics` line's numbers.
struct WindowCounts {
  int64_t bytes = 0, ops = 0, lat_sum_ns = 0, lat_max_ns = 0;

  WindowCounts& operator+=(const WindowCounts& o) {
    bytes += o.bytes;
    ops += o.ops;
    lat_sum_ns += o.lat_sum_ns;
    lat_max_ns = std::max(lat_max_ns, o.lat_max_ns);
    return *this;
  }
};

// One world's operations, by the window each completed in.
class TrafficWindows {
 public:
  void start(Clock::time_point origin, Clock::duration width) { ring_.start(origin, width); }
  // Counts one operation that moved `bytes` and took `lat_ns`, completed at `done`.
  void add(Clock::time_point done, int64_t bytes, int64_t lat_ns) {
    ring_.add(done, [&](WindowCounts& c) {
      c.bytes += bytes;
      ++c.ops;
      c.lat_sum_ns += lat_ns;
      c.lat_max_ns = std::max(c.lat_max_ns, lat_ns);
    });
  }
  // WindowRing::takeThrough.
  WindowCounts takeThrough(Clock::time_point end) { return ring_.takeThrough(end); }

 private:
  WindowRing<WindowCounts> ring_;
};

// A program's own metrics (multiworld/telemetry.h) in one window: each name's sum.
struct MetricSums {
  std::map<std::string, double> sums;

  MetricSums& operator+=(const MetricSums& o) {
    for (const auto& [name, v] : o.sums) sums[name] += v;
    return *this;
  }
};

// A program's own checks (multiworld/telemetry.h, reportCheck) in one window: per name, how many
// passed and failed, and the first failure's detail.
struct CheckSums {
  struct Counts {
    int64_t passed = 0, failed = 0;
    std::string first_failure;
  };
  std::map<std::string, Counts> checks;

  CheckSums& operator+=(const CheckSums& o) {
    for (const auto& [name, c] : o.checks) {
      Counts& mine = checks[name];
      if (mine.failed == 0) mine.first_failure = c.first_failure;
      mine.passed += c.passed;
      mine.failed += c.failed;
    }
    return *this;
  }
};

}  // namespace mw
