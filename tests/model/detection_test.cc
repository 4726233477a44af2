// The detection checker (model/checkers/checkers.h): from the fault to the last survivor's break.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("detection measures the last surviving member and leaves out the killed one",
          "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.expect.has_broken = true;
  s.expect.broken = {"w2"};
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "a2", 2.0, {"w2"}));
  r.events.push_back(event(EventKind::kBroken, 2.048, "leader", "w2"));
  auto v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].name == "world w2 is detected broken within 100 ms");
  CHECK(v[0].threshold == "<= 100 ms");
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "48 ms");
  CHECK(v[0].message ==
        "'kill a2' at 2.000 s; the last survivor to detect it was leader after 48 ms");
  s.expect.detected_within_world["w2"] = Ms(40);  // a world's own bound wins
  v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
}

TEST_CASE("detection within a host's clock uncertainty of its bound is inconclusive",
          "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.roles["leader"].host = "h1";
  s.expect.detected_within = Ms(50);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "a2", 2.0, {"w2"}));
  r.events.push_back(event(EventKind::kBroken, 2.048, "leader", "w2"));
  // The leader's host shares the controller's clock: 48 ms is a pass.
  r.hosts.push_back({"h1", "ssh", "node1", true, 0, 0.4, 0.8});
  auto v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  // Its clock is placed to within 3 ms: 2 ms from the bound tells nothing either way.
  r.hosts[0].same_clock = false;
  r.hosts[0].uncertainty_ms = 3;
  v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kInconclusive);
  CHECK(v[0].message ==
        "'kill a2' at 2.000 s; the last survivor to detect it was leader after 48 ms; that is "
        "2.0 ms from the bound, within the 3.0 ms uncertainty of host h1's clock: neither a pass "
        "nor a failure can be told");
  // Nor does 52 ms fail.
  r.events[0].t = 2.052;
  v = checks::detection(s, r);
  CHECK(v[0].status == VerdictStatus::kInconclusive);
  // Clear of the uncertainty, the verdict stands.
  r.hosts[0].uncertainty_ms = 1;
  v = checks::detection(s, r);
  CHECK(v[0].status == VerdictStatus::kFail);
}

TEST_CASE("detection counts from when the kernel closed a killed process's sockets, when late",
          "[model][checkers]") {
  Scenario s = leaderAnd(1);
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  FaultRec kill = fault(FaultKind::kKill, "a1", 2.0, {"w1"});
  kill.gone = 2.5;
  r.faults.push_back(kill);
  r.events.push_back(event(EventKind::kBroken, 2.530, "leader", "w1"));
  const auto v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "30 ms");
  CHECK_THAT(v[0].message, Catch::Contains("sockets 500 ms later"));
}

TEST_CASE("detection after scancel_step counts from scancel, Slurm's path included",
          "[model][checkers]") {
  Scenario s = leaderAnd(1);
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  // The step's agent was seen to go 500 ms after scancel: slurmctld and slurmd took that long,
  // which is the fault's own time, not the kernel's lateness.
  FaultRec cancel = fault(FaultKind::kScancelStep, "a1", 2.0, {"w1"});
  cancel.gone = 2.5;
  r.faults.push_back(cancel);
  r.events.push_back(event(EventKind::kBroken, 2.530, "leader", "w1"));
  auto v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "530 ms");
  CHECK(v[0].message ==
        "'scancel_step a1' at 2.000 s; the last survivor to detect it was leader after 530 ms");
  // The member whose step ended is not a survivor: a break it reports is not counted.
  r.events.push_back(event(EventKind::kBroken, 2.010, "a1", "w1"));
  v = checks::detection(s, r);
  CHECK(v[0].measured == "530 ms");
}

TEST_CASE("detection fails a member that never saw the break and a break before any fault",
          "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kFailpoint, "a1", 2.0, {"w1"}));
  r.events.push_back(event(EventKind::kBroken, 2.010, "leader", "w1"));
  r.events.push_back(event(EventKind::kBroken, 1.0, "leader", "w2"));
  const auto v = checks::detection(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].message == "after 'failpoint a1' at 2.000 s, a1 never reported world w1 broken");
  CHECK(v[1].status == VerdictStatus::kFail);
  CHECK(v[1].message == "world w2 broke at 1.000 s before any fault that touches it");
}

TEST_CASE("detection skips a world none of whose members survived", "[model][checkers]") {
  Scenario s = leaderAnd(1);
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "leader", 2.0, {"w1"}));
  r.faults.push_back(fault(FaultKind::kKill, "a1", 2.0, {"w1"}));
  r.events.push_back(event(EventKind::kBroken, 2.01, "a1", "w1"));
  const auto v = checks::detection(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kSkipped);
}

}  // namespace
}  // namespace mw::harness::testing
