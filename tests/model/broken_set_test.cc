// The broken-set checker (model/checkers/checkers.h): exactly the expected worlds break.
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

TEST_CASE("brokenSet judges every world against expect.broken", "[model][checkers]") {
  Scenario s = leaderAnd(3);
  s.expect.has_broken = true;
  s.expect.broken = {"w2", "w3"};
  RunRecord r = emptyRun();
  r.events.push_back(event(EventKind::kBroken, 1.5, "leader", "w2"));
  r.events.push_back(event(EventKind::kBroken, 1.2, "a2", "w2"));
  r.events.push_back(event(EventKind::kBroken, 4.5, "leader", "w3"));  // after the run: not judged
  const auto v = checks::brokenSet(s, r);
  REQUIRE(v.size() == 3);
  CHECK(v[0].name == "world w1 stays healthy");
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[1].name == "world w2 breaks");
  CHECK(v[1].status == VerdictStatus::kPass);
  CHECK(v[1].measured == "broken at 1.200 s");
  CHECK(v[1].message == "broke at 1.200 s (peer_died seen by a2: connection closed)");
  CHECK(v[2].name == "world w3 breaks");
  CHECK(v[2].status == VerdictStatus::kFail);
  CHECK(v[2].measured == "healthy");
}

TEST_CASE("brokenSet without expect.broken judges only expect.healthy", "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.expect.healthy = {"w1"};
  RunRecord r = emptyRun();
  r.events.push_back(event(EventKind::kBroken, 2.0, "leader", "w1"));
  r.events.push_back(event(EventKind::kBroken, 2.0, "leader", "w2"));
  const auto v = checks::brokenSet(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].name == "world w1 stays healthy");
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "broken at 2.000 s");
  CHECK_THAT(v[0].message, Catch::EndsWith("but was expected to stay healthy"));
  s.expect.healthy.clear();
  CHECK(checks::brokenSet(s, r).empty());
}

}  // namespace
}  // namespace mw::harness::testing
