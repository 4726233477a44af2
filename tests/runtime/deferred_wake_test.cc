// DeferredWake: the executor's wake-up (now, at a time, cancelled). Upper time bounds here are
// generous (they only keep a broken wake-up from hanging the test); the lower ones are the
// contract: a wake-up set for a time never comes before it.
#include "base/deferred_wake.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

using namespace std::chrono_literals;
using mw::Clock;
using mw::detail::DeferredWake;

namespace {

// Runs wake.wait() on another thread; the future is ready when it returned.
std::future<Clock::time_point> waitAsync(DeferredWake& wake) {
  return std::async(std::launch::async, [&wake] {
    wake.wait();
    return Clock::now();
  });
}

}  // namespace

TEST_CASE("a wake-up from now() ends a wait, also one that starts after it", "[runtime]") {
  DeferredWake wake;
  wake.now();
  auto before = waitAsync(wake);  // the wake-up was pending: returns at once
  REQUIRE(before.wait_for(5s) == std::future_status::ready);

  auto waiting = waitAsync(wake);
  REQUIRE(waiting.wait_for(50ms) == std::future_status::timeout);  // consumed by the first wait
  wake.now();
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
}

TEST_CASE("a wake-up set with at() comes at that time, not before", "[runtime]") {
  DeferredWake wake;
  const auto when = Clock::now() + 60ms;
  wake.at(when);
  auto waiting = waitAsync(wake);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get() >= when);
}

TEST_CASE("at() keeps the earlier of two times", "[runtime]") {
  DeferredWake wake;
  const auto early = Clock::now() + 40ms;
  wake.at(early);
  wake.at(early + 10s);  // later: ignored, the early one stays
  auto waiting = waitAsync(wake);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get() >= early);

  const auto late = Clock::now() + 10s;
  wake.at(late);
  const auto sooner = Clock::now() + 40ms;
  wake.at(sooner);  // earlier: replaces the late one
  auto again = waitAsync(wake);
  REQUIRE(again.wait_for(5s) == std::future_status::ready);
  CHECK(again.get() >= sooner);
}

TEST_CASE("cancel() drops a time that has not come, and keeps a wake-up from now()", "[runtime]") {
  DeferredWake wake;
  wake.at(Clock::now() + 30ms);
  wake.cancel();
  auto waiting = waitAsync(wake);
  // Well past the cancelled time, the wait goes on.
  REQUIRE(waiting.wait_for(200ms) == std::future_status::timeout);
  wake.now();
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);

  wake.now();
  wake.cancel();  // only the timer is cancelled
  auto pending = waitAsync(wake);
  REQUIRE(pending.wait_for(5s) == std::future_status::ready);
}

TEST_CASE("a time already passed wakes at once, and a cancelled timer can be set again",
          "[runtime]") {
  DeferredWake wake;
  wake.at(Clock::now() - 1s);
  auto past = waitAsync(wake);
  REQUIRE(past.wait_for(5s) == std::future_status::ready);

  wake.at(Clock::now() + 10s);
  wake.cancel();
  const auto when = Clock::now() + 30ms;
  wake.at(when);
  auto waiting = waitAsync(wake);
  REQUIRE(waiting.wait_for(5s) == std::future_status::ready);
  CHECK(waiting.get() >= when);
}
