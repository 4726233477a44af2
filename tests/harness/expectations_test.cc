// Verdicts (model/expectations.h) on run records made by hand: what each expectation counts,
// and what it leaves out.
#include "model/expectations.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "model/scenario.h"
#include "tests/harness/scenario_text.h"

namespace mw::harness {
namespace {

LoadedScenario load(const std::string& text) { return testing::loadText(text); }

// Three members of w1; w2 between the leader and c; `fault` on the timeline at 1 s.
std::string threeMembers(const std::string& fault, const std::string& expect) {
  return R"(scenario {
  name = "t", duration = "4s",
  worlds = { w1 = { heartbeat = "500ms" }, w2 = { heartbeat = "500ms" } },
  roles = { leader = { worlds = { w1 = 0, w2 = 0 } }, a = { worlds = { w1 = 1 } },
            b = { worlds = { w1 = 2 } }, c = { worlds = { w2 = 1 } } },
  traffic = { gather_to_leader { worlds = { "w1", "w2" }, bytes = "64KiB" } },
  timeline = { at("1s", )" +
         fault + R"() },
  expect = { )" +
         expect + R"( },
})";
}

RunRecord runWith(const std::string& kind, const std::string& role, std::vector<EventRec> events) {
  RunRecord r;
  r.duration = 4;
  r.elapsed = 4.005;
  FaultRec f;
  f.action = kind + " " + role;
  f.kind = parseFaultKind(kind).value();
  f.role = role;
  f.sent = f.acked = 1.0;
  f.outcome = FaultOutcome::kOk;
  f.worlds = {"w1"};
  r.faults.push_back(f);
  r.events = std::move(events);
  return r;
}

EventRec broken(double t, const std::string& role, const std::string& world = "w1") {
  EventRec e;
  e.t = t;
  e.role = role;
  e.world = world;
  e.kind = EventKind::kBroken;
  e.cause = Cause::kPeerDied;
  return e;
}

// REQUIRES: `all` outlives the returned reference (keep evaluate()'s result in a variable).
const Verdict& find(const std::vector<Verdict>& all, const std::string& part) {
  auto it = std::find_if(all.begin(), all.end(),
                         [&](const Verdict& v) { return v.name.find(part) != std::string::npos; });
  REQUIRE(it != all.end());
  return *it;
}

TEST_CASE("detected_within counts the member a failpoint targeted", "[harness][expectations]") {
  // Before, the targeted member was left out: it detected after 493 ms and the 100 ms bound
  // passed on the others' 20-30 ms.
  auto s = load(threeMembers(R"(failpoint("a", "mw/gloo/recv/w1"))",
                             R"(broken = { "w1" }, detected_within = "100ms")"));
  auto r =
      runWith("failpoint", "a", {broken(1.020, "leader"), broken(1.030, "b"), broken(1.493, "a")});
  const auto all = evaluate(s.scenario, r);
  const auto& v = find(all, "detected broken within");
  CHECK(v.status == VerdictStatus::kFail);
  CHECK(v.measured == "493 ms");
  CHECK_THAT(v.message, Catch::Contains("a after 493 ms"));
}

TEST_CASE("detected_within leaves out a member the fault paused or took out of the world",
          "[harness][expectations]") {
  for (const char* fault : {R"(pause("a"))", R"(remove_world("a", "w1"))"}) {
    CAPTURE(fault);
    auto s = load(threeMembers(fault, R"(broken = { "w1" }, detected_within = "100ms")"));
    const std::string kind = std::string(fault).substr(0, std::string(fault).find('('));
    auto r = runWith(kind, "a", {broken(1.020, "leader"), broken(1.030, "b")});
    const auto all = evaluate(s.scenario, r);
    const auto& v = find(all, "detected broken within");
    CHECK(v.status == VerdictStatus::kPass);
    CHECK(v.measured == "30 ms");
  }
}

TEST_CASE("detected_within counts from when the killed process was gone, not the signal",
          "[harness][expectations]") {
  // Seen on a starved machine: SIGKILL at 3.000 s, the kernel closed the worker's sockets only at
  // 3.950 s (exit_mmap waited on a lock), the leader detected at 3.961 s. No peer could see the
  // death before 3.950 s but by silence; the runtime took 11 ms.
  auto s = load(threeMembers(R"(kill("a"))", R"(broken = { "w1" }, detected_within = "100ms")"));
  auto r = runWith("kill", "a", {broken(1.961, "leader"), broken(1.958, "b")});
  r.faults[0].ends_role = true;
  r.faults[0].gone = 1.950;
  auto all = evaluate(s.scenario, r);
  const auto& v = find(all, "detected broken within");
  CHECK(v.status == VerdictStatus::kPass);
  CHECK(v.measured == "11 ms");
  CHECK_THAT(v.message, Catch::Contains("sockets 950 ms later"));

  // Gone at once, detected only after a heartbeat timeout: still a fail, counted from the signal.
  r.faults[0].gone = 1.001;
  r.events = {broken(2.010, "leader"), broken(2.012, "b")};
  all = evaluate(s.scenario, r);
  const auto& late = find(all, "detected broken within");
  CHECK(late.status == VerdictStatus::kFail);
  CHECK(late.measured == "1012 ms");
  CHECK_THAT(late.message, !Catch::Contains("sockets"));

  // Gone 15 ms after the signal (the harness's own view lags the close): still from the signal,
  // so a survivor that saw the close before the harness did is not credited with 0 ms.
  r.faults[0].gone = 1.015;
  r.events = {broken(1.012, "leader"), broken(1.013, "b")};
  all = evaluate(s.scenario, r);
  CHECK(find(all, "detected broken within").measured == "13 ms");
}

TEST_CASE("detected_within counts from when a network fault was in place, when that was late",
          "[harness][expectations]") {
  // Seen in a fresh-clone run: a loud partition sent at 2.000 s whose iptables rules were all in
  // only at 2.236 s (they usually take 34 ms); the members detected at 2.207 and 2.232 s.
  auto s = load(R"(scenario {
  name = "late rules",
  duration = "4s",
  worlds = { w1 = { heartbeat = "500ms" } },
  roles = { leader = { worlds = { w1 = 0 }, host = "h0" }, b = { worlds = { w1 = 1 }, host = "h2" } },
  traffic = { gather_to_leader { worlds = { "w1" } } },
  timeline = { at("1s", partition { a = { "h2" }, b = { "h0" }, mode = "loud" }) },
  expect = { broken = { "w1" }, detected_within = "100ms" },
})");
  RunRecord r = runWith("partition", "", {broken(1.207, "b"), broken(1.232, "leader")});
  r.faults[0].acked = 1.236;
  auto all = evaluate(s.scenario, r);
  const auto& v = find(all, "detected broken within");
  CHECK(v.status == VerdictStatus::kPass);
  CHECK(v.measured == "0 ms");
  CHECK_THAT(v.message, Catch::Contains("the harness had the fault in place 236 ms later"));

  // Rules in at once (5 ms): detection counts from the fault, and 232 ms fails the bound.
  r.faults[0].acked = 1.005;
  all = evaluate(s.scenario, r);
  const auto& slow = find(all, "detected broken within");
  CHECK(slow.status == VerdictStatus::kFail);
  CHECK(slow.measured == "232 ms");
  CHECK_THAT(slow.message, !Catch::Contains("in place"));
}

TEST_CASE("a break after the planned duration is not judged", "[harness][expectations]") {
  // Stopping the workers ends every world; a break reported at 4.23 s of a 4 s run was judged.
  auto s = load(threeMembers(R"(failpoint("c", "mw/gloo/recv/w2"))",
                             R"(broken = { "w2" }, detected_within = "100ms")"));
  RunRecord r = runWith("failpoint", "c",
                        {broken(1.020, "leader", "w2"), broken(1.025, "c", "w2"),
                         broken(4.003, "leader"), broken(4.230, "a")});
  r.faults[0].worlds = {"w2"};
  r.elapsed = 4.3;  // the end of the timeline came late; the duration still bounds the run
  const auto all = evaluate(s.scenario, r);
  CHECK(find(all, "world w1 stays healthy").status == VerdictStatus::kPass);
  CHECK(find(all, "world w2 breaks").status == VerdictStatus::kPass);
  CHECK(r.inRun(3.9));
  CHECK_FALSE(r.inRun(4.003));
}

TEST_CASE("a record whose series goes back in time is the harness's error, never evidence",
          "[harness][expectations]") {
  auto s = load(threeMembers(R"(kill("c"))", R"(broken = { "w2" })"));
  auto r = runWith("kill", "c", {broken(1.010, "leader", "w2")});
  WindowRec a, b;
  a.t = 0.1;
  b.t = 0.2;
  r.windows["w1"]["a"] = {a, b};
  CHECK(timeOrderError(r).empty());
  r.windows["w1"]["a"] = {b, a};  // what a program role's series looked like before shiftTimes
  CHECK_THAT(timeOrderError(r), Catch::Contains("series 'w1' of role 'a'") &&
                                    Catch::Contains("sample 1 at t=0.100 s comes after t=0.200 s"));
  const auto all = evaluate(s.scenario, r);
  const auto& v = find(all, "the harness ran the scenario");
  CHECK(v.status == VerdictStatus::kError);
  CHECK_THAT(v.message, Catch::Contains("goes back in time"));
}

TEST_CASE("shiftTimes moves time zero and keeps every series in order", "[harness][expectations]") {
  // Seen in a report: a program role's first window, taken while the others still joined, was
  // recorded at 1.205 s from the old zero, then 0.077 s from the new one.
  RunRecord r;
  WindowRec early, late;
  early.t = 1.205;
  r.windows["t1"]["router"] = {early};
  r.cpu["router"] = {{1.1, 0.01, 0}};
  r.machine = {{1.2, 0.5}};
  EventRec created;
  created.t = 1.0;
  r.events = {created};
  FaultRec never;
  never.planned = 2.0;
  r.faults = {never};
  r.shiftTimes(1.25);
  late.t = 0.077;
  r.windows["t1"]["router"].push_back(late);
  CHECK(r.windows["t1"]["router"][0].t == Approx(-0.045));
  CHECK(r.events[0].t == Approx(-0.25));
  CHECK(r.cpu["router"][0].t == Approx(-0.15));
  CHECK(r.machine[0].t == Approx(-0.05));
  CHECK(r.faults[0].planned == 2.0);  // planned from the new zero
  CHECK(r.faults[0].sent == -1);      // never sent stays never sent
  CHECK(timeOrderError(r).empty());
  CHECK_FALSE(r.inRun(r.windows["t1"]["router"][0].t));
}

}  // namespace
}  // namespace mw::harness
