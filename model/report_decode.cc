// Reading a report back (model/report.h, reportFromJson): the scenario section as far as it
// carries the scenario, the verdicts, the outcome and the reruns. Fields a report written by an
// earlier version lacks take the defaults the harness used then.
#include <cmath>
#include <stdexcept>

#include "model/json_fields.h"
#include "model/report.h"

namespace mw::harness {

using json = nlohmann::json;
using json_fields::known;
using json_fields::msOf;
using json_fields::need;

namespace {

WorldSpec worldFromJson(const std::string& name, const json& j) {
  WorldSpec w;
  w.name = name;
  w.backend = known(parseBackend(j.value("backend", std::string("gloo"))),
                    "scenario.worlds." + name + ".backend");
  w.size = j.value("size", 0);
  w.heartbeat = Ms(j.value("heartbeat_ms", 1000LL));
  w.op_timeout = Ms(j.value("op_timeout_ms", w.op_timeout.count()));
  w.rejoin = j.value("rejoin", w.rejoin);
  w.start = j.value("start", w.start);
  w.where = j.value("where", std::string());
  return w;
}

TrafficSpec trafficFromJson(const json& t) {
  TrafficSpec ts;
  const std::string pattern = t.value("pattern", std::string());
  const auto p = chaos::parseTrafficPattern(pattern);
  if (!p) throw std::runtime_error("scenario.traffic: unknown pattern '" + pattern + "'");
  ts.pattern = *p;
  ts.worlds = t.value("worlds", std::vector<std::string>());
  ts.bytes = t.value("bytes", ts.bytes);
  if (t.contains("dtype"))
    ts.dtype = known(parseDType(t["dtype"].get<std::string>()), "scenario.traffic.dtype");
  ts.rate = t.value("rate", ts.rate);
  ts.root = t.value("root", ts.root);
  return ts;
}

PlannedFault plannedFromJson(const json& a) {
  PlannedFault p;
  p.at_ms = a.value("at_ms", 0LL);
  p.action = a.value("action", std::string());
  const std::string kind = a.value("kind", std::string());
  const auto fk = parseFaultKind(kind);
  if (!fk) throw std::runtime_error("scenario.timeline: unknown fault kind '" + kind + "'");
  p.kind = *fk;
  p.role = a.value("role", std::string());
  p.where = a.value("where", std::string());
  return p;
}

ExpectSpec expectFromJson(const json& ex) {
  ExpectSpec e;
  e.where = ex.value("where", std::string());
  if (ex.contains("broken")) {
    e.has_broken = true;
    for (const auto& b : ex["broken"]) e.broken.insert(b.get<std::string>());
  }
  for (const auto& h : ex.value("healthy", json::array())) e.healthy.insert(h.get<std::string>());
  if (ex.contains("detected_within_ms"))
    e.detected_within = Ms(ex["detected_within_ms"].get<long long>());
  const json per_world = ex.value("detected_within_world_ms", json::object());  // items() of a
                                                                                // temporary dangles
  for (const auto& [w, v] : per_world.items()) e.detected_within_world[w] = Ms(v.get<long long>());
  for (const auto& t : ex.value("throughput", json::array())) {
    ThroughputSpec ts;
    ts.world = t.at("world").get<std::string>();
    ts.metric = t.value("metric", std::string());
    ts.role = t.value("role", std::string());
    ts.ratio = t.at("ratio").get<double>();
    ts.window = t.value("window", std::string("after"));
    ts.where = t.value("where", std::string());
    e.throughput.push_back(ts);
  }
  if (ex.contains("replacement_within_ms")) {
    e.replacement_within = Ms(ex["replacement_within_ms"].get<long long>());
  }
  e.no_hang = ex.value("no_hang", true);
  e.no_orphans = ex.value("no_orphans", true);
  // A report from before the built-in traffic was checked has no such field: its run recorded no
  // checks, and is judged again without them.
  e.checks_recorded = ex.contains("data_intact");
  e.data_intact = ex.value("data_intact", true);
  e.data_intact_off = ex.value("data_intact_off", std::string());
  e.data_intact_every_element = ex.value("data_intact_every_element", false);
  e.app_checks = ex.value("app_checks", false);
  e.has_check = ex.value("has_check", false);
  return e;
}

Scenario scenarioFromJson(const json& sc, std::vector<PlannedFault>* timeline) {
  Scenario s;
  s.name = need(sc, "name", "scenario").get<std::string>();
  s.file = sc.value("file", std::string());
  s.description = sc.value("description", std::string());
  s.duration = msOf(need(sc, "duration_s", "scenario").get<double>());
  s.warmup = msOf(sc.value("warmup_s", 1.0));
  s.seed = sc.value("seed", 1ULL);
  s.nemesis.enabled = sc.value("nemesis", false);
  for (const auto& [name, w] : need(sc, "worlds", "scenario").items()) {
    s.worlds[name] = worldFromJson(name, w);
  }
  for (const auto& [name, j] : need(sc, "roles", "scenario").items()) {
    RoleSpec r;
    r.name = name;
    r.ranks = j.at("worlds").get<std::map<std::string, int>>();
    r.device = j.value("device", r.device);
    r.program = j.value("program", std::vector<std::string>());
    r.stop_within = Ms(j.value("stop_within_ms", RoleSpec::kDefaultStopWithin.count()));
    s.roles[name] = r;
  }
  for (const auto& t : sc.value("traffic", json::array())) s.traffic.push_back(trafficFromJson(t));
  for (const auto& a : sc.value("timeline", json::array())) timeline->push_back(plannedFromJson(a));
  s.expect = expectFromJson(need(sc, "expect", "scenario"));
  return s;
}

Verdict verdictFromJson(const json& v) {
  const std::string status = v.value("status", std::string());
  const auto st = parseVerdictStatus(status);
  if (!st) throw std::runtime_error("expectations: unknown status '" + status + "'");
  Verdict x{v.value("name", std::string()),
            v.value("world", std::string()),
            *st,
            v.value("measured", std::string()),
            v.value("threshold", std::string()),
            v.value("message", std::string()),
            v.value("where", std::string()),
            {}};
  const json evidence = v.value("evidence", json::object());  // items() of a temporary dangles
  for (const auto& [k, n] : evidence.items()) {
    x.evidence[k] = n.is_number() ? n.get<double>() : std::nan("");
  }
  return x;
}

EarlierRun earlierFromJson(const json& e) {
  EarlierRun x;
  const std::string verdict = e.value("verdict", std::string("inconclusive"));
  const auto st = parseVerdictStatus(verdict);
  if (!st) throw std::runtime_error("earlier_runs: unknown verdict '" + verdict + "'");
  x.verdict = *st;
  x.inconclusive = e.value("inconclusive", std::vector<std::string>());
  return x;
}

}  // namespace

Report reportFromJson(const json& doc) {
  if (!doc.is_object() || doc.value("schema", std::string()) != kReportSchema) {
    throw std::runtime_error("not a multiworld chaos report (schema is not '" +
                             std::string(kReportSchema) + "')");
  }
  Report rep;
  rep.scenario = scenarioFromJson(need(doc, "scenario", "report"), &rep.timeline);
  rep.run = runFromJson(need(doc, "run", "report"));
  const std::string outcome = doc.value("outcome", std::string("completed"));
  const auto o = parseOutcome(outcome);
  if (!o) throw std::runtime_error("outcome: unknown outcome '" + outcome + "'");
  rep.outcome = *o;
  rep.why = doc.value("why", std::string());
  rep.environment = doc.value("environment", json::object());
  for (const auto& v : doc.value("expectations", json::array())) {
    rep.verdicts.push_back(verdictFromJson(v));
  }
  if (doc.contains("earlier_runs")) {
    rep.earlier_runs.emplace();
    for (const auto& e : doc["earlier_runs"]) rep.earlier_runs->push_back(earlierFromJson(e));
  }
  return rep;
}

}  // namespace mw::harness
