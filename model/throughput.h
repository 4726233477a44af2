// Throughput evidence: what a throughput_kept expectation is judged on. A survivor's throughput is
// compared between a stretch before the first fault and a stretch after it; on a shared machine
// those windows move by tens of percent without any fault, so the comparison comes with the
// evidence of how much it would move anyway (docs/scenarios.md, "How throughput is judged"):
//   - an interval: the ratio's 90% interval from a circular block bootstrap of the 100 ms windows
//     (blocks of 5 windows, 2000 resamples, seeded by the scenario's seed: re-evaluating a saved
//     report gives the same verdict);
//   - a control: the same comparison between the two halves of the fault-free stretch before the
//     fault (as mw_bench detection does);
//   - the CPU: the share of the CPU the survivors' processes asked for that they got (kernel
//     schedstat: run time / (run time + run-queue wait)), and the load on the machine from outside
//     the scenario (busy CPUs less what the scenario's processes used), in each stretch.
// The verdict is pass or fail only when this evidence separates them, else inconclusive.
#pragma once

#include <cstdint>
#include <string>

#include "model/run.h"
#include "model/scenario.h"
#include "model/verdict_status.h"

namespace mw::harness {

// Throughput of `world` measured at its rank-0 role, in bytes per second, over windows whose end
// lies in (from, to]. Returns {mean, median, min, max, windows}. With `role`, the series `world`
// (a world or appSeries(metric)) as that role reported it, per second.
struct Rate {
  double mean = 0, median = 0, min = 0, max = 0;
  int windows = 0;
};
Rate throughputBetween(const Scenario& s, const RunRecord& r, const std::string& world, double from,
                       double to, const std::string& role = "");

// CPU in one stretch of the run. Values are NaN when the run recorded no CPU data for it.
struct CpuStretch {
  double share = 0;    // of the CPU the survivors' processes wanted, the part they got (0..1)
  double outside = 0;  // CPUs kept busy by processes outside the scenario (harness included)
};

struct ThroughputEvidence {
  Rate before, after;
  double ratio = 0;       // after.mean / before.mean
  double lo = 0, hi = 0;  // the ratio's 90% interval
  double control = 0;     // the fault-free comparison (NaN: too few windows)
  double control_lo = 0, control_hi = 0;
  CpuStretch cpu_before, cpu_after;
};

// Measures `world` between `before` = (b0, b1] and `after` = (a0, a1] (seconds from the start).
// The survivors are the world's members whose process reported CPU windows after a0. With `role`,
// as throughputBetween; the survivors are that role.
ThroughputEvidence measureThroughput(const Scenario& s, const RunRecord& r,
                                     const std::string& world, double b0, double b1, double a0,
                                     double a1, const std::string& role = "");

// The three-way judgement of `e` against `bar` (>= bar passes):
//   pass          the ratio's whole interval is at or above the bar;
//   fail          its whole interval is below the bar, the control stayed within the bar's
//                 margin both ways (bar <= control <= 1/bar: this run's throughput held without a
//                 fault), and the survivors did not lose CPU to load from outside the scenario;
//   inconclusive  otherwise; `why` says which evidence was missing.
struct ThroughputJudgement {
  VerdictStatus status = VerdictStatus::kInconclusive;  // pass | fail | inconclusive
  std::string why;                                      // for inconclusive: the reason; else ""
};
ThroughputJudgement judgeThroughput(const ThroughputEvidence& e, double bar);

// The drop in CPU share and the rise of outside load that count as "starved by the machine".
inline constexpr double kShareDrop = 0.10;
inline constexpr double kOutsideRise = 0.20;  // CPUs

}  // namespace mw::harness
