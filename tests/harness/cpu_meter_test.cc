// The CPU meter behind the worker's `cpu` lines (chaos/cpu_meter.h).
#include "chaos/cpu_meter.h"

#include <catch2/catch.hpp>
#include <chrono>

namespace mw::chaos {
namespace {

TEST_CASE("CpuMeter counts the CPU a busy thread used", "[harness][cpu]") {
  CpuMeter meter;
  volatile unsigned long x = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) x = x + 1;
  auto d = meter.sample();
  REQUIRE(d.available);
  CHECK(d.cpu_ns >= 20000000);  // most of the 50 ms (the machine may take some)
  CHECK(d.wait_ns >= 0);
  CHECK(machineBusySeconds() > 0);
}

}  // namespace
}  // namespace mw::chaos
