// The throughput-kept checker (model/checkers/checkers.h): its verdict's name, numbers and status.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

Scenario keeping(double ratio) {
  Scenario s = leaderAnd(2);
  ThroughputSpec t;
  t.world = "w1";
  t.ratio = ratio;
  t.where = "t.lua:10";
  s.expect.throughput.push_back(t);
  return s;
}

TEST_CASE("throughputKept passes a survivor that kept its rate and fails one that lost it",
          "[model][checkers]") {
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "a2", 2.5, {"w2"}));
  windows(r, "w1", "leader", 2.5, 1e6, 1e6);
  auto v = checks::throughputKept(keeping(0.9), r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].name == "world w1 keeps >= 0.90 of its throughput (after the fault)");
  CHECK(v[0].threshold == ">= 0.90");
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "1.000");
  CHECK(v[0].evidence.at("ratio") == Approx(1.0));
  CHECK(v[0].evidence.at("before_bytes_per_s") == Approx(1e7));
  CHECK_THAT(v[0].message, Catch::StartsWith("before: 10.0 MB/s (median 10.0, 15 windows)"));

  RunRecord slow = emptyRun();
  slow.faults = r.faults;
  windows(slow, "w1", "leader", 2.5, 1e6, 0.25e6);
  v = checks::throughputKept(keeping(0.9), slow);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "0.250");
}

TEST_CASE("throughputKept is an error without a fault or without traffic before it",
          "[model][checkers]") {
  RunRecord r = emptyRun();
  windows(r, "w1", "leader", 2.5, 1e6, 1e6);
  auto v = checks::throughputKept(keeping(0.9), r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kError);
  CHECK(v[0].message == "no fault was delivered, so there is no before and after");

  RunRecord quiet = emptyRun();
  quiet.faults.push_back(fault(FaultKind::kKill, "a2", 2.5, {"w2"}));
  v = checks::throughputKept(keeping(0.9), quiet);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kError);
  CHECK(
      v[0].message ==
      "no traffic measured in world w1 between the warm-up (1.00 s) and the first fault (2.50 s)");
}

}  // namespace
}  // namespace mw::harness::testing
