// The data_intact checker (model/checkers/checkers.h): one verdict per world that carries the
// built-in traffic, failing with the first violation named, passing with what was checked.
#include <catch2/catch.hpp>
#include <limits>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

// leaderAnd(2) with gather_to_leader traffic in both worlds.
Scenario withTraffic() {
  Scenario s = leaderAnd(2);
  TrafficSpec t;
  t.worlds = {"w1", "w2"};
  s.traffic.push_back(t);
  return s;
}

TEST_CASE("data_intact passes per world with what was checked", "[model][checkers]") {
  const Scenario s = withTraffic();
  RunRecord r = emptyRun();
  r.checked["w1"]["leader"] = {40, 40.0 * 1024 * 1024, 0};
  auto v = checks::dataIntact(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].name == "world w1's data arrives intact");
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "0 violations");
  CHECK(v[0].message ==
        "40 operations (40.0 MiB) received and checked (leader 40), every element right");
  CHECK(v[0].evidence.at("ops") == 40);
  // A world whose receivers checked nothing is not passed: nothing is hidden behind a pass.
  CHECK(v[1].status == VerdictStatus::kSkipped);
  CHECK(v[1].message ==
        "nothing to judge: no operation of the built-in traffic completed at a receiver of this "
        "world (0 operations checked)");
  CHECK(v[1].evidence.at("ops") == 0);
}

TEST_CASE("data_intact fails with the first violation named and the rest counted",
          "[model][checkers]") {
  const Scenario s = withTraffic();
  RunRecord r = emptyRun();
  r.checked["w1"]["leader"] = {5, 5 * 1024, 0};
  r.checked["w2"]["leader"] = {9, 9 * 1024, 3};
  ViolationRec x;
  x.t = 1.25;
  x.role = "leader";
  x.world = "w2";
  x.generation = 2;
  x.op = "recv";
  x.seq = 7;
  x.offset = 12;
  x.wrong = 1;
  x.expected = 5;
  x.found = std::numeric_limits<double>::quiet_NaN();
  x.detail = "from rank 1: 1 of 256 elements wrong";
  r.violations.push_back(x);
  auto v = checks::dataIntact(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[1].status == VerdictStatus::kFail);
  CHECK(v[1].measured == "3 violations");
  CHECK(v[1].threshold == "0 violations");
  CHECK(v[1].message ==
        "role 'leader', recv seq 7 of generation 2 at 1.250 s: from rank 1: 1 of 256 elements "
        "wrong; element 12 is nan, not 5 (and 2 more operations with wrong content); 9 "
        "operations (9.0 KiB) received and checked (leader 9) right");
  CHECK(v[1].evidence.at("violations") == 3);
}

TEST_CASE("data_intact turned off is skipped with the reason, an nccl world is judged",
          "[model][checkers]") {
  Scenario s = withTraffic();
  s.worlds["w2"].backend = BackendKind::kNccl;  // checked through the device (mw_worker)
  RunRecord r = emptyRun();
  r.checked["w1"]["leader"] = {4, 4 * 1024, 0};
  r.checked["w2"]["leader"] = {6, 6 * 1024, 0};
  auto v = checks::dataIntact(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[1].status == VerdictStatus::kPass);
  CHECK_THAT(v[1].message, Catch::Contains("received and checked"));
  s.expect.data_intact = false;
  s.expect.data_intact_off = "the failpoint corrupts on purpose";
  v = checks::dataIntact(s, r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].status == VerdictStatus::kSkipped);
  CHECK(v[0].message == "turned off: the failpoint corrupts on purpose");
  // A report from before the checks: no verdict at all.
  s.expect.checks_recorded = false;
  CHECK(checks::dataIntact(s, r).empty());
  // No traffic, no verdict (a world of program roles is judged by their own checks).
  CHECK(checks::dataIntact(leaderAnd(2), r).empty());
}

TEST_CASE("app_checks fails on a failed check, names it, and fails when nothing was reported",
          "[model][checkers]") {
  Scenario s = leaderAnd(1);
  RunRecord r = emptyRun();
  CHECK(checks::appChecks(s, r).empty());  // not asked for
  s.expect.app_checks = true;
  auto v = checks::appChecks(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK_THAT(v[0].message, Catch::Contains("no program role reported a check"));
  r.app_checks["leader"]["answer"] = {30, 0, -1, ""};
  v = checks::appChecks(s, r);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].message == "every check held (passed/reported: leader answer 30/30)");
  r.app_checks["a1"]["served"] = {8, 2, 1.5, "got 6 wanted 8"};
  v = checks::appChecks(s, r);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "2 failed");
  CHECK(v[0].message ==
        "2 of role 'a1' check 'served' failed, the first at 1.500 s: got 6 wanted 8 "
        "(passed/reported: a1 served 8/10, leader answer 30/30)");
}

}  // namespace
}  // namespace mw::harness::testing
