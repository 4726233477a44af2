// The CPU meter behind the worker's `cpu` lines (chaos/cpu_meter.h).
#include "chaos/cpu_meter.h"

#include <time.h>

#include <catch2/catch.hpp>
#include <cstdint>

namespace mw::chaos {
namespace {

int64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

TEST_CASE("CpuMeter counts the CPU a busy thread used", "[harness][cpu]") {
  CpuMeter meter;
  // Busy until this thread has run 50 ms on a CPU, however long the machine makes that take: the
  // kernel's own count of it is what the meter reads (schedstat's time on a CPU), so a loaded
  // machine cannot make the meter see less.
  const int64_t start = threadCpuNs();
  volatile unsigned long x = 0;
  while (threadCpuNs() - start < 50000000) x = x + 1;
  auto d = meter.sample();
  REQUIRE(d.available);
  CHECK(d.cpu_ns >= 49000000);  // 50 ms less the clock reads' rounding
  CHECK(d.wait_ns >= 0);
  CHECK(machineBusySeconds() > 0);
}

}  // namespace
}  // namespace mw::chaos
