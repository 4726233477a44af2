// The worker's traffic windows (chaos/traffic_window.h): each operation counts in the window it
// completed in, however late the reporter takes the windows, and nothing is lost or counted twice.
#include "chaos/traffic_window.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace mw::chaos {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a late reporter gets each window's own operations, not a burst and then zeros",
          "[traffic_window]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  // Five operations in each of windows 0..3, completed at 20 ms steps, all added before any take:
  // a reporter that slept through 400 ms.
  for (int i = 1; i <= 20; ++i) w.add(t0 + i * 20ms, 1000, 1'000'000 * i);
  for (int k = 0; k < 4; ++k) {
    const WindowCounts c = w.take();
    INFO("window " << k);
    CHECK(c.ops == 5);
    CHECK(c.bytes == 5000);
    CHECK(c.lat_max_ns == 1'000'000LL * (5 * k + 5));
  }
  CHECK(w.take().ops == 0);  // window 4: nothing completed in it
}

TEST_CASE("a window's end belongs to it, and what came before the origin or after a take is kept",
          "[traffic_window]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  w.add(t0 + 100ms, 1, 1);        // the end of window 0
  w.add(t0 + 100ms + 1ns, 2, 1);  // the start of window 1
  w.add(t0 - 5ms, 4, 1);          // before the origin: the oldest window not yet taken
  CHECK(w.take().bytes == 1 + 4);
  w.add(t0 + 50ms, 8, 1);  // completed in window 0, counted after it was taken: window 1
  CHECK(w.take().bytes == 2 + 8);
}

TEST_CASE("a reporter later than the ring loses nothing", "[traffic_window]") {
  TrafficWindows w;
  const Clock::time_point t0 = Clock::now();
  w.start(t0, 100ms);
  const int64_t far = TrafficWindows::kRing + 10;
  w.add(t0 + far * 100ms + 50ms, 16, 1);  // beyond the ring: its newest window
  long long total = 0;
  for (int64_t k = 0; k < TrafficWindows::kRing; ++k) total += w.take().bytes;
  CHECK(total == 16);
}

TEST_CASE("operations added from several threads while windows are taken are each counted once",
          "[traffic_window]") {
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
  long long taken = 0;
  for (int k = 0; k < 50; ++k) {
    taken += w.take().ops;
    std::this_thread::sleep_for(100us);
  }
  adders.clear();  // joined
  for (int64_t k = 0; k < TrafficWindows::kRing; ++k) taken += w.take().ops;
  CHECK(taken == kThreads * kEach);
}

}  // namespace
}  // namespace mw::chaos
