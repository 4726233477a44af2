// evaluate() (model/expectations.h) is the checkers' table in order.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "model/expectations.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("evaluate is the checkers' verdicts in the table's order", "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.expect.has_broken = true;
  s.expect.broken = {"w2"};
  s.expect.detected_within = Ms(100);
  RunRecord r = emptyRun();
  r.faults.push_back(fault(FaultKind::kKill, "a2", 2.0, {"w2"}));
  r.events.push_back(event(EventKind::kBroken, 2.05, "leader", "w2"));
  r.harness_errors = {"oops"};
  std::vector<Verdict> want;
  for (const checks::Checker check : checks::kCheckers) {
    for (auto& v : check(s, r)) want.push_back(v);
  }
  const auto got = evaluate(s, r);
  REQUIRE(got.size() == 6);
  REQUIRE(got.size() == want.size());
  const char* names[] = {"the harness ran the scenario",
                         "world w1 stays healthy",
                         "world w2 breaks",
                         "world w2 is detected broken within 100 ms",
                         "no process hangs",
                         "no orphan process or file is left"};
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].name == names[i]);
    CHECK(got[i].name == want[i].name);
    CHECK(got[i].status == want[i].status);
  }
  CHECK(overall(got) == VerdictStatus::kFail);  // the harness error
}

}  // namespace
}  // namespace mw::harness::testing
