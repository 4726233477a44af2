// The report's JSON codec (model/report.h): a report read back holds what was written, and
// judging it again gives the same verdicts; an inconclusive verdict's JUnit and GitHub forms.
#include "reports/report.h"

#include <catch2/catch.hpp>

#include "model/expectations.h"
#include "reports/github.h"
#include "tests/harness/scenario_text.h"

namespace mw::harness {
namespace {

LoadedScenario twoWorlds() {
  return testing::loadText(R"(scenario {
  name = "round trip", duration = "4s", seed = 42,
  worlds = { w1 = { heartbeat = "300ms" }, w2 = {} },
  roles = { leader = { worlds = { w1 = 0, w2 = 0 } }, a = { worlds = { w1 = 1 } },
            c = { worlds = { w2 = 1 } } },
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB", rate = 20 } },
  timeline = { at("2s", kill("c")) },
  expect = { broken = { "w2" }, detected_within = "200ms",
             throughput = { throughput_kept { world = "w1", ratio = 0.9 } } },
})");
}

RunRecord aRun(double after_factor) {
  RunRecord r;
  r.duration = 4;
  r.elapsed = 4.002;
  r.startup = 0.3;
  r.machine_cpus = 2;
  r.harness_errors = {"an error"};
  FaultRec f = testing::killFault("c", 2.001, {"w2"});
  f.where = "t.lua:8";
  r.faults.push_back(f);
  EventRec e;
  e.t = 2.05;
  e.role = "leader";
  e.world = "w2";
  e.kind = EventKind::kBroken;
  e.generation = 1;
  e.cause = Cause::kPeerDied;
  e.peer = 1;
  e.detail = "connection closed";
  r.events.push_back(e);
  for (int i = 1; i <= 40; ++i) {
    const double t = i * 0.1;
    WindowRec w;
    w.t = t;
    w.generation = 1;
    w.bytes = 1310720 * (t > 2 ? after_factor : 1) * (i % 2 ? 0.5 : 1.5);
    w.ops = 2;
    w.lat_sum_ns = 2e6;
    w.lat_max_ns = 1.5e6;
    r.windows["w1"]["leader"].push_back(w);
    r.cpu["leader"].push_back({t, 0.01, 0.002});
    r.cpu["a"].push_back({t, 0.004, 0});
    r.machine.push_back({t, t * 0.2});
  }
  WorkerRec wr;
  wr.role = "c";
  wr.pid = 77;
  wr.starts = 1;
  wr.exit = "killed by SIGKILL";
  wr.killed_by_scenario = true;
  r.workers.push_back(wr);
  return r;
}

TEST_CASE("a report read back holds what was written", "[harness][report]") {
  auto l = twoWorlds();
  const Scenario& s = l.scenario;
  const RunRecord r = aRun(0.8);
  const auto verdicts = evaluate(s, r);
  const auto doc =
      toJson(makeReport(s, r, verdicts, Outcome::kCompleted, "", nlohmann::json{{"cores", 2}}));
  // Through text, as `mwchaos report` reads it.
  const auto back = nlohmann::json::parse(doc.dump(1));
  const Report rep = reportFromJson(back);
  const Scenario& s2 = rep.scenario;
  const RunRecord& r2 = rep.run;
  const auto& v2 = rep.verdicts;
  CHECK(rep.outcome == Outcome::kCompleted);
  CHECK(rep.environment == nlohmann::json{{"cores", 2}});
  CHECK_FALSE(rep.earlier_runs.has_value());
  REQUIRE(rep.timeline.size() == 1);
  CHECK(rep.timeline[0].at_ms == 2000);
  CHECK(rep.timeline[0].kind == FaultKind::kKill);
  CHECK(rep.timeline[0].role == "c");
  // The scenario section is read back whole: written again, it is the same.
  CHECK(toJson(rep)["scenario"].dump() == doc["scenario"].dump());

  CHECK(s2.name == s.name);
  CHECK(s2.seed == 42);
  CHECK(s2.worlds.at("w1").heartbeat == s.worlds.at("w1").heartbeat);
  CHECK(s2.traffic.at(0).rate == Approx(20));
  CHECK(s2.traffic.at(0).bytes == s.traffic.at(0).bytes);
  CHECK(s2.membersOf("w1") == s.membersOf("w1"));
  CHECK(s2.expect.throughput.at(0).ratio == Approx(0.9));
  CHECK(r2.harness_errors == r.harness_errors);
  REQUIRE(r2.faults.size() == 1);
  CHECK(r2.faults[0].worlds == r.faults[0].worlds);
  CHECK(r2.faults[0].ends_role);
  REQUIRE(r2.events.size() == 1);
  CHECK(r2.events[0].detail == "connection closed");
  CHECK(r2.windows.at("w1").at("leader").size() == 40);
  REQUIRE(r2.cpu.at("leader").size() == 40);
  CHECK(r2.cpu.at("leader")[3].wait == Approx(0.002));
  REQUIRE(r2.machine.size() == 40);
  CHECK(r2.machine_cpus == 2);
  CHECK(r2.workers.at(0).exit == "killed by SIGKILL");

  // Judged again from what was read back: the same verdicts, evidence included.
  const auto again = evaluate(s2, r2);
  REQUIRE(again.size() == verdicts.size());
  REQUIRE(v2.size() == verdicts.size());
  for (size_t i = 0; i < verdicts.size(); ++i) {
    CAPTURE(verdicts[i].name);
    CHECK(again[i].status == verdicts[i].status);
    CHECK(again[i].message == verdicts[i].message);
    CHECK(v2[i].status == verdicts[i].status);
    for (const auto& [k, n] : verdicts[i].evidence) {
      CAPTURE(k);
      CHECK(again[i].evidence.at(k) == Approx(n).epsilon(1e-5));
      CHECK(v2[i].evidence.at(k) == Approx(n).epsilon(1e-5));
    }
  }
}

TEST_CASE("a report's operation history reads back as it was, or names what is wrong",
          "[harness][report]") {
  auto l = twoWorlds();
  RunRecord r = aRun(1);
  // No history kept: none written.
  CHECK_FALSE(runJson(l.scenario, r).contains("history"));
  r.history_limit = 3;
  r.history["leader"].ops = {{0.1234564, 0.2, "w1", 1, "recv", 1, 0, "ok"},
                             {0.3, 0.4, "w2", 2, "recv", 1, 7, "violation"},
                             {0.5, 0.6, "w1", 1, "recv", 1, 1, "world_broken"}};
  r.history["leader"].full_at = 0.7;
  r.history["a"].ops = {{0.1, 0.15, "w1", 1, "send", 0, 0, "ok"}};
  const auto j = runJson(l.scenario, r);
  CHECK(j["history"]["limit"] == 3);
  CHECK(j["history"]["columns"] == nlohmann::json({"start_s", "end_s", "world", "generation", "op",
                                                   "peer", "seq", "outcome"}));
  CHECK(j["history"]["roles"]["leader"]["ops"][0] ==
        nlohmann::json({0.123456, 0.2, "w1", 1, "recv", 1, 0, "ok"}));  // to the microsecond
  CHECK(j["history"]["roles"]["a"]["full_at_s"].is_null());
  const RunRecord back = runFromJson(nlohmann::json::parse(j.dump()));
  CHECK(back.history_limit == 3);
  REQUIRE(back.history.at("leader").ops.size() == 3);
  const HistoryOpRec& v = back.history.at("leader").ops[1];
  CHECK(v.start == 0.3);
  CHECK(v.end == 0.4);
  CHECK(v.world == "w2");
  CHECK(v.generation == 2);
  CHECK(v.op == "recv");
  CHECK(v.peer == 1);
  CHECK(v.seq == 7);
  CHECK(v.outcome == "violation");
  CHECK(back.history.at("leader").full_at == 0.7);
  CHECK_FALSE(back.history.at("a").full_at.has_value());
  CHECK(runJson(l.scenario, back)["history"] == j["history"]);

  struct Case {
    const char* history;
    const char* says;
  };
  for (
      const Case& c : {
          Case{R"([1])", "run.history: not an object"},
          Case{R"({"roles": {}})", "run.history"},
          Case{R"({"limit": 3, "roles": []})", "run.history.roles: not an object of roles"},
          Case{R"({"limit": 3, "roles": {"a": {"ops": 5}}})", "run.history.roles.a.ops: not an"},
          Case{R"({"limit": 3, "roles": {"a": {"ops": [[1, 2, "w1"]]}}})",
               "run.history.roles.a.ops[0]: not an array of 8 columns"},
          Case{
              R"({"limit": 3, "roles": {"a": {"ops": [[1, 2, "w1", 1, "recv", "one", 0, "ok"]]}}})",
              "run.history.roles.a.ops[0]: "},
      }) {
    CAPTURE(c.history);
    nlohmann::json run = j;
    run["history"] = nlohmann::json::parse(c.history);
    CHECK_THROWS_WITH(runFromJson(run), Catch::Contains(c.says));
  }
}

TEST_CASE("an inconclusive report is a JUnit skip and a GitHub warning", "[harness][report]") {
  auto l = twoWorlds();
  const RunRecord r = aRun(0.8);  // windows swing 0.5..1.5: 0.8 cannot be told from 0.9
  const auto verdicts = evaluate(l.scenario, r);
  const Report rep = makeReport(l.scenario, r, verdicts, Outcome::kCompleted, "", {});
  const auto* tv = &verdicts[0];
  for (const auto& v : verdicts) {
    if (v.name.find("throughput") != std::string::npos) tv = &v;
  }
  INFO(tv->message);
  REQUIRE(tv->status == VerdictStatus::kInconclusive);
  // The harness error in the run makes the whole verdict fail; without it, inconclusive.
  CHECK(rep.verdict() == VerdictStatus::kFail);
  RunRecord clean = r;
  clean.harness_errors.clear();
  const auto cv = evaluate(l.scenario, clean);
  const Report cdoc = makeReport(l.scenario, clean, cv, Outcome::kCompleted, "", {});
  CHECK(cdoc.verdict() == VerdictStatus::kInconclusive);
  CHECK(toJson(cdoc)["verdict"] == "inconclusive");
  const std::string junit = reports::junitXml({cdoc});
  CHECK_THAT(junit, Catch::Contains("<skipped message=\"inconclusive: "));
  CHECK_THAT(junit, !Catch::Contains("<failure"));
  const std::string gh = reports::githubAnnotations(cdoc);
  CHECK_THAT(gh, Catch::Contains("::warning file="));
  CHECK_THAT(gh, !Catch::Contains("::error"));
}

}  // namespace
}  // namespace mw::harness
