// The worker's waits (chaos/worker_wake.h): each ends on its event, a stop among them, well before
// its deadline, and not before the event when there is none.
#include "chaos/worker_wake.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <functional>
#include <thread>

namespace mw::chaos {
namespace {

using namespace std::chrono_literals;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// Runs `what` on another thread after `after`; joined on destruction.
std::jthread later(Clock::duration after, std::function<void()> what) {
  return std::jthread([after, what = std::move(what)] {
    std::this_thread::sleep_for(after);
    what();
  });
}

TEST_CASE("sleepUntil ends at the stop, or at its deadline without one", "[harness]") {
  std::stop_source stop;
  auto t0 = Clock::now();
  {
    auto stopper = later(50ms, [&] { stop.request_stop(); });
    CHECK_FALSE(sleepUntil(stop.get_token(), deadlineIn(10s)));
  }
  CHECK(Clock::now() - t0 < 2s);
  CHECK(Clock::now() - t0 >= 50ms);
  CHECK_FALSE(sleepUntil(stop.get_token(), deadlineIn(10s)));  // stopped already: at once

  std::stop_source running;
  t0 = Clock::now();
  CHECK(sleepUntil(running.get_token(), deadlineIn(30ms)));
  CHECK(Clock::now() - t0 >= 30ms);
}

TEST_CASE("waitForStop returns once stopped", "[harness]") {
  std::stop_source stop;
  const auto t0 = Clock::now();
  {
    auto stopper = later(30ms, [&] { stop.request_stop(); });
    waitForStop(stop.get_token());
  }
  CHECK(Clock::now() - t0 >= 30ms);
  CHECK(Clock::now() - t0 < 2s);
  waitForStop(std::stop_token());  // a token that cannot be stopped: no wait
}

TEST_CASE("an EventFd is readable from signal() to take()", "[harness]") {
  auto e = EventFd::open();
  REQUIRE(e.ok());
  CHECK_FALSE(readable(e->fd()));
  e->signal();
  e->signal();
  CHECK(readable(e->fd()));
  e->take();
  CHECK_FALSE(readable(e->fd()));
  // Another thread's signal ends a poll that waits without a timeout.
  auto signaller = later(20ms, [&] { e->signal(); });
  pollfd p{e->fd(), POLLIN, 0};
  CHECK(::poll(&p, 1, 10000) == 1);
}

TEST_CASE("a SignalFd sees SIGTERM and SIGINT, which no longer reach a handler", "[harness]") {
  sigset_t before;
  REQUIRE(::pthread_sigmask(SIG_SETMASK, nullptr, &before) == 0);
  {
    auto s = SignalFd::open();
    REQUIRE(s.ok());
    CHECK_FALSE(readable(s->fd()));
    REQUIRE(::pthread_kill(::pthread_self(), SIGTERM) == 0);  // blocked: pending, not delivered
    CHECK(readable(s->fd()));
    s->take();
    CHECK_FALSE(readable(s->fd()));
    REQUIRE(::pthread_kill(::pthread_self(), SIGINT) == 0);
    CHECK(readable(s->fd()));
    s->take();
  }
  REQUIRE(::pthread_sigmask(SIG_SETMASK, &before, nullptr) == 0);
}

TEST_CASE("Countdown: waitUntil is true once the count reaches zero, false at its deadline",
          "[harness]") {
  Countdown two(2);
  two.countDown();
  const auto t0 = Clock::now();
  CHECK_FALSE(two.waitUntil(deadlineIn(30ms)));
  CHECK(Clock::now() - t0 >= 30ms);
  auto ender = later(20ms, [&] { two.countDown(); });
  CHECK(two.waitUntil(deadlineIn(10s)));
  CHECK(Countdown(0).waitUntil(deadlineIn(0ms)));
}

TEST_CASE("ChangeCount: waitPast ends at the next change or at the stop", "[harness]") {
  ChangeCount changes;
  const auto seen = changes.seen();
  {
    auto bumper = later(20ms, [&] { changes.bump(); });
    changes.waitPast(seen, std::stop_token());
  }
  CHECK(changes.seen() == seen + 1);
  changes.waitPast(seen, std::stop_token());  // past it already: at once

  std::stop_source stop;
  auto stopper = later(20ms, [&] { stop.request_stop(); });
  const auto t0 = Clock::now();
  changes.waitPast(changes.seen(), stop.get_token());
  CHECK(Clock::now() - t0 >= 20ms);
  CHECK(changes.seen() == seen + 1);
}

TEST_CASE("Pacer: slots at the rate, no catching up, and the stop ends a wait", "[harness]") {
  Pacer none(0);  // back to back
  std::stop_source stop;
  for (int i = 0; i < 1000; ++i) none.wait(stop.get_token());
  const auto t0 = Clock::now();
  Pacer paced(50);  // every 20 ms
  for (int i = 0; i < 5; ++i) paced.wait(stop.get_token());
  CHECK(Clock::now() - t0 >= 100ms);  // five slots after the first
  // Behind by far more than a period: the next slot is now, and the one after a period later.
  Pacer slow(4);  // every 250 ms
  std::this_thread::sleep_for(600ms);
  const auto t1 = Clock::now();
  slow.wait(stop.get_token());
  slow.wait(stop.get_token());
  CHECK(Clock::now() - t1 >= 250ms);  // not two slots at once
  // A stop ends the wait for a slot an hour away.
  Pacer hourly(1.0 / 3600);
  auto stopper = later(20ms, [&] { stop.request_stop(); });
  const auto t2 = Clock::now();
  hourly.wait(stop.get_token());
  CHECK(Clock::now() - t2 < 1h);
}

}  // namespace
}  // namespace mw::chaos
