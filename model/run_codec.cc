// The run section of a report (model/report.h): the record's faults, events, workers, series of
// windows, CPU samples and a summary per world, and reading them back.
#include <cmath>
#include <stdexcept>

#include "model/json_fields.h"
#include "model/report.h"

namespace mw::harness {

using json = nlohmann::json;
using json_fields::column;
using json_fields::known;
using json_fields::need;

namespace {

// An element's value as the report holds it: a number, or "nan", "inf", "-inf" (a corrupted
// element may hold any bits; JSON has no such numbers).
json valueJson(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}
double valueOf(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j == "nan") return std::nan("");
  if (j == "inf") return HUGE_VAL;
  if (j == "-inf") return -HUGE_VAL;
  throw std::runtime_error(where + ": expected a number, \"nan\", \"inf\" or \"-inf\"");
}

// The history's operation columns, in the order each operation's array holds them.
const char* const kHistoryColumns[] = {"start_s", "end_s", "world", "generation",
                                       "op",      "peer",  "seq",   "outcome"};

json historyJson(const RunRecord& r) {
  json roles = json::object();
  for (const auto& [role, h] : r.history) {
    json ops = json::array();
    for (const auto& o : h.ops) {
      ops.push_back(
          {round6(o.start), round6(o.end), o.world, o.generation, o.op, o.peer, o.seq, o.outcome});
    }
    roles[role] = {{"ops", std::move(ops)},
                   {"full_at_s", h.full_at ? json(round6(*h.full_at)) : json(nullptr)}};
  }
  return {{"limit", r.history_limit}, {"columns", kHistoryColumns}, {"roles", std::move(roles)}};
}

void readHistory(const json& j, RunRecord& r) {
  if (!j.is_object()) throw std::runtime_error("run.history: not an object");
  r.history_limit = need(j, "limit", "run.history").get<int64_t>();
  const json& roles = need(j, "roles", "run.history");
  if (!roles.is_object()) throw std::runtime_error("run.history.roles: not an object of roles");
  for (auto it = roles.begin(); it != roles.end(); ++it) {
    const std::string where = "run.history.roles." + it.key();
    RoleHistoryRec h;
    const json& ops = need(it.value(), "ops", where);
    if (!ops.is_array()) throw std::runtime_error(where + ".ops: not an array");
    for (size_t i = 0; i < ops.size(); ++i) {
      const json& o = ops[i];
      if (!o.is_array() || o.size() != std::size(kHistoryColumns)) {
        throw std::runtime_error(where + ".ops[" + std::to_string(i) + "]: not an array of " +
                                 std::to_string(std::size(kHistoryColumns)) + " columns");
      }
      try {
        h.ops.push_back({o[0].get<double>(), o[1].get<double>(), o[2].get<std::string>(),
                         o[3].get<uint64_t>(), o[4].get<std::string>(), o[5].get<int>(),
                         o[6].get<uint64_t>(), o[7].get<std::string>()});
      } catch (const json::exception& e) {
        throw std::runtime_error(where + ".ops[" + std::to_string(i) + "]: " + e.what());
      }
    }
    const json full = it.value().value("full_at_s", json(nullptr));
    if (!full.is_null()) h.full_at = full.get<double>();
    r.history[it.key()] = std::move(h);
  }
}

}  // namespace

json runJson(const Scenario& s, const RunRecord& r) {
  json run;
  run["duration_s"] = r.duration;
  run["elapsed_s"] = round3(r.elapsed);
  run["startup_s"] = round3(r.startup);
  run["interrupted"] = r.interrupted;
  run["harness_cpu_s"] = round3(r.harness_cpu);
  run["workers_cpu_s"] = round3(r.workers_cpu);
  run["harness_errors"] = r.harness_errors;
  run["leftover_processes"] = r.leftover_processes;
  run["leftover_namespaces"] = r.leftover_namespaces;
  run["leftover_files"] = r.leftover_files;
  if (!r.hosts.empty()) {  // (reports of runs before host agents have none)
    run["hosts"] = json::array();
    for (const auto& h : r.hosts) {
      run["hosts"].push_back({{"name", h.name},
                              {"launcher", h.launcher},
                              {"node", h.node},
                              {"address", h.address},
                              {"same_clock", h.same_clock},
                              {"offset_ms", round3(h.offset_ms)},
                              {"uncertainty_ms", round3(h.uncertainty_ms)},
                              {"rtt_ms", round3(h.rtt_ms)}});
    }
  }
  run["faults"] = json::array();
  for (const auto& f : r.faults) {
    run["faults"].push_back({{"action", f.action},
                             {"kind", faultKindName(f.kind)},
                             {"role", f.role},
                             {"where", f.where},
                             {"planned_s", round3(f.planned)},
                             {"sent_s", round3(f.sent)},
                             {"acked_s", round3(f.acked)},
                             {"outcome", f.outcomeText()},
                             {"note", f.note},
                             {"worlds", f.worlds},
                             {"ends_role", f.ends_role},
                             {"gone_s", round3(f.gone)}});
  }
  run["events"] = json::array();
  for (const auto& e : r.events) {
    run["events"].push_back({{"t_s", round3(e.t)},
                             {"role", e.role},
                             {"world", e.world},
                             {"kind", eventKindText(e.kind)},
                             {"generation", e.generation},
                             {"cause", e.cause == Cause::kNone ? "" : causeName(e.cause)},
                             {"peer", e.peer},
                             {"detail", e.detail},
                             {"in_run", r.inRun(e.t)}});
  }
  // The built-in traffic's checks (expect.data_intact): each violation, and per world and role
  // what was checked. (Not in a report from before them, read back and written again.)
  if (s.expect.checks_recorded) {
    run["violations"] = json::array();
    for (const auto& v : r.violations) {
      run["violations"].push_back({{"t_s", round3(v.t)},
                                   {"role", v.role},
                                   {"world", v.world},
                                   {"generation", v.generation},
                                   {"op", v.op},
                                   {"seq", v.seq},
                                   {"offset", v.offset},
                                   {"wrong", v.wrong},
                                   {"expected", valueJson(v.expected)},
                                   {"found", valueJson(v.found)},
                                   {"detail", v.detail}});
    }
    json checked = json::object();
    for (const auto& [world, roles] : r.checked) {
      for (const auto& [role, c] : roles) {
        checked[world][role] = {{"ops", c.ops}, {"bytes", c.bytes}, {"violations", c.violations}};
      }
    }
    run["checked"] = checked;
    json app = json::object();
    for (const auto& [role, checks] : r.app_checks) {
      for (const auto& [name, c] : checks) {
        app[role][name] = {{"passed", c.passed},
                           {"failed", c.failed},
                           {"first_failure_t_s", round3(c.first_failure_t)},
                           {"first_failure", c.first_failure}};
      }
    }
    run["app_checks"] = app;
  }
  // The operation history (mwchaos run --history): only in a report whose run kept one.
  if (r.history_limit > 0) run["history"] = historyJson(r);
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
        col["t_s"].push_back(round3(w.t));
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
      col["t_s"].push_back(round3(w.t));
      col["cpu_s"].push_back(round6(w.cpu));
      col["wait_s"].push_back(round6(w.wait));
    }
    cpu[role] = col;
  }
  run["cpu"] = cpu;
  json machine = {{"cpus", r.machine_cpus}, {"t_s", json::array()}, {"busy_s", json::array()}};
  for (const auto& m : r.machine) {
    machine["t_s"].push_back(round3(m.t));
    machine["busy_s"].push_back(round3(m.busy));
  }
  run["machine"] = machine;
  // A summary per world that hooks and readers can use without the raw series.
  json worlds = json::object();
  const double ff = firstFault(r);
  const double warm = static_cast<double>(s.warmup.count()) / 1000.0;
  for (const auto& [name, w] : s.worlds) {
    json wj;
    wj["backend"] = backendName(w.backend);
    wj["members"] = s.membersOf(name);
    double broken_at = -1;
    for (const auto& e : r.events) {
      if (e.world == name && e.kind == EventKind::kBroken && e.t >= 0 && e.t <= r.elapsed &&
          (broken_at < 0 || e.t < broken_at)) {
        broken_at = e.t;
      }
    }
    wj["broken"] = broken_at >= 0;
    wj["broken_at_s"] = round3(broken_at);
    auto before = throughputBetween(s, r, name, warm, ff >= 0 ? ff : r.elapsed);
    auto after = throughputBetween(s, r, name, ff >= 0 ? ff : r.elapsed, r.elapsed);
    wj["bytes_per_s_before"] = before.mean;
    wj["bytes_per_s_after"] = after.mean;
    worlds[name] = wj;
  }
  run["worlds"] = worlds;
  run["first_fault_s"] = round3(ff);
  return run;
}

RunRecord runFromJson(const json& run) {
  if (!run.is_object()) throw std::runtime_error("report: the run section is not an object");
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
  for (const auto& h : run.value("hosts", json::array())) {
    HostRec x;
    x.name = need(h, "name", "run.hosts").get<std::string>();
    x.launcher = h.value("launcher", std::string());
    x.node = h.value("node", std::string());
    x.address = h.value("address", std::string());
    x.same_clock = h.value("same_clock", false);
    x.offset_ms = h.value("offset_ms", 0.0);
    x.uncertainty_ms = h.value("uncertainty_ms", 0.0);
    x.rtt_ms = h.value("rtt_ms", 0.0);
    r.hosts.push_back(std::move(x));
  }
  for (const auto& f : run.value("faults", json::array())) {
    FaultRec x;
    x.action = f.value("action", std::string());
    const std::string kind = f.value("kind", std::string());
    const auto fk = parseFaultKind(kind);
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
        x.kind == FaultKind::kRestart ||
        (x.kind == FaultKind::kKill && x.action.find("SIGSTOP") == std::string::npos &&
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
    const auto ek = parseEventKindText(kind);
    if (!ek) throw std::runtime_error("run.events: unknown event kind '" + kind + "'");
    x.kind = *ek;
    x.generation = e.value("generation", 0ULL);
    const std::string cause = e.value("cause", std::string());
    if (!cause.empty()) x.cause = known(parseCause(cause), "run.events: cause");
    x.peer = e.value("peer", -1);
    x.detail = e.value("detail", std::string());
    r.events.push_back(x);
  }
  for (const auto& v : run.value("violations", json::array())) {
    ViolationRec x;
    x.t = need(v, "t_s", "run.violations").get<double>();
    x.role = v.value("role", std::string());
    x.world = v.value("world", std::string());
    x.generation = v.value("generation", 0ULL);
    x.op = v.value("op", std::string());
    x.seq = v.value("seq", 0ULL);
    x.offset = v.value("offset", 0ULL);
    x.wrong = v.value("wrong", 0ULL);
    x.expected = valueOf(need(v, "expected", "run.violations"), "run.violations.expected");
    x.found = valueOf(need(v, "found", "run.violations"), "run.violations.found");
    x.detail = v.value("detail", std::string());
    r.violations.push_back(std::move(x));
  }
  if (run.contains("history")) readHistory(run["history"], r);
  const json checked = run.value("checked", json::object());
  for (auto wit = checked.begin(); wit != checked.end(); ++wit) {
    if (!wit.value().is_object()) {
      throw std::runtime_error("run.checked." + wit.key() + ": not an object of roles");
    }
    for (auto rit = wit.value().begin(); rit != wit.value().end(); ++rit) {
      const std::string where = "run.checked." + wit.key() + "." + rit.key();
      CheckedRec c;
      c.ops = need(rit.value(), "ops", where).get<double>();
      c.bytes = need(rit.value(), "bytes", where).get<double>();
      c.violations = need(rit.value(), "violations", where).get<double>();
      r.checked[wit.key()][rit.key()] = c;
    }
  }
  const json app = run.value("app_checks", json::object());
  for (auto rit = app.begin(); rit != app.end(); ++rit) {
    if (!rit.value().is_object()) {
      throw std::runtime_error("run.app_checks." + rit.key() + ": not an object of checks");
    }
    for (auto cit = rit.value().begin(); cit != rit.value().end(); ++cit) {
      const std::string where = "run.app_checks." + rit.key() + "." + cit.key();
      AppCheckRec c;
      c.passed = need(cit.value(), "passed", where).get<double>();
      c.failed = need(cit.value(), "failed", where).get<double>();
      c.first_failure_t = cit.value().value("first_failure_t_s", -1.0);
      c.first_failure = cit.value().value("first_failure", std::string());
      r.app_checks[rit.key()][cit.key()] = c;
    }
  }
  for (const auto& w : run.value("workers", json::array())) {
    WorkerRec x;
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
    if (!wit.value().is_object()) {
      throw std::runtime_error("run.series." + wit.key() + ": not an object of roles");
    }
    for (auto rit = wit.value().begin(); rit != wit.value().end(); ++rit) {
      const json& c = rit.value();
      const std::string where = "run.series." + wit.key() + "." + rit.key();
      const size_t n = need(c, "t_s", where).size();
      const json& t = column(c, "t_s", n, where);
      const json& generation = column(c, "generation", n, where);
      const json& bytes = column(c, "bytes", n, where);
      const json& ops = column(c, "ops", n, where);
      const json& lat_sum = column(c, "lat_sum_ns", n, where);
      const json& lat_max = column(c, "lat_max_ns", n, where);
      auto& out = r.windows[wit.key()][rit.key()];
      for (size_t i = 0; i < n; ++i) {
        WindowRec w;
        w.t = t[i].get<double>();
        w.generation = generation[i].get<uint64_t>();
        w.bytes = bytes[i].get<double>();
        w.ops = ops[i].get<double>();
        w.lat_sum_ns = lat_sum[i].get<double>();
        w.lat_max_ns = lat_max[i].get<double>();
        out.push_back(w);
      }
    }
  }
  const json cpu = run.value("cpu", json::object());
  for (auto it = cpu.begin(); it != cpu.end(); ++it) {
    const json& c = it.value();
    const std::string where = "run.cpu." + it.key();
    const size_t n = need(c, "t_s", where).size();
    const json& t = column(c, "t_s", n, where);
    const json& cpu_s = column(c, "cpu_s", n, where);
    const json& wait_s = column(c, "wait_s", n, where);
    auto& out = r.cpu[it.key()];
    for (size_t i = 0; i < n; ++i) {
      out.push_back({t[i].get<double>(), cpu_s[i].get<double>(), wait_s[i].get<double>()});
    }
  }
  const json machine = run.value("machine", json::object());
  r.machine_cpus = machine.value("cpus", 0);
  if (machine.contains("t_s")) {
    const size_t n = machine["t_s"].size();
    const json& t = column(machine, "t_s", n, "run.machine");
    const json& busy = column(machine, "busy_s", n, "run.machine");
    for (size_t i = 0; i < n; ++i) r.machine.push_back({t[i].get<double>(), busy[i].get<double>()});
  }
  return r;
}

}  // namespace mw::harness
