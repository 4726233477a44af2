// The faults-delivered and harness-ran checkers (model/checkers/checkers.h).
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("faultsDelivered: an error and a skip per fault not delivered, none for the others",
          "[model][checkers]") {
  Scenario s = leaderAnd(1);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "a1", 1.0, {"w1"}));
  FaultRec err = fault(FaultKind::kFailpoint, "a1", 1.5, {"w1"});
  err.outcome = FaultOutcome::kError;
  err.why = "the fifo is gone";
  r.faults.push_back(err);
  FaultRec skip = fault(FaultKind::kPartition, "", 2.0, {"w1"});
  skip.outcome = FaultOutcome::kSkipped;
  skip.why = "no root";
  r.faults.push_back(skip);
  const auto v = checks::faultsDelivered(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kError);
  CHECK(v[0].name == "fault delivered: failpoint a1");
  CHECK(v[0].message == "at 1.50 s: error: the fifo is gone");
  CHECK(v[0].where == "t.lua:5");
  CHECK(v[1].status == VerdictStatus::kSkipped);
  CHECK(v[1].message == "skipped: no root");
}

TEST_CASE("harnessRan: one error per harness error and one for a record that goes back in time",
          "[model][checkers]") {
  Scenario s = leaderAnd(1);
  RunRecord r = emptyRun();
  CHECK(checks::harnessRan(s, r).empty());
  r.harness_errors = {"a worker's line was garbled"};
  windows(r, "w1", "leader", 9, 100, 100, 1.0);
  std::swap(r.windows["w1"]["leader"][2], r.windows["w1"]["leader"][3]);
  const auto v = checks::harnessRan(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kError);
  CHECK(v[0].message == "a worker's line was garbled");
  CHECK(v[0].where == "t.lua:1");
  CHECK(v[1].status == VerdictStatus::kError);
  CHECK_THAT(v[1].message, Catch::StartsWith("the record goes back in time: "));
}

}  // namespace
}  // namespace mw::harness::testing
