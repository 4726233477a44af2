// The nemesis-explained checker (model/checkers/checkers.h): no break without a fault.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("nemesisExplained counts each break once and names the unexplained ones",
          "[model][checkers]") {
  Scenario s = leaderAnd(2);
  RunRecord r = emptyRun();
  CHECK(checks::nemesisExplained(s, r).empty());  // no nemesis
  s.nemesis.enabled = true;
  r.faults.push_back(fault(FaultKind::kPause, "a1", 1.0, {"w1"}));
  r.events.push_back(event(EventKind::kBroken, 2.0, "leader", "w1"));
  r.events.push_back(event(EventKind::kBroken, 2.1, "a1", "w1"));  // the same break
  auto v = checks::nemesisExplained(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "0");
  CHECK(v[0].message == "1 faults injected, 1 world breaks, 0 false");

  r.events.push_back(event(EventKind::kBroken, 3.0, "leader", "w2"));
  v = checks::nemesisExplained(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "1");
  CHECK(v[0].message ==
        "1 faults injected, 2 world breaks, 1 false: w2 at 3.000 s (peer_died seen by leader)");
}

}  // namespace
}  // namespace mw::harness::testing
