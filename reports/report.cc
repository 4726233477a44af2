#include "reports/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

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

std::string xmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // XML 1.0 forbids most control characters.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          o += ' ';
        } else {
          o += c;
        }
    }
  }
  return o;
}

const json& need(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw std::runtime_error(where + ": missing field '" + key + "'");
  }
  return j.at(key);
}

}  // namespace

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
                             {"kind", f.kind},
                             {"role", f.role},
                             {"where", f.where},
                             {"planned_s", r3(f.planned)},
                             {"sent_s", r3(f.sent)},
                             {"acked_s", r3(f.acked)},
                             {"outcome", f.outcome},
                             {"note", f.note},
                             {"worlds", f.worlds},
                             {"ends_role", f.ends_role}});
  }
  run["events"] = json::array();
  for (const auto& e : r.events) {
    run["events"].push_back({{"t_s", r3(e.t)},
                             {"role", e.role},
                             {"world", e.world},
                             {"kind", e.kind},
                             {"generation", e.generation},
                             {"cause", e.cause},
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
                              {"stderr_tail", w.stderr_tail}});
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
    wj["backend"] = w.backend;
    wj["members"] = s.membersOf(name);
    double broken_at = -1;
    for (const auto& e : r.events) {
      if (e.world == name && e.kind == "broken" && e.t >= 0 && e.t <= r.elapsed &&
          (broken_at < 0 || e.t < broken_at)) {
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
    sc["worlds"][name] = {{"backend", w.backend},
                          {"size", w.size},
                          {"heartbeat_ms", w.heartbeat.count()},
                          {"op_timeout_ms", w.op_timeout.count()},
                          {"rejoin", w.rejoin},
                          {"start", w.start},
                          {"where", w.where}};
  }
  for (const auto& [name, role] : s.roles) {
    sc["roles"][name] = {{"worlds", role.ranks}, {"device", role.device}};
  }
  sc["traffic"] = json::array();
  for (const auto& t : s.traffic) {
    sc["traffic"].push_back({{"pattern", t.pattern},
                             {"worlds", t.worlds},
                             {"bytes", t.bytes},
                             {"dtype", t.dtype},
                             {"rate", t.rate},
                             {"root", t.root}});
  }
  // The planned timeline: the same seed and file give the same one.
  sc["timeline"] = json::array();
  for (const auto& a : s.timeline) {
    sc["timeline"].push_back({{"at_ms", a.at.count()},
                              {"action", a.describe()},
                              {"kind", a.kind},
                              {"role", a.role},
                              {"where", a.where}});
  }
  json ex;
  const auto& e = s.expect;
  if (e.has_broken) ex["broken"] = e.broken;
  if (e.detected_within) ex["detected_within_ms"] = e.detected_within->count();
  for (const auto& [w, v] : e.detected_within_world) ex["detected_within_world_ms"][w] = v.count();
  for (const auto& t : e.throughput) {
    ex["throughput"].push_back(
        {{"world", t.world}, {"ratio", t.ratio}, {"window", t.window}, {"where", t.where}});
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
    json x = {{"name", v.name},         {"world", v.world},         {"status", v.status},
              {"measured", v.measured}, {"threshold", v.threshold}, {"message", v.message},
              {"where", v.where}};
    if (!v.evidence.empty()) {
      json ev = json::object();
      for (const auto& [k, n] : v.evidence) ev[k] = std::isfinite(n) ? json(r6(n)) : json(nullptr);
      x["evidence"] = ev;
    }
    doc["expectations"].push_back(x);
  }
  std::string verdict = harness::overall(verdicts);
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
    w.backend = it.value().value("backend", std::string("gloo"));
    w.size = it.value().value("size", 0);
    w.heartbeat = harness::Ms(it.value().value("heartbeat_ms", 1000LL));
    w.where = it.value().value("where", std::string());
    s.worlds[w.name] = w;
  }
  for (auto it = need(sc, "roles", "scenario").begin(); it != sc.at("roles").end(); ++it) {
    harness::RoleSpec r;
    r.name = it.key();
    r.ranks = it.value().at("worlds").get<std::map<std::string, int>>();
    s.roles[r.name] = r;
  }
  for (const auto& t : sc.value("traffic", json::array())) {
    harness::TrafficSpec ts;
    ts.pattern = t.value("pattern", std::string());
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
    e.throughput.push_back({t.at("world").get<std::string>(), t.at("ratio").get<double>(),
                            t.value("window", std::string("after")),
                            t.value("where", std::string())});
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
    x.kind = f.value("kind", std::string());
    x.role = f.value("role", std::string());
    x.where = f.value("where", std::string());
    x.planned = f.value("planned_s", 0.0);
    x.sent = f.value("sent_s", -1.0);
    x.acked = f.value("acked_s", -1.0);
    x.outcome = f.value("outcome", std::string());
    x.note = f.value("note", std::string());
    x.worlds = f.value("worlds", std::vector<std::string>());
    // Reports written before the field existed are judged by the rule the harness used then: a
    // restart, or a kill with any signal but SIGSTOP, SIGCONT, SIGUSR* and SIGHUP.
    const bool legacy_end =
        x.kind == "restart" || (x.kind == "kill" && x.action.find("SIGSTOP") == std::string::npos &&
                                x.action.find("SIGCONT") == std::string::npos &&
                                x.action.find("SIGUSR") == std::string::npos &&
                                x.action.find("SIGHUP") == std::string::npos);
    x.ends_role = f.value("ends_role", legacy_end);
    r.faults.push_back(x);
  }
  for (const auto& e : run.value("events", json::array())) {
    EventRec x;
    x.t = e.value("t_s", 0.0);
    x.role = e.value("role", std::string());
    x.world = e.value("world", std::string());
    x.kind = e.value("kind", std::string());
    x.generation = e.value("generation", 0ULL);
    x.cause = e.value("cause", std::string());
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
    Verdict x{v.value("name", std::string()),      v.value("world", std::string()),
              v.value("status", std::string()),    v.value("measured", std::string()),
              v.value("threshold", std::string()), v.value("message", std::string()),
              v.value("where", std::string()),     {}};
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

namespace {

// One world's throughput timeline, measured at its rank-0 member, with fault and break markers.
std::string worldSvg(const json& doc, const std::string& world) {
  const json& run = doc.at("run");
  const json& sc = doc.at("scenario");
  const double duration = std::max(0.5, run.value("elapsed_s", sc.value("duration_s", 1.0)));
  const auto members = sc.at("roles");
  std::string rank0;
  for (auto it = members.begin(); it != members.end(); ++it) {
    const json& ws = it.value().at("worlds");
    if (ws.contains(world) && ws.at(world).get<int>() == 0) rank0 = it.key();
  }
  std::vector<std::pair<double, double>> pts;
  const json series = run.value("series", json::object());
  if (series.contains(world) && series.at(world).contains(rank0)) {
    const json& c = series.at(world).at(rank0);
    for (size_t i = 0; i < c.at("t_s").size(); ++i) {
      double t = c["t_s"][i].get<double>();
      if (t < 0 || t > duration) continue;
      pts.emplace_back(t, c["bytes"][i].get<double>() / 0.1 / 1e6);
    }
  }
  double ymax = 1;
  for (const auto& p : pts) ymax = std::max(ymax, p.second);
  ymax *= 1.1;
  const double W = 900, H = 180, L = 60, R = 10, T = 10, B = 30;
  auto x = [&](double t) { return L + (W - L - R) * t / duration; };
  auto y = [&](double v) { return T + (H - T - B) * (1 - v / ymax); };
  std::ostringstream o;
  char buf[256];
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << " " << H << "\" width=\""
    << W << "\" height=\"" << H << "\" role=\"img\" aria-label=\"throughput of " << xmlEscape(world)
    << "\">\n";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << (W - L - R) << "\" height=\""
    << (H - T - B) << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = ymax * i / 4;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n",
                  L - 4, y(v) + 3, v);
    o << buf;
  }
  for (int i = 0; i <= 10; ++i) {
    double t = duration * i / 10;
    std::snprintf(
        buf, sizeof(buf),
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.1fs</text>\n", x(t),
        H - B + 14, t);
    o << buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<text x=\"12\" y=\"%.1f\" font-size=\"10\" transform=\"rotate(-90 12 %.1f)\" "
                "text-anchor=\"middle\">MB/s at %s</text>\n",
                H / 2, H / 2, xmlEscape(rank0).c_str());
  o << buf;
  if (!pts.empty()) {
    o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (const auto& p : pts) {
      std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", x(p.first), y(p.second));
      o << buf;
    }
    o << "\"/>\n";
  }
  for (const auto& f : run.value("faults", json::array())) {
    double t = f.value("sent_s", -1.0);
    if (t < 0) continue;
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                  "stroke-dasharray=\"4 3\"><title>",
                  x(t), x(t), T, H - B);
    o << buf << xmlEscape(f.value("action", std::string()) + " at " + std::to_string(t) + " s")
      << "</title></line>\n";
  }
  for (const auto& e : run.value("events", json::array())) {
    if (e.value("world", std::string()) != world || e.value("kind", std::string()) != "broken")
      continue;
    double t = e.value("t_s", -1.0);
    if (t < 0 || t > duration) continue;
    std::snprintf(buf, sizeof(buf),
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#ff7f0e\"><title>", x(t),
                  T + 8.0);
    o << buf
      << xmlEscape("broken at " + e.value("role", std::string()) + " (" +
                   e.value("cause", std::string()) + "): " + e.value("detail", std::string()))
      << "</title></circle>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::string html(const json& doc) {
  const json& sc = doc.at("scenario");
  const json& run = doc.at("run");
  const std::string verdict = verdictOf(doc);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    << xmlEscape(sc.value("name", std::string())) << " - mwchaos</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:960px}"
       "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:4px 6px;"
       "font-size:13px;text-align:left;vertical-align:top}"
       ".pass{color:#2ca02c}.fail{color:#d62728}.error{color:#9467bd}.skipped{color:#7f7f7f}."
       "inconclusive{color:#ff7f0e}"
       "h2{margin-top:1.5em}code{background:#f3f3f3}</style></head><body>\n";
  o << "<h1>" << xmlEscape(sc.value("name", std::string())) << " <span class=\"" << verdict << "\">"
    << verdict << "</span></h1>\n";
  o << "<p>" << xmlEscape(sc.value("description", std::string())) << "</p>\n";
  o << "<p><code>" << xmlEscape(sc.value("file", std::string())) << "</code>, seed "
    << sc.value("seed", 0ULL) << ", duration " << sc.value("duration_s", 0.0) << " s, outcome "
    << xmlEscape(doc.value("outcome", std::string()));
  if (!doc.value("why", std::string()).empty())
    o << ": " << xmlEscape(doc.value("why", std::string()));
  o << "</p>\n<h2>Expectations</h2>\n<table><tr><th>expectation</th><th>verdict</th>"
       "<th>measured</th><th>threshold</th><th>detail</th></tr>\n";
  for (const auto& v : doc.value("expectations", json::array())) {
    const std::string st = v.value("status", std::string());
    o << "<tr><td>" << xmlEscape(v.value("name", std::string())) << "</td><td class=\"" << st
      << "\">" << st << "</td><td>" << xmlEscape(v.value("measured", std::string())) << "</td><td>"
      << xmlEscape(v.value("threshold", std::string())) << "</td><td>"
      << xmlEscape(v.value("message", std::string())) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Throughput per world</h2>\n<p>Each line is the world's throughput at its "
       "rank-0 member per 100 ms window; dashed red lines are faults, orange dots breaks (hover "
       "for details).</p>\n";
  for (auto it = sc.at("worlds").begin(); it != sc.at("worlds").end(); ++it) {
    o << "<h3>" << xmlEscape(it.key()) << " <small>("
      << xmlEscape(it.value().value("backend", std::string())) << ", "
      << it.value().value("size", 0) << " members)</small></h3>\n"
      << worldSvg(doc, it.key());
  }
  o << "<h2>Timeline</h2>\n<table><tr><th>planned</th><th>sent</th><th>acknowledged</th>"
       "<th>fault</th><th>outcome</th><th>scenario line</th></tr>\n";
  for (const auto& f : run.value("faults", json::array())) {
    char times[128];
    std::snprintf(times, sizeof(times), "<td>%.3f s</td><td>%.3f s</td><td>%.3f s</td>",
                  f.value("planned_s", 0.0), f.value("sent_s", -1.0), f.value("acked_s", -1.0));
    std::string outcome = f.value("outcome", std::string());
    if (!f.value("note", std::string()).empty())
      outcome += " (" + f.value("note", std::string()) + ")";
    o << "<tr>" << times << "<td>" << xmlEscape(f.value("action", std::string())) << "</td><td>"
      << xmlEscape(outcome) << "</td><td>" << xmlEscape(f.value("where", std::string()))
      << "</td></tr>\n";
  }
  o << "</table>\n<h2>World events</h2>\n<table><tr><th>time</th><th>role</th><th>world</th>"
       "<th>event</th><th>cause</th><th>detail</th></tr>\n";
  for (const auto& e : run.value("events", json::array())) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.3f s", e.value("t_s", 0.0));
    o << "<tr><td>" << t << "</td><td>" << xmlEscape(e.value("role", std::string())) << "</td><td>"
      << xmlEscape(e.value("world", std::string())) << " (gen " << e.value("generation", 0ULL)
      << ")</td><td>" << xmlEscape(e.value("kind", std::string())) << "</td><td>"
      << xmlEscape(e.value("cause", std::string())) << "</td><td>"
      << xmlEscape(e.value("detail", std::string())) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Workers</h2>\n<table><tr><th>role</th><th>pid</th><th>starts</th>"
       "<th>exit</th></tr>\n";
  for (const auto& w : run.value("workers", json::array())) {
    o << "<tr><td>" << xmlEscape(w.value("role", std::string())) << "</td><td>" << w.value("pid", 0)
      << "</td><td>" << w.value("starts", 0) << "</td><td>"
      << xmlEscape(w.value("exit", std::string())) << (w.value("hung", false) ? " (hung)" : "")
      << "</td></tr>\n";
  }
  o << "</table>\n<p>harness CPU " << run.value("harness_cpu_s", 0.0) << " s, workers CPU "
    << run.value("workers_cpu_s", 0.0) << " s, startup " << run.value("startup_s", 0.0)
    << " s.</p>\n</body></html>\n";
  return o.str();
}

}  // namespace mw::reports
