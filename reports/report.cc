#include "reports/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "reports/xml.h"

namespace mw::reports {

using json = nlohmann::json;
using harness::EventRec;
using harness::FaultRec;
using harness::RunRecord;
using harness::Scenario;
using harness::Verdict;
using harness::WindowRec;

namespace {

double r3(double v) { return std::round(v * 1000.0) / 1000.0; }
double r6(double v) { return std::round(v * 1e6) / 1e6; }

const json& need(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw std::runtime_error(where + ": missing field '" + key + "'");
  }
  return j.at(key);
}

}  // namespace

// The value of a parsed field, or an error naming it.
template <class T>
T known(Result<T> r, const std::string& field) {
  if (!r.ok()) throw std::runtime_error(field + ": " + r.status().message());
  return *r;
}

json runJson(const Scenario& s, const RunRecord& r) {
  json run;
  run["duration_s"] = r.duration;
  run["elapsed_s"] = r3(r.elapsed);
  run["startup_s"] = r3(r.startup);
  run["interrupted"] = r.interrupted;
  run["harness_cpu_s"] = r3(r.harness_cpu);
  run["workers_cpu_s"] = r3(r.workers_cpu);
  run["harness_errors"] = r.harness_errors;
  run["leftover_processes"] = r.leftover_processes;
  run["leftover_namespaces"] = r.leftover_namespaces;
  run["leftover_files"] = r.leftover_files;
  run["faults"] = json::array();
  for (const auto& f : r.faults) {
    run["faults"].push_back({{"action", f.action},
                             {"kind", harness::faultKindName(f.kind)},
                             {"role", f.role},
                             {"where", f.where},
                             {"planned_s", r3(f.planned)},
                             {"sent_s", r3(f.sent)},
                             {"acked_s", r3(f.acked)},
                             {"outcome", f.outcomeText()},
                             {"note", f.note},
                             {"worlds", f.worlds},
                             {"ends_role", f.ends_role},
                             {"gone_s", r3(f.gone)}});
  }
  run["events"] = json::array();
  for (const auto& e : r.events) {
    run["events"].push_back({{"t_s", r3(e.t)},
                             {"role", e.role},
                             {"world", e.world},
                             {"kind", harness::eventKindText(e.kind)},
                             {"generation", e.generation},
                             {"cause", e.cause == Cause::kNone ? "" : causeName(e.cause)},
                             {"peer", e.peer},
                             {"detail", e.detail},
                             {"in_run", r.inRun(e.t)}});
  }
  run["workers"] = json::array();
  for (const auto& w : r.workers) {
    run["workers"].push_back({{"role", w.role},
                              {"pid", w.pid},
                              {"starts", w.starts},
                              {"exit", w.exit},
                              {"hung", w.hung},
                              {"killed_by_scenario", w.killed_by_scenario},
                              {"stderr_tail", w.stderr_tail},
                              {"stdout_tail", w.stdout_tail}});
  }
  // Per world, per role: columns of 100 ms windows (t is the window's end).
  json series = json::object();
  for (const auto& [world, roles] : r.windows) {
    for (const auto& [role, ws] : roles) {
      json col = {{"t_s", json::array()},        {"generation", json::array()},
                  {"bytes", json::array()},      {"ops", json::array()},
                  {"lat_sum_ns", json::array()}, {"lat_max_ns", json::array()}};
      for (const auto& w : ws) {
        col["t_s"].push_back(r3(w.t));
        col["generation"].push_back(w.generation);
        col["bytes"].push_back(w.bytes);
        col["ops"].push_back(w.ops);
        col["lat_sum_ns"].push_back(w.lat_sum_ns);
        col["lat_max_ns"].push_back(w.lat_max_ns);
      }
      series[world][role] = col;
    }
  }
  run["series"] = series;
  // Per role: its worker process's CPU and run-queue wait per 100 ms window; and the machine's
  // busy CPU-seconds since the start (load from outside the scenario is the difference).
  json cpu = json::object();
  for (const auto& [role, ws] : r.cpu) {
    json col = {{"t_s", json::array()}, {"cpu_s", json::array()}, {"wait_s", json::array()}};
    for (const auto& w : ws) {
      col["t_s"].push_back(r3(w.t));
      col["cpu_s"].push_back(r6(w.cpu));
      col["wait_s"].push_back(r6(w.wait));
    }
    cpu[role] = col;
  }
  run["cpu"] = cpu;
  json machine = {{"cpus", r.machine_cpus}, {"t_s", json::array()}, {"busy_s", json::array()}};
  for (const auto& m : r.machine) {
    machine["t_s"].push_back(r3(m.t));
    machine["busy_s"].push_back(r3(m.busy));
  }
  run["machine"] = machine;
  // A summary per world that hooks and readers can use without the raw series.
  json worlds = json::object();
  const double ff = harness::firstFault(r);
  const double warm = static_cast<double>(s.warmup.count()) / 1000.0;
  for (const auto& [name, w] : s.worlds) {
    json wj;
    wj["backend"] = backendName(w.backend);
    wj["members"] = s.membersOf(name);
    double broken_at = -1;
    for (const auto& e : r.events) {
      if (e.world == name && e.kind == harness::EventKind::kBroken && e.t >= 0 &&
          e.t <= r.elapsed && (broken_at < 0 || e.t < broken_at)) {
        broken_at = e.t;
      }
    }
    wj["broken"] = broken_at >= 0;
    wj["broken_at_s"] = r3(broken_at);
    auto before = harness::throughputBetween(s, r, name, warm, ff >= 0 ? ff : r.elapsed);
    auto after = harness::throughputBetween(s, r, name, ff >= 0 ? ff : r.elapsed, r.elapsed);
    wj["bytes_per_s_before"] = before.mean;
    wj["bytes_per_s_after"] = after.mean;
    worlds[name] = wj;
  }
  run["worlds"] = worlds;
  run["first_fault_s"] = r3(ff);
  return run;
}

json reportJson(const Scenario& s, const RunRecord& r, const std::vector<Verdict>& verdicts,
                const std::string& outcome, const std::string& why, const json& environment) {
  json doc;
  doc["schema"] = kSchema;
  json sc;
  sc["name"] = s.name;
  sc["file"] = s.file;
  sc["description"] = s.description;
  sc["duration_s"] = static_cast<double>(s.duration.count()) / 1000.0;
  sc["warmup_s"] = static_cast<double>(s.warmup.count()) / 1000.0;
  sc["seed"] = s.seed;
  sc["nemesis"] = s.nemesis.enabled;
  for (const auto& [name, w] : s.worlds) {
    sc["worlds"][name] = {{"backend", backendName(w.backend)},
                          {"size", w.size},
                          {"heartbeat_ms", w.heartbeat.count()},
                          {"op_timeout_ms", w.op_timeout.count()},
                          {"rejoin", w.rejoin},
                          {"start", w.start},
                          {"where", w.where}};
  }
  for (const auto& [name, role] : s.roles) {
    sc["roles"][name] = {{"worlds", role.ranks}, {"device", role.device}};
    if (role.isProgram()) sc["roles"][name]["program"] = role.program;  // as written
  }
  sc["traffic"] = json::array();
  for (const auto& t : s.traffic) {
    sc["traffic"].push_back({{"pattern", chaos::trafficPatternName(t.pattern)},
                             {"worlds", t.worlds},
                             {"bytes", t.bytes},
                             {"dtype", dtypeName(t.dtype)},
                             {"rate", t.rate},
                             {"root", t.root}});
  }
  // The planned timeline: the same seed and file give the same one.
  sc["timeline"] = json::array();
  for (const auto& a : s.timeline) {
    sc["timeline"].push_back({{"at_ms", a.at.count()},
                              {"action", a.describe()},
                              {"kind", harness::faultKindName(a.kind())},
                              {"role", a.role()},
                              {"where", a.where}});
  }
  json ex;
  const auto& e = s.expect;
  if (e.has_broken) ex["broken"] = e.broken;
  if (e.detected_within) ex["detected_within_ms"] = e.detected_within->count();
  for (const auto& [w, v] : e.detected_within_world) ex["detected_within_world_ms"][w] = v.count();
  for (const auto& t : e.throughput) {
    ex["throughput"].push_back({{"world", t.world},
                                {"metric", t.metric},
                                {"role", t.role},
                                {"ratio", t.ratio},
                                {"window", t.window},
                                {"where", t.where}});
  }
  if (e.replacement_within) ex["replacement_within_ms"] = e.replacement_within->count();
  ex["no_hang"] = e.no_hang;
  ex["no_orphans"] = e.no_orphans;
  ex["has_check"] = e.has_check;
  ex["where"] = e.where;
  sc["expect"] = ex;
  doc["scenario"] = sc;
  doc["environment"] = environment;
  doc["outcome"] = outcome;
  doc["why"] = why;
  doc["run"] = runJson(s, r);
  doc["expectations"] = json::array();
  for (const auto& v : verdicts) {
    json x = {{"name", v.name},
              {"world", v.world},
              {"status", harness::verdictStatusName(v.status)},
              {"measured", v.measured},
              {"threshold", v.threshold},
              {"message", v.message},
              {"where", v.where}};
    if (!v.evidence.empty()) {
      json ev = json::object();
      for (const auto& [k, n] : v.evidence) ev[k] = std::isfinite(n) ? json(r6(n)) : json(nullptr);
      x["evidence"] = ev;
    }
    doc["expectations"].push_back(x);
  }
  std::string verdict = harness::verdictStatusName(harness::overall(verdicts));
  if (outcome == "unavailable") verdict = "skipped";
  if (outcome == "harness_error" || outcome == "interrupted") verdict = "error";
  doc["verdict"] = verdict;
  return doc;
}

std::string verdictOf(const json& report) { return report.value("verdict", std::string("error")); }

Scenario scenarioFromJson(const json& doc) {
  if (doc.value("schema", std::string()) != kSchema) {
    throw std::runtime_error("not a multiworld chaos report (schema is not '" +
                             std::string(kSchema) + "')");
  }
  const json& sc = need(doc, "scenario", "report");
  Scenario s;
  s.name = need(sc, "name", "scenario").get<std::string>();
  s.file = sc.value("file", std::string());
  s.description = sc.value("description", std::string());
  s.duration =
      harness::Ms(static_cast<long long>(need(sc, "duration_s", "scenario").get<double>() * 1000));
  s.warmup = harness::Ms(static_cast<long long>(sc.value("warmup_s", 1.0) * 1000));
  s.seed = sc.value("seed", 1ULL);
  s.nemesis.enabled = sc.value("nemesis", false);
  for (auto it = need(sc, "worlds", "scenario").begin(); it != sc.at("worlds").end(); ++it) {
    harness::WorldSpec w;
    w.name = it.key();
    w.backend = known(parseBackend(it.value().value("backend", std::string("gloo"))),
                      "scenario.worlds." + w.name + ".backend");
    w.size = it.value().value("size", 0);
    w.heartbeat = harness::Ms(it.value().value("heartbeat_ms", 1000LL));
    w.where = it.value().value("where", std::string());
    s.worlds[w.name] = w;
  }
  for (auto it = need(sc, "roles", "scenario").begin(); it != sc.at("roles").end(); ++it) {
    harness::RoleSpec r;
    r.name = it.key();
    r.ranks = it.value().at("worlds").get<std::map<std::string, int>>();
    r.program = it.value().value("program", std::vector<std::string>());
    s.roles[r.name] = r;
  }
  for (const auto& t : sc.value("traffic", json::array())) {
    harness::TrafficSpec ts;
    const std::string pattern = t.value("pattern", std::string());
    const auto p = chaos::parseTrafficPattern(pattern);
    if (!p) throw std::runtime_error("scenario.traffic: unknown pattern '" + pattern + "'");
    ts.pattern = *p;
    ts.worlds = t.value("worlds", std::vector<std::string>());
    s.traffic.push_back(ts);
  }
  const json& ex = need(sc, "expect", "scenario");
  auto& e = s.expect;
  e.where = ex.value("where", std::string());
  if (ex.contains("broken")) {
    e.has_broken = true;
    for (const auto& b : ex["broken"]) e.broken.insert(b.get<std::string>());
  }
  if (ex.contains("detected_within_ms"))
    e.detected_within = harness::Ms(ex["detected_within_ms"].get<long long>());
  if (ex.contains("detected_within_world_ms")) {
    for (auto it = ex["detected_within_world_ms"].begin();
         it != ex["detected_within_world_ms"].end(); ++it) {
      e.detected_within_world[it.key()] = harness::Ms(it.value().get<long long>());
    }
  }
  for (const auto& t : ex.value("throughput", json::array())) {
    harness::ThroughputSpec ts;
    ts.world = t.at("world").get<std::string>();
    ts.metric = t.value("metric", std::string());
    ts.role = t.value("role", std::string());
    ts.ratio = t.at("ratio").get<double>();
    ts.window = t.value("window", std::string("after"));
    ts.where = t.value("where", std::string());
    e.throughput.push_back(ts);
  }
  if (ex.contains("replacement_within_ms")) {
    e.replacement_within = harness::Ms(ex["replacement_within_ms"].get<long long>());
  }
  e.no_hang = ex.value("no_hang", true);
  e.no_orphans = ex.value("no_orphans", true);
  e.has_check = ex.value("has_check", false);
  return s;
}

RunRecord runFromJson(const json& doc) {
  const json& run = need(doc, "run", "report");
  RunRecord r;
  r.duration = run.value("duration_s", 0.0);
  r.elapsed = run.value("elapsed_s", 0.0);
  r.startup = run.value("startup_s", 0.0);
  r.interrupted = run.value("interrupted", false);
  r.harness_cpu = run.value("harness_cpu_s", 0.0);
  r.workers_cpu = run.value("workers_cpu_s", 0.0);
  r.harness_errors = run.value("harness_errors", std::vector<std::string>());
  r.leftover_processes = run.value("leftover_processes", 0);
  r.leftover_namespaces = run.value("leftover_namespaces", 0);
  r.leftover_files = run.value("leftover_files", std::vector<std::string>());
  for (const auto& f : run.value("faults", json::array())) {
    FaultRec x;
    x.action = f.value("action", std::string());
    const std::string kind = f.value("kind", std::string());
    const auto fk = harness::parseFaultKind(kind);
    if (!fk) throw std::runtime_error("run.faults: unknown fault kind '" + kind + "'");
    x.kind = *fk;
    x.role = f.value("role", std::string());
    x.where = f.value("where", std::string());
    x.planned = f.value("planned_s", 0.0);
    x.sent = f.value("sent_s", -1.0);
    x.acked = f.value("acked_s", -1.0);
    const std::string outcome = f.value("outcome", std::string("pending"));
    if (!x.setOutcome(outcome))
      throw std::runtime_error("run.faults: unknown fault outcome '" + outcome + "'");
    x.note = f.value("note", std::string());
    x.worlds = f.value("worlds", std::vector<std::string>());
    // Reports written before the field existed are judged by the rule the harness used then: a
    // restart, or a kill with any signal but SIGSTOP, SIGCONT, SIGUSR* and SIGHUP.
    const bool legacy_end =
        x.kind == harness::FaultKind::kRestart ||
        (x.kind == harness::FaultKind::kKill && x.action.find("SIGSTOP") == std::string::npos &&
         x.action.find("SIGCONT") == std::string::npos &&
         x.action.find("SIGUSR") == std::string::npos &&
         x.action.find("SIGHUP") == std::string::npos);
    x.ends_role = f.value("ends_role", legacy_end);
    x.gone = f.value("gone_s", -1.0);
    r.faults.push_back(x);
  }
  for (const auto& e : run.value("events", json::array())) {
    EventRec x;
    x.t = e.value("t_s", 0.0);
    x.role = e.value("role", std::string());
    x.world = e.value("world", std::string());
    const std::string kind = e.value("kind", std::string());
    const auto ek = harness::parseEventKindText(kind);
    if (!ek) throw std::runtime_error("run.events: unknown event kind '" + kind + "'");
    x.kind = *ek;
    x.generation = e.value("generation", 0ULL);
    const std::string cause = e.value("cause", std::string());
    if (!cause.empty()) x.cause = known(parseCause(cause), "run.events: cause");
    x.peer = e.value("peer", -1);
    x.detail = e.value("detail", std::string());
    r.events.push_back(x);
  }
  for (const auto& w : run.value("workers", json::array())) {
    harness::WorkerRec x;
    x.role = w.value("role", std::string());
    x.pid = w.value("pid", 0);
    x.starts = w.value("starts", 0);
    x.exit = w.value("exit", std::string());
    x.hung = w.value("hung", false);
    x.killed_by_scenario = w.value("killed_by_scenario", false);
    x.stderr_tail = w.value("stderr_tail", std::string());
    x.stdout_tail = w.value("stdout_tail", std::string());
    r.workers.push_back(x);
  }
  const json series = run.value("series", json::object());
  for (auto wit = series.begin(); wit != series.end(); ++wit) {
    for (auto rit = wit.value().begin(); rit != wit.value().end(); ++rit) {
      const json& c = rit.value();
      const size_t n = c.at("t_s").size();
      auto& out = r.windows[wit.key()][rit.key()];
      for (size_t i = 0; i < n; ++i) {
        WindowRec w;
        w.t = c["t_s"][i].get<double>();
        w.generation = c["generation"][i].get<uint64_t>();
        w.bytes = c["bytes"][i].get<double>();
        w.ops = c["ops"][i].get<double>();
        w.lat_sum_ns = c["lat_sum_ns"][i].get<double>();
        w.lat_max_ns = c["lat_max_ns"][i].get<double>();
        out.push_back(w);
      }
    }
  }
  const json cpu = run.value("cpu", json::object());
  for (auto it = cpu.begin(); it != cpu.end(); ++it) {
    const json& c = it.value();
    auto& out = r.cpu[it.key()];
    for (size_t i = 0; i < c.at("t_s").size(); ++i) {
      out.push_back({c["t_s"][i].get<double>(), c.at("cpu_s")[i].get<double>(),
                     c.at("wait_s")[i].get<double>()});
    }
  }
  const json machine = run.value("machine", json::object());
  r.machine_cpus = machine.value("cpus", 0);
  if (machine.contains("t_s")) {
    for (size_t i = 0; i < machine["t_s"].size(); ++i) {
      r.machine.push_back({machine["t_s"][i].get<double>(), machine.at("busy_s")[i].get<double>()});
    }
  }
  return r;
}

std::vector<Verdict> verdictsFromJson(const json& doc) {
  std::vector<Verdict> out;
  for (const auto& v : doc.value("expectations", json::array())) {
    const std::string status = v.value("status", std::string());
    const auto st = harness::parseVerdictStatus(status);
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
    out.push_back(x);
  }
  return out;
}

std::string junitXml(const std::vector<json>& reports) {
  std::ostringstream o;
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  std::ostringstream suites;
  for (const auto& doc : reports) {
    const json& sc = doc.at("scenario");
    const std::string name = sc.value("name", std::string("scenario"));
    const std::string file = sc.value("file", std::string());
    const std::string outcome = doc.value("outcome", std::string("completed"));
    int t = 0, f = 0, e = 0, s = 0;
    std::ostringstream cases;
    const double time = doc.at("run").value("elapsed_s", 0.0);
    auto testcase = [&](const std::string& case_name, const std::string& status,
                        const std::string& message, const std::string& body) {
      ++t;
      cases << "    <testcase classname=\"" << xmlEscape("mwchaos." + name) << "\" name=\""
            << xmlEscape(case_name) << "\" file=\"" << xmlEscape(file) << "\">\n";
      if (status == "fail") {
        ++f;
        cases << "      <failure message=\"" << xmlEscape(message) << "\" type=\"expectation\">"
              << xmlEscape(body) << "</failure>\n";
      } else if (status == "error") {
        ++e;
        cases << "      <error message=\"" << xmlEscape(message) << "\" type=\"harness\">"
              << xmlEscape(body) << "</error>\n";
      } else if (status == "skipped") {
        ++s;
        cases << "      <skipped message=\"" << xmlEscape(message) << "\"/>\n";
      } else if (status == "inconclusive") {
        // Neither passed nor failed: skipped, so that a JUnit gate does not go red on noise,
        // with the reason (mwchaos itself exits 4; docs/ci.md).
        ++s;
        cases << "      <skipped message=\"" << xmlEscape("inconclusive: " + message) << "\"/>\n";
      }
      cases << "    </testcase>\n";
    };
    const std::string why = doc.value("why", std::string());
    if (outcome == "unavailable") {
      testcase("scenario can run on this machine", "skipped", why, why);
    } else if (outcome == "harness_error" || outcome == "interrupted") {
      testcase("the harness ran the scenario", "error", outcome + ": " + why, why);
    }
    for (const auto& v : doc.value("expectations", json::array())) {
      const std::string status = v.value("status", std::string());
      std::string msg = v.value("message", std::string());
      std::string body = msg + "\nmeasured: " + v.value("measured", std::string()) +
                         "\nthreshold: " + v.value("threshold", std::string()) +
                         "\nat: " + v.value("where", std::string());
      testcase(v.value("name", std::string()), status, msg, body);
    }
    suites << "  <testsuite name=\"" << xmlEscape(name) << "\" tests=\"" << t << "\" failures=\""
           << f << "\" errors=\"" << e << "\" skipped=\"" << s << "\" time=\"" << time << "\">\n"
           << cases.str() << "  </testsuite>\n";
    tests += t, failures += f, errors += e, skipped += s;
  }
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mwchaos\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
    << "\">\n"
    << suites.str() << "</testsuites>\n";
  return o.str();
}

}  // namespace mw::reports
