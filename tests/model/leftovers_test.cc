// The no-hang and no-orphans checkers (model/checkers/checkers.h).
#include <catch2/catch.hpp>

#include "model/checkers/checkers.h"
#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

// A run of leaderAnd(2)'s three workers, none hung.
RunRecord leaderAndTwo() {
  RunRecord r = emptyRun();
  r.workers.resize(3);
  r.workers[0].role = "leader";
  r.workers[1].role = "a1";
  r.workers[2].role = "a2";
  return r;
}

TEST_CASE("noHang names the workers that hung", "[model][checkers]") {
  Scenario s = leaderAnd(2);
  RunRecord r = leaderAndTwo();
  auto v = checks::noHang(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  r.workers[1].hung = r.workers[2].hung = true;
  v = checks::noHang(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "a1, a2");
  s.expect.no_hang = false;
  CHECK(checks::noHang(s, r).empty());
}

TEST_CASE("noHang names each hung role's own stop_within once a role gives one",
          "[model][checkers]") {
  Scenario s = leaderAnd(2);
  s.roles["a1"].stop_within = Ms(15000);
  s.roles["a2"].stop_within = Ms(1500);
  RunRecord r = leaderAndTwo();
  auto v = checks::noHang(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].message == "every worker exited within its role's stop_within of being told to stop");
  r.workers[0].hung = r.workers[2].hung = true;
  v = checks::noHang(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].measured == "leader (5 s), a2 (1500 ms)");
  CHECK(v[0].message ==
        "did not exit within its role's stop_within of being told to stop "
        "(killed): leader (5 s), a2 (1500 ms)");
}

TEST_CASE("noOrphans counts what the run left behind", "[model][checkers]") {
  Scenario s = leaderAnd(1);
  RunRecord r = emptyRun();
  auto v = checks::noOrphans(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kPass);
  CHECK(v[0].measured == "0");
  r.leftover_namespaces = 1;
  r.leftover_files = {"/tmp/mw-fifo-1.in"};
  v = checks::noOrphans(s, r);
  REQUIRE(v.size() == 1);
  CHECK(v[0].status == VerdictStatus::kFail);
  CHECK(v[0].message == "left behind: 0 processes, 1 network namespaces, /tmp/mw-fifo-1.in");
  s.expect.no_orphans = false;
  CHECK(checks::noOrphans(s, r).empty());
}

}  // namespace
}  // namespace mw::harness::testing
