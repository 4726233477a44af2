// The replacement checker (model/checkers/checkers.h): restarted roles' worlds come back in time.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("replacement measures the last member to join the new generation", "[model][checkers]") {
  Scenario s = leaderAnd(1);
  s.expect.replacement_within = Ms(1000);
  RunRecord r = emptyRun();
  CHECK(checks::replacement(leaderAnd(1), r).empty());  // not asked for
  auto v = checks::replacement(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kError);
  CHECK(v[0].message == "expect.replacement_within is set but no restart was delivered");

  r.faults.push_back(fault(FaultKind::kRestart, "a1", 2.0, {"w1"}));
  r.events.push_back(event(EventKind::kCreated, 2.4, "leader", "w1"));
  v = checks::replacement(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].name == "world w1 is healthy again within 1000 ms of restarting a1");
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "never");
  CHECK(v[0].message == "a1 never re-joined world w1 after the restart at 2.000 s");

  r.events.push_back(event(EventKind::kCreated, 2.7, "a1", "w1"));
  v = checks::replacement(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "700 ms");
  CHECK(v[0].threshold == "<= 1000 ms");
  s.expect.replacement_within = Ms(500);
  CHECK(checks::replacement(s, r).at(0).status == VerdictStatus::kFail);
}

}  // namespace
}  // namespace mw::harness::testing
