#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <variant>

#include "chaos/cpu_meter.h"
#include "chaos/fifo_control.h"
#include "chaos/netsim.h"
#include "chaos/ports.h"
#include "chaos/posix_faults.h"
#include "chaos/process.h"
#include "harness/orchestrator_run.h"
#include "multiworld/status.h"
#include "multiworld/store.h"
#include "multiworld/telemetry_lines.h"

namespace mw::harness::orch {

void Run::readAll(Worker& w) {
  if (!w.proc) return;
  // A worker writes the protocol on its stdout; a program role on its telemetry pipe (fd 3),
  // and its stdout is a log like its stderr.
  std::string got, out;
  if (!w.out_eof && !w.proc->readStdout(w.program ? &out : &got)) {
    w.out_eof = true;
    noteGone(w);
  }
  if (!w.tel_eof && !w.proc->readTelemetry(&got)) w.tel_eof = true;
  w.out_buf += got;
  size_t nl;
  while ((nl = w.out_buf.find('\n')) != std::string::npos) {
    std::string line = w.out_buf.substr(0, nl);
    w.out_buf.erase(0, nl + 1);
    handleLine(w, line);
  }
  std::string err;
  if (!w.err_eof && !w.proc->readStderr(&err)) w.err_eof = true;
  if (!out.empty()) {
    if (o_.verbosity >= 2) std::fprintf(stderr, "[%s stdout] %s", w.role.c_str(), out.c_str());
    keepTail(w.out_tail, out);
  }
  if (!err.empty()) {
    if (o_.verbosity >= 2) std::fprintf(stderr, "[%s stderr] %s", w.role.c_str(), err.c_str());
    keepTail(w.err_tail, err);
  }
}

void Run::keepTail(std::string& tail, const std::string& more) {
  tail += more;
  if (tail.size() > kStderrTail) tail.erase(0, tail.size() - kStderrTail);
}

void Run::noteGone(Worker& w) {
  if (w.ending_fault < 0) return;
  FaultRec& f = res_.record.faults[static_cast<size_t>(w.ending_fault)];
  if (f.gone < 0) f.gone = rel(chaos::monoNs());
  w.ending_fault = -1;
}

void Run::handleLine(Worker& w, const std::string& line) {
  if (o_.verbosity >= 2) std::fprintf(stderr, "[%s] %s\n", w.role.c_str(), line.c_str());
  auto parsed = telemetry_lines::parse(line);
  if (!parsed.ok()) {
    res_.record.harness_errors.push_back("role '" + w.role + "' wrote a line that is not " +
                                         "the worker protocol (" + parsed.status().message() +
                                         "): '" + line.substr(0, 200) + "'");
    return;
  }
  std::visit(
      [&](auto& l) {
        // The role's times are its host's steady clock: placed on ours by its agent's offset.
        if constexpr (requires { l.t_ns; }) {
          if (w.proc) l.t_ns = w.proc->connection().toLocal(l.t_ns);
        }
        take(w, l);
      },
      *parsed);
}

void Run::take(Worker& w, const telemetry_lines::Metrics& l) {
  WindowRec r;
  r.t = rel(l.t_ns);
  r.generation = l.generation;
  r.bytes = static_cast<double>(l.bytes);
  r.ops = static_cast<double>(l.ops);
  r.lat_sum_ns = static_cast<double>(l.lat_sum_ns);
  r.lat_max_ns = static_cast<double>(l.lat_max_ns);
  res_.record.windows[l.world][w.role].push_back(r);
  last_bytes_[l.world + "/" + w.role] = r.bytes;
}

void Run::take(Worker& w, const telemetry_lines::App& l) {
  WindowRec r;
  r.t = rel(l.t_ns);
  r.bytes = l.value;
  res_.record.windows[appSeries(l.name)][w.role].push_back(r);
}

void Run::take(Worker& w, const telemetry_lines::Verified& l) {
  CheckedRec& c = res_.record.checked[l.world][w.role];
  c.ops += static_cast<double>(l.ops);
  c.bytes += static_cast<double>(l.bytes);
  c.violations += static_cast<double>(l.violations);
}

void Run::take(Worker& w, const telemetry_lines::Violation& l) {
  ViolationRec v;
  v.t = rel(l.t_ns);
  v.role = w.role;
  v.world = l.world;
  v.generation = l.generation;
  v.op = l.op;
  v.seq = l.seq;
  v.offset = l.offset;
  v.wrong = l.wrong;
  v.expected = l.expected;
  v.found = l.found;
  v.detail = l.detail;
  res_.record.violations.push_back(std::move(v));
}

void Run::take(Worker& w, const telemetry_lines::History& l) {
  // The worker keeps to the limit it was given (WorkerConfig::history); a line past it is not
  // the protocol's, and is dropped rather than let grow the report.
  RoleHistoryRec& h = res_.record.history[w.role];
  if (static_cast<int64_t>(h.ops.size()) >= res_.record.history_limit) return;
  const auto local = [&](int64_t ns) { return w.proc ? w.proc->connection().toLocal(ns) : ns; };
  h.ops.push_back({rel(local(l.start_ns)), rel(local(l.end_ns)), l.world, l.generation, l.op,
                   l.peer, l.seq, l.outcome});
}

void Run::take(Worker& w, const telemetry_lines::HistoryFull& l) {
  RoleHistoryRec& h = res_.record.history[w.role];
  if (!h.full_at) h.full_at = rel(l.t_ns);
}

void Run::take(Worker& w, const telemetry_lines::Check& l) {
  AppCheckRec& c = res_.record.app_checks[w.role][l.name];
  c.passed += static_cast<double>(l.passed);
  if (l.failed > 0 && c.failed == 0) {
    c.first_failure_t = rel(l.t_ns);
    c.first_failure = l.detail;
  }
  c.failed += static_cast<double>(l.failed);
}

void Run::take(Worker& w, const telemetry_lines::Cpu& l) {
  res_.record.cpu[w.role].push_back(
      {rel(l.t_ns), static_cast<double>(l.cpu_ns) / 1e9, static_cast<double>(l.wait_ns) / 1e9});
}

void Run::take(Worker& w, const telemetry_lines::Event& l) {
  EventRec e;
  e.t = rel(l.t_ns);
  e.role = w.role;
  e.world = l.world;
  e.kind = eventKindOf(l.kind);
  e.generation = l.generation;
  e.cause = l.cause;
  e.peer = l.peer;
  e.detail = l.detail;
  res_.record.events.push_back(e);
  state_[e.world + "/" + w.role] = e.kind;
  if (w.program && e.kind == EventKind::kCreated) checkJoinedWith(w, l);
}

void Run::checkJoinedWith(const Worker& w, const telemetry_lines::Event& l) {
  auto ws = s_.worlds.find(l.world);
  if (ws == s_.worlds.end()) return;
  const auto differ = optionMismatches(ws->second, deviceIn(w.role, ws->second), l.detail);
  if (differ.empty()) return;
  std::string what;
  for (const auto& d : differ) what += (what.empty() ? "" : "; ") + d;
  // No verdict may be computed on timeouts the program did not use: the run ends here.
  fail(Outcome::kHarnessError,
       "role '" + w.role + "' joined world '" + l.world + "' with other options than the " +
           "scenario declares (" + ws->second.where + "): " + what + ". Pass the world's " +
           "options to the program with placeholders such as ${world." + l.world +
           ".heartbeat_ms} (docs/scenarios.md, \"Program roles\")");
}

void Run::take(Worker& w, const telemetry_lines::JoinFail& l) {
  EventRec e;
  e.t = rel(l.t_ns);
  e.role = w.role;
  e.world = l.world;
  e.kind = EventKind::kJoinFailed;
  e.detail = l.status;
  res_.record.events.push_back(e);
}

void Run::take(Worker& w, const telemetry_lines::Fifo& l) {
  if (l.path.empty()) {
    w.fifo_unavailable = true;
    return;
  }
  const int ms = static_cast<int>(std::chrono::milliseconds(kFifoLimit).count());
  Status st = agentOfRole(w.role)
                  .call(agent::FifoOpen{w.role, l.path, ms}, std::chrono::milliseconds(ms) + 1s)
                  .status();
  if (!st.ok()) {
    res_.record.harness_errors.push_back("role '" + w.role + "': " + st.message());
  } else {
    w.fifo_open = true;
  }
}

void Run::take(Worker& w, const telemetry_lines::Error& l) {
  if (l.message.rfind("unavailable", 0) == 0 && !w.ready) {
    fail(Outcome::kUnavailable, "role '" + w.role + "': " + l.message);
  } else {
    res_.record.harness_errors.push_back("role '" + w.role + "': " + l.message);
  }
}

void Run::pump(int ms) {
  std::vector<pollfd> fds;
  for (auto& [host, a] : agents_) {
    if (a->alive()) fds.push_back({a->fd(), POLLIN, 0});
  }
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), ms);
  else
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  for (auto& [host, a] : agents_) {
    if (a->alive()) a->pump();
    // Lost here or inside a request: the run ends as the harness's error, said once.
    if (!a->alive() && lost_agents_.insert(host).second && !ended_steps_.count(host)) {
      fail(Outcome::kHarnessError, "lost a host agent: " + a->error());
    }
  }
  for (auto& [role, w] : workers_) readAll(w);
}

std::string Run::lastOutput(const Worker& w) {
  if (!w.program || w.out_tail.empty()) return lastLines(w.err_tail);
  return "stderr: " + lastLines(w.err_tail) + "; stdout: " + lastLines(w.out_tail);
}

std::string Run::lastLines(const std::string& s) {
  std::string t = s.size() > 600 ? s.substr(s.size() - 600) : s;
  for (char& c : t) {
    if (c == '\n') c = ' ';
  }
  return t.empty() ? "(no output)" : t;
}

void Run::progress(bool final_line) {
  if (o_.verbosity < 1) return;
  const double t = rel(chaos::monoNs());
  int healthy = 0, broken = 0;
  double rate = 0;
  for (const auto& [name, ws] : s_.worlds) {
    bool any_broken = false;
    for (const auto& role : s_.membersOf(name)) {
      auto it = state_.find(name + "/" + role);
      if (it != state_.end() && it->second == EventKind::kBroken) any_broken = true;
    }
    any_broken ? ++broken : ++healthy;
    auto members = s_.membersOf(name);
    if (!members.empty()) {
      auto it = last_bytes_.find(name + "/" + members[0]);
      if (it != last_bytes_.end()) rate += it->second * 10;  // 100 ms windows
    }
  }
  char line[256];
  std::snprintf(line, sizeof(line), "[%5.1f/%.1fs] %s: worlds healthy %d, broken %d | %.2f GB/s",
                std::min(t, res_.record.duration), res_.record.duration, s_.name.c_str(), healthy,
                broken, rate / 1e9);
  if (o_.tty) {
    std::fprintf(stderr, "\r\033[K%s%s", line, final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void Run::sampleMachine() {
  const long long now = chaos::monoNs();
  if (now < next_machine_ns_) return;
  next_machine_ns_ = now + 100000000LL;
  // Program roles write no `cpu` lines: their agents meter their processes, in the same windows.
  std::set<std::string> metered;  // hosts with a program role running
  for (auto& [role, w] : workers_) {
    if (w.program && w.proc && !w.proc->reaped()) metered.insert(s_.roles.at(role).host);
  }
  for (const auto& host : metered) {
    auto it = agents_.find(agents_.count(host) ? host : "");
    if (it == agents_.end()) continue;
    auto r = it->second->call(agent::Sample{});
    if (!r.ok()) continue;
    for (const auto& use : r->cpu) {
      auto w = workers_.find(use.role);
      if (w == workers_.end()) continue;
      take(w->second, telemetry_lines::Cpu{now, use.cpu_ns, use.wait_ns});
    }
  }
  const double busy = chaos::machineBusySeconds();
  if (busy < 0) return;
  if (machine_base_ < 0) machine_base_ = busy;
  res_.record.machine.push_back({rel(now), busy - machine_base_});
}

}  // namespace mw::harness::orch
