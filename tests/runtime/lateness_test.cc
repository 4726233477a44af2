// LatenessMeter (base/lateness.h): the judge's own lost time, asleep and awake, with made-up
// instants so that every case is exact.
#include "base/lateness.h"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using mw::detail::LatenessMeter;

namespace {

const mw::Clock::time_point kT0 = mw::Clock::time_point{} + 1000s;

LatenessMeter::Instant at(std::chrono::milliseconds wall, std::chrono::milliseconds cpu) {
  return {kT0 + wall, cpu};
}

}  // namespace

TEST_CASE("a wake-up later than planned accrues the delay past the plan", "[runtime][lateness]") {
  LatenessMeter m;
  m.sleeping(at(0ms, 0ms), kT0 + 100ms);
  m.woke(at(101ms, 0ms));  // within the slack: jitter
  CHECK(m.total() == 0ms);
  m.sleeping(at(101ms, 0ms), kT0 + 200ms);
  m.woke(at(1200ms, 0ms));
  CHECK(m.total() == 1000ms);
  m.sleeping(at(1200ms, 0ms), kT0 + 2200ms);
  m.woke(at(1300ms, 0ms));  // woken early by an event
  CHECK(m.total() == 1000ms);
}

TEST_CASE("a judge stopped while running accrues the time it was off its CPU",
          "[runtime][lateness]") {
  // The fault test "a process stopped as a whole..." broke a world under ASan when the stop came
  // while the store's thread was mid-loop: only sleeps were measured then.
  LatenessMeter m;
  m.woke(at(0ms, 0ms));
  m.ran(at(1000ms, 1ms));  // stopped for the rest
  CHECK(m.total() == 999ms);
  m.sleeping(at(1500ms, 2ms), kT0 + 1600ms);  // and again before the sleep
  CHECK(m.total() == 999ms + 499ms);
  m.woke(at(1600ms, 2ms));
  CHECK(m.total() == 999ms + 499ms);
}

TEST_CASE("a judge kept busy counts silence at full rate", "[runtime][lateness]") {
  // Work is not lateness: a loop that ran on its CPU all along accrues nothing, however long.
  LatenessMeter m;
  m.woke(at(0ms, 0ms));
  m.ran(at(50ms, 49ms));
  m.ran(at(5050ms, 5048ms));
  m.sleeping(at(5051ms, 5049ms), kT0 + 6000ms);
  CHECK(m.total() == 0ms);
  // A first ran() with no stretch before it (the thread's first instant) accrues nothing.
  LatenessMeter fresh;
  fresh.ran(at(10ms, 0ms));
  CHECK(fresh.total() == 0ms);
}

TEST_CASE("Instant::now reads the thread's CPU time", "[runtime][lateness]") {
  const auto a = LatenessMeter::Instant::now();
  volatile unsigned long spin = 0;
  for (unsigned long i = 0; i < 20'000'000UL; ++i) spin = spin + i;
  const auto b = LatenessMeter::Instant::now();
  CHECK(b.cpu > a.cpu);
  CHECK(b.wall >= a.wall);
}

TEST_CASE("lateness counts against a silence only when it came after the last contact",
          "[runtime][lateness]") {
  // The fault test "a process stopped as a whole..." broke a world when the stop came between a
  // world's first contact (stamped by the joining thread) and the watchdog's first look at it:
  // the stop was then booked before the contact. since(t) places each stretch in time.
  LatenessMeter m;
  m.sleeping(at(0ms, 0ms), kT0 + 100ms);
  m.woke(at(1100ms, 0ms));  // stopped from 100 ms to 1100 ms
  CHECK(m.total() == 1000ms);
  CHECK(m.since(kT0 + 50ms) == 1000ms);  // heard before the stop, learned of after it
  CHECK(m.since(kT0 + 600ms) == 500ms);  // heard in the middle of it
  CHECK(m.since(kT0 + 1100ms) == 0ms);   // heard after it
  // Off the CPU while running: placed at the end of the stretch, the most it can discount.
  m.ran(at(2000ms, 400ms));  // 500 ms off the CPU between 1100 ms and 2000 ms
  CHECK(m.total() == 1500ms);
  CHECK(m.since(kT0 + 1500ms) == 500ms);
  CHECK(m.since(kT0 + 1800ms) == 200ms);
}

TEST_CASE("the meter remembers the last kHistory stretches exactly", "[runtime][lateness]") {
  LatenessMeter m;
  for (int i = 0; i < 100; ++i) {  // 100 sleeps of 50 ms that each end 10 ms late
    const auto base = std::chrono::milliseconds(60 * i);
    m.sleeping(at(base, 0ms), kT0 + base + 50ms);
    m.woke(at(base + 60ms, 0ms));
  }
  CHECK(m.total() == 1000ms);
  CHECK(m.since(kT0 + 5400ms) == 100ms);  // the last 10 stretches
  CHECK(m.since(kT0) == 10ms * static_cast<int>(LatenessMeter::kHistory));
}
