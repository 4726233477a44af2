// The windows of the telemetry's metrics and app lines (multiworld/traffic_windows.h): each count
// is kept in the window it happened in, however late the writer takes the windows, and nothing is
// lost or counted twice. The runtime's telemetry thread and mw_worker both write through them.
#include "multiworld/traffic_windows.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace mw {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a late writer gets each window's own operations, not a burst and then zeros",
          "[traffic_windows]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  // Five operations in each of windows 0..3, completed at 20 ms steps, all added before any take:
  // a writer that slept through 400 ms.
  for (int i = 1; i <= 20; ++i) w.add(t0 + i * 20ms, 1000, 1'000'000 * i);
  for (int k = 0; k < 4; ++k) {
    const WindowCounts c = w.takeThrough(t0 + (k + 1) * 100ms);
    INFO("window " << k);
    CHECK(c.ops == 5);
    CHECK(c.bytes == 5000);
    CHECK(c.lat_sum_ns == 1'000'000LL * (25 * k + 15));
    CHECK(c.lat_max_ns == 1'000'000LL * (5 * k + 5));
  }
  CHECK(w.takeThrough(t0 + 500ms).ops == 0);  // window 4: nothing completed in it
}

TEST_CASE("a window's end belongs to it, and what came before the origin or after a take is kept",
          "[traffic_windows]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  w.add(t0 + 100ms, 1, 1);                     // the end of window 0
  w.add(t0 + 100ms + 1ns, 2, 1);               // the start of window 1
  w.add(t0 - 5ms, 4, 1);                       // before the origin: the oldest window not yet taken
  CHECK(w.takeThrough(t0 + 99ms).bytes == 0);  // window 0 has not ended: nothing is taken
  CHECK(w.takeThrough(t0 + 100ms).bytes == 1 + 4);
  CHECK(w.takeThrough(t0 + 100ms).bytes == 0);  // taken once
  w.add(t0 + 50ms, 8, 1);  // completed in window 0, counted after it was taken: window 1
  CHECK(w.takeThrough(t0 + 200ms).bytes == 2 + 8);
}

TEST_CASE("a writer whose window ends are not the ring's takes every count at most one window late",
          "[traffic_windows]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  for (int i = 1; i <= 10; ++i) w.add(t0 + i * 30ms, 1, 1);  // 30, 60, ..., 300 ms
  // Ends at 150 and 250 ms: the first takes window 0 (3 ops by 100 ms), the second window 1
  // (ops at 120, 150, 180), the last what remains by 350 ms (windows 2 and 3).
  CHECK(w.takeThrough(t0 + 150ms).ops == 3);
  CHECK(w.takeThrough(t0 + 250ms).ops == 3);
  CHECK(w.takeThrough(t0 + 350ms).ops == 4);
}

TEST_CASE("a writer later than the ring loses nothing", "[traffic_windows]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  const int64_t far = WindowRing<WindowCounts>::kRing + 10;
  w.add(t0 + 30ms, 32, 1);
  w.add(t0 + far * 100ms + 50ms, 16, 1);  // beyond the ring: its newest window
  // Taken window by window, the late one counts in the ring's last window (255).
  int64_t total = 0;
  for (int64_t k = 0; k < WindowRing<WindowCounts>::kRing; ++k) {
    const WindowCounts c = w.takeThrough(t0 + (k + 1) * 100ms);
    if (k == 0) CHECK(c.bytes == 32);
    if (k == WindowRing<WindowCounts>::kRing - 1) CHECK(c.bytes == 16);
    total += c.bytes;
  }
  CHECK(total == 48);

  // Taken at once, 1000 windows after the origin: every slot once, nothing twice.
  TrafficWindows late;
  late.start(t0, 100ms);
  for (int i = 0; i < 300; ++i) late.add(t0 + i * 100ms + 50ms, 1, 1);
  CHECK(late.takeThrough(t0 + 1000 * 100ms).ops == 300);
  CHECK(late.takeThrough(t0 + 1001 * 100ms).ops == 0);
}

TEST_CASE("operations added from several threads while windows are taken are each counted once",
          "[traffic_windows]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 1ms);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::jthread> adders;
  for (int i = 0; i < kThreads; ++i) {
    adders.emplace_back([&] {
      for (int j = 0; j < kEach; ++j) w.add(Clock::now(), 1, 1);
    });
  }
  int64_t taken = 0;
  for (int k = 0; k < 50; ++k) {
    taken += w.takeThrough(Clock::now()).ops;
    std::this_thread::sleep_for(100us);
  }
  adders.clear();  // joined
  taken += w.takeThrough(Clock::now() + 1h).ops;
  CHECK(taken == kThreads * kEach);
}

TEST_CASE("a program's metrics are summed per name in the window they were reported in",
          "[traffic_windows]") {
  WindowRing<MetricSums> r;
  const Clock::time_point t0 = Clock::now();
  r.start(t0, 100ms);
  r.add(t0 + 10ms, [](MetricSums& m) { m.sums["served"] += 1; });
  r.add(t0 + 20ms, [](MetricSums& m) { m.sums["served"] += 2.5; });
  r.add(t0 + 150ms, [](MetricSums& m) { m.sums["served"] += 4; });
  r.add(t0 + 160ms, [](MetricSums& m) { m.sums["failed"] += 1; });
  const MetricSums w0 = r.takeThrough(t0 + 100ms);
  CHECK(w0.sums.size() == 1);
  CHECK(w0.sums.at("served") == 3.5);
  const MetricSums w1 = r.takeThrough(t0 + 200ms);
  CHECK(w1.sums.at("served") == 4);
  CHECK(w1.sums.at("failed") == 1);
  CHECK(r.takeThrough(t0 + 300ms).sums.empty());
}

}  // namespace
}  // namespace mw
