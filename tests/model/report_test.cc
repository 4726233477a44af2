// The typed report (model/report.h): the outcome-to-verdict mapping, the reruns, and the codec
// and checkers on saved reports of real runs, judged again.
#include "model/report.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/model/model_fixtures.h"

namespace mw::harness::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Verdict withStatus(VerdictStatus s) { return {"v", "", s, "", "", "", "", {}}; }

TEST_CASE("a report's verdict: skipped when unavailable and error when it did not complete",
          "[model][report]") {
  const std::vector<Verdict> pass = {withStatus(VerdictStatus::kPass)};
  const std::vector<Verdict> inconclusive = {withStatus(VerdictStatus::kPass),
                                             withStatus(VerdictStatus::kInconclusive)};
  const std::vector<Verdict> failed = {withStatus(VerdictStatus::kInconclusive),
                                       withStatus(VerdictStatus::kError)};
  CHECK(reportVerdict(Outcome::kCompleted, pass) == VerdictStatus::kPass);
  CHECK(reportVerdict(Outcome::kCompleted, inconclusive) == VerdictStatus::kInconclusive);
  CHECK(reportVerdict(Outcome::kCompleted, failed) == VerdictStatus::kFail);
  CHECK(reportVerdict(Outcome::kUnavailable, pass) == VerdictStatus::kSkipped);
  CHECK(reportVerdict(Outcome::kInterrupted, pass) == VerdictStatus::kError);
  CHECK(reportVerdict(Outcome::kHarnessError, pass) == VerdictStatus::kError);
  for (Outcome o : {Outcome::kCompleted, Outcome::kInterrupted, Outcome::kUnavailable,
                    Outcome::kHarnessError}) {
    CHECK(parseOutcome(outcomeName(o)) == o);
  }
  CHECK(std::string(outcomeName(Outcome::kHarnessError)) == "harness_error");
  CHECK_FALSE(parseOutcome("crashed").has_value());
}

TEST_CASE("a report's reruns and outcome survive the codec", "[model][report]") {
  Report rep = makeReport(leaderAnd(1), emptyRun(), {withStatus(VerdictStatus::kSkipped)},
                          Outcome::kUnavailable, "needs root", json{{"cores", 2}});
  CHECK(toJson(rep).count("reruns") == 0);
  rep.earlier_runs = std::vector<EarlierRun>{{VerdictStatus::kInconclusive, {"t: noisy"}}};
  const json doc = toJson(rep);
  CHECK(doc["verdict"] == "skipped");
  CHECK(doc["outcome"] == "unavailable");
  CHECK(doc["reruns"] == 1);
  const Report back = reportFromJson(json::parse(doc.dump()));
  CHECK(back.outcome == Outcome::kUnavailable);
  CHECK(back.why == "needs root");
  REQUIRE(back.earlier_runs.has_value());
  REQUIRE(back.earlier_runs->size() == 1);
  CHECK(back.earlier_runs->at(0).inconclusive == std::vector<std::string>{"t: noisy"});
  CHECK(toJson(back).dump() == doc.dump());
  // Judged again, a run that did not complete keeps no verdicts.
  CHECK(rejudge(back).verdicts.empty());
  CHECK_THROWS_WITH(reportFromJson(json{{"schema", "other/1"}}),
                    Catch::Contains("not a multiworld chaos report"));
}

TEST_CASE("a report judged again keeps the verdicts of expect.healthy", "[model][report]") {
  // A scenario that names healthy worlds and no broken set: only those are judged.
  Scenario s = leaderAnd(2);
  s.expect.has_broken = false;
  s.expect.broken.clear();
  s.expect.healthy = {"w1"};
  const Report rep = makeReport(s, emptyRun(), {}, Outcome::kCompleted, "", json::object());
  const json doc = toJson(rep);
  CHECK(doc["scenario"]["expect"]["healthy"] == json::array({"w1"}));
  const Report again = rejudge(reportFromJson(json::parse(doc.dump())));
  CHECK(again.scenario.expect.healthy == std::set<std::string>{"w1"});
  const auto stays =
      std::find_if(again.verdicts.begin(), again.verdicts.end(),
                   [](const Verdict& v) { return v.name == "world w1 stays healthy"; });
  REQUIRE(stays != again.verdicts.end());
  CHECK(stays->status == VerdictStatus::kPass);
  // Without the field (a report written before it existed, or a scenario without it), none.
  Scenario plain = leaderAnd(2);
  CHECK(toJson(makeReport(plain, emptyRun(), {}, Outcome::kCompleted, "",
                          json::object()))["scenario"]["expect"]
            .count("healthy") == 0);
}

TEST_CASE("a role's stop_within survives the codec, and a rejudged no_hang keeps it",
          "[model][report]") {
  Scenario s = leaderAnd(1);
  s.roles["a1"].program = {"python3", "serve.py"};
  s.roles["a1"].stop_within = Ms(15000);
  RunRecord r = emptyRun();
  r.workers.resize(1);
  r.workers[0].role = "a1";
  r.workers[0].hung = true;
  const json doc = toJson(makeReport(s, r, {}, Outcome::kCompleted, "", json::object()));
  CHECK(doc["scenario"]["roles"]["a1"]["stop_within_ms"] == 15000);
  CHECK(doc["scenario"]["roles"]["leader"].count("stop_within_ms") == 0);  // the default
  const Report again = rejudge(reportFromJson(json::parse(doc.dump())));
  CHECK(again.scenario.roles.at("a1").stop_within == Ms(15000));
  CHECK(again.scenario.roles.at("leader").stop_within == RoleSpec::kDefaultStopWithin);
  const auto hang = std::find_if(again.verdicts.begin(), again.verdicts.end(),
                                 [](const Verdict& v) { return v.name == "no process hangs"; });
  REQUIRE(hang != again.verdicts.end());
  CHECK(hang->measured == "a1 (15 s)");
}

// The saved reports (tests/model/saved) are of runs of the scenario library made by the harness
// before its model moved to model/ (ef06fba: scenarios/*.lua with --backend gloo, and
// tests/harness/fixtures/inconclusive_throughput.lua). The JSON rounds times to the millisecond
// and CPU seconds to the microsecond, so a report judged again from its JSON can differ in a last
// digit from the one judged on the live record; each saved report is therefore the fixed point
// that harness reached: its `run`, `expectations` and `verdict` are what ef06fba's own
// `mwchaos report` wrote for it, the rest (scenario, environment, outcome, reruns) the run's
// report as written. Nothing is left out of the comparison.
TEST_CASE("rejudge: each saved report read back and judged again is the same report",
          "[model][report]") {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(MW_SAVED_REPORTS)) {
    if (entry.path().extension() != ".json") continue;
    ++n;
    CAPTURE(entry.path().filename().string());
    std::ifstream in(entry.path());
    const json saved = json::parse(in);
    const Report rep = rejudge(reportFromJson(saved));
    const json fresh = toJson(rep);
    for (const auto& [key, value] : saved.items()) {
      CAPTURE(key);
      CHECK(fresh.contains(key));
      if (key == "expectations") continue;  // below, one verdict at a time
      CHECK(fresh.value(key, json()).dump() == value.dump());
    }
    REQUIRE(fresh["expectations"].size() == saved["expectations"].size());
    for (size_t i = 0; i < saved["expectations"].size(); ++i) {
      CAPTURE(i);
      CHECK(fresh["expectations"][i].dump() == saved["expectations"][i].dump());
    }
    CHECK(fresh.dump() == saved.dump());
  }
  CHECK(n >= 10);
}

TEST_CASE("a damaged report is refused with the field named, never read past its arrays",
          "[model][report]") {
  std::ifstream in(fs::path(MW_SAVED_REPORTS) / "demo_worker_killed.json");
  const json saved = json::parse(in);
  auto refusal = [](const json& doc) {
    try {
      (void)reportFromJson(doc);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  json shortColumn = saved;
  shortColumn["run"]["series"]["w1"]["a"]["generation"].erase(0);
  CHECK_THAT(refusal(shortColumn),
             Catch::Contains("run.series.w1.a: field 'generation' is not an array of 51"));
  json noColumn = saved;
  noColumn["run"]["cpu"]["b"].erase("wait_s");
  CHECK_THAT(refusal(noColumn), Catch::Contains("run.cpu.b: missing field 'wait_s'"));
  json notRoles = saved;
  notRoles["run"]["series"]["w2"] = 3;
  CHECK_THAT(refusal(notRoles), Catch::Contains("run.series.w2: not an object of roles"));
  // A value of the wrong type: nlohmann's error, with the value's path (JSON_DIAGNOSTICS).
  json wrongType = saved;
  wrongType["scenario"]["worlds"]["w1"]["size"] = "2";
  CHECK_THAT(refusal(wrongType), Catch::Contains("/scenario/worlds/w1/size"));
}

}  // namespace
}  // namespace mw::harness::testing
