// Throughput verdicts (model/throughput.h) on run records made by hand: pass, fail and
// inconclusive, and which evidence decides each.
#include "model/throughput.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "model/expectations.h"
#include "tests/harness/scenario_text.h"

namespace mw::harness {
namespace {

// w1 between the leader (rank 0) and a; w2 between the leader and c, whose kill at 3 s is the
// fault. w1 must keep `bar` of its throughput.
LoadedScenario scenario(double bar) {
  return testing::loadText(R"(scenario {
  name = "t", duration = "6s", warmup = "1s",
  worlds = { w1 = {}, w2 = {} },
  roles = { leader = { worlds = { w1 = 0, w2 = 0 } }, a = { worlds = { w1 = 1 } },
            c = { worlds = { w2 = 1 } } },
  traffic = { ring_allreduce { worlds = { "w1", "w2" }, bytes = "1MiB", rate = 50 } },
  timeline = { at("3s", kill("c")) },
  expect = { broken = { "w2" }, throughput = { throughput_kept { world = "w1", ratio = )" +
                           std::to_string(bar) + R"( } } },
})");
}

struct Shape {
  std::function<double(double t, int i)> bytes;  // bytes of the 100 ms window ending at t
  // CPU share of the survivors (leader, a) and the machine's load from outside the scenario
  // (CPUs), before and after the fault.
  double share_before = 0.95, share_after = 0.95, outside_before = 0, outside_after = 0;
};

RunRecord record(const Shape& shape) {
  RunRecord r;
  r.duration = 6;
  r.elapsed = 6.001;
  r.machine_cpus = 2;
  r.faults.push_back(testing::killFault("c", 3.0, {"w2"}));
  double busy = 0;
  for (int i = 1; i <= 60; ++i) {
    const double t = i * 0.1;
    const bool after = t > 3.0;
    WindowRec w;
    w.t = t;
    w.generation = 1;
    w.bytes = shape.bytes(t, i);
    w.ops = 5;
    r.windows["w1"]["leader"].push_back(w);
    r.windows["w1"]["a"].push_back(w);
    const double share = after ? shape.share_after : shape.share_before;
    double scenario_cpu = 0;
    for (const char* role : {"leader", "a"}) {
      const double cpu = 0.05;
      r.cpu[role].push_back({t, cpu, cpu * (1 - share) / share});
      scenario_cpu += cpu;
    }
    if (!after) r.cpu["c"].push_back({t, 0.01, 0}), scenario_cpu += 0.01;
    busy += scenario_cpu + 0.1 * (after ? shape.outside_after : shape.outside_before);
    r.machine.push_back({t, busy});
  }
  return r;
}

const Verdict& throughputVerdict(const std::vector<Verdict>& all) {
  auto it = std::find_if(all.begin(), all.end(),
                         [](const Verdict& v) { return v.name.find("throughput") != v.name.npos; });
  REQUIRE(it != all.end());
  return *it;
}

constexpr double kRate = 1e7;  // bytes per window before the fault

// A small deterministic wiggle (about 3%), as paced traffic shows.
double wiggle(int i) { return 1 + 0.03 * std::sin(i * 1.7); }

TEST_CASE("a survivor that keeps its throughput passes", "[harness][throughput]") {
  auto l = scenario(0.9);
  auto r = record({[](double, int i) { return kRate * wiggle(i); }});
  auto all = evaluate(l.scenario, r);
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kPass);
  CHECK(v.evidence.at("ratio") == Approx(1).margin(0.03));
  CHECK(v.evidence.at("ratio_lo") <= v.evidence.at("ratio"));
  CHECK(v.evidence.at("ratio_hi") >= v.evidence.at("ratio"));
  CHECK(v.evidence.at("control") == Approx(1).margin(0.05));
  CHECK(v.evidence.at("cpu_share_before") == Approx(0.95));
  CHECK(overall({v}) == VerdictStatus::kPass);
}

TEST_CASE("a survivor slowed to a third fails", "[harness][throughput]") {
  auto l = scenario(0.9);
  auto r = record({[](double t, int i) { return kRate * wiggle(i) / (t > 3 ? 3 : 1); }});
  auto all = evaluate(l.scenario, r);
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kFail);
  CHECK(v.evidence.at("ratio_hi") < 0.9);
  CHECK(overall({v}) == VerdictStatus::kFail);
}

TEST_CASE("a drop within the windows' spread is inconclusive", "[harness][throughput]") {
  // Windows that swing between 0.4 and 1.6 of the rate: a mean of 0.85 after the fault cannot be
  // told from 0.9.
  auto l = scenario(0.9);
  auto r = record({[](double t, int i) {
    const double swing = (i * 2654435761u >> 7) % 5 < 2 ? 0.4 : 1.4;  // no period
    return kRate * swing * (t > 3 ? 0.8 : 1);
  }});
  auto all = evaluate(l.scenario, r);
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kInconclusive);
  CHECK(v.message.find("vary too much") != std::string::npos);
  CHECK(overall({v}) == VerdictStatus::kInconclusive);
}

TEST_CASE("a drop is inconclusive when the control moved as much", "[harness][throughput]") {
  // The throughput halved without any fault (between 1 s and 2 s): the control is 0.5.
  auto l = scenario(0.9);
  auto r = record({[](double t, int i) { return kRate * wiggle(i) * (t > 2 ? 0.5 : 1); }});
  r.windows["w1"]["leader"].back().bytes = kRate * 0.3;  // keeps the after stretch below the bar
  for (auto& w : r.windows["w1"]["leader"]) {
    if (w.t > 3) w.bytes = kRate * 0.3 * wiggle(static_cast<int>(w.t * 10));
  }
  auto all = evaluate(l.scenario, r);
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kInconclusive);
  CHECK(v.message.find("control") != std::string::npos);
  CHECK(v.evidence.at("control") == Approx(0.5).margin(0.05));
}

TEST_CASE("a drop is inconclusive when the control rose past the bar's margin",
          "[harness][throughput]") {
  // Without any fault the throughput doubled (from 2 s): an inflated "before" stretch makes the
  // unchanged "after" look like a drop. Seen beside two CPU hogs as false failures.
  auto l = scenario(0.9);
  auto r = record({[](double t, int i) { return kRate * wiggle(i) * (t > 2 && t <= 3 ? 2 : 1); }});
  auto all = evaluate(l.scenario, r);
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.evidence.at("ratio_hi") < 0.9);
  CHECK(v.status == VerdictStatus::kInconclusive);
  CHECK(v.message.find("rose past 1.11") != std::string::npos);
}

TEST_CASE("a drop is inconclusive when the machine took the survivors' CPU",
          "[harness][throughput]") {
  auto l = scenario(0.9);
  Shape shape{[](double t, int i) { return kRate * wiggle(i) / (t > 3 ? 3 : 1); }};
  shape.share_after = 0.4;
  shape.outside_after = 1.5;
  auto all = evaluate(l.scenario, record(shape));
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kInconclusive);
  CHECK(v.message.find("machine took the CPU") != std::string::npos);
  CHECK(v.evidence.at("outside_cpus_after") == Approx(1.5).margin(0.1));
  CHECK(v.evidence.at("cpu_share_after") == Approx(0.4).margin(0.01));
}

TEST_CASE("a drop fails when the survivors lost CPU to the scenario itself",
          "[harness][throughput]") {
  // The survivors waited for a CPU, but nothing outside the scenario took it: the fault's own
  // processes did (a spinning sibling), which is the fault's doing.
  auto l = scenario(0.9);
  Shape shape{[](double t, int i) { return kRate * wiggle(i) / (t > 3 ? 3 : 1); }};
  shape.share_after = 0.4;
  auto all = evaluate(l.scenario, record(shape));
  const Verdict& v = throughputVerdict(all);
  INFO(v.message);
  CHECK(v.status == VerdictStatus::kFail);
}

TEST_CASE("the throughput verdict is the same when judged again", "[harness][throughput]") {
  auto l = scenario(0.9);
  auto r = record(
      {[](double t, int i) { return kRate * (i % 3 == 0 ? 0.5 : 1.2) * (t > 3 ? 0.9 : 1); }});
  auto a = evaluate(l.scenario, r);
  auto b = evaluate(l.scenario, r);
  CHECK(throughputVerdict(a).evidence == throughputVerdict(b).evidence);
  CHECK(throughputVerdict(a).status == throughputVerdict(b).status);
}

TEST_CASE("judgeThroughput without windows is inconclusive", "[harness][throughput]") {
  ThroughputEvidence e;
  e.lo = e.hi = std::nan("");
  CHECK(judgeThroughput(e, 0.9).status == VerdictStatus::kInconclusive);
}

TEST_CASE("overall: a failure outranks an inconclusive verdict", "[harness][throughput]") {
  std::vector<Verdict> v(2);
  v[0].status = VerdictStatus::kInconclusive;
  v[1].status = VerdictStatus::kPass;
  CHECK(overall(v) == VerdictStatus::kInconclusive);
  v[1].status = VerdictStatus::kFail;
  CHECK(overall(v) == VerdictStatus::kFail);
  v[1].status = VerdictStatus::kError;
  CHECK(overall(v) == VerdictStatus::kFail);
  v[0].status = VerdictStatus::kSkipped;
  v[1].status = VerdictStatus::kPass;
  CHECK(overall(v) == VerdictStatus::kPass);
}

}  // namespace
}  // namespace mw::harness
