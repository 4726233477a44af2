#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "chaos/overload.h"
#include "chaos/ports.h"
#include "chaos/posix_faults.h"
#include "chaos/process.h"
#include "harness/orchestrator_run.h"
#include "multiworld/status.h"
#include "multiworld/store.h"
#include "multiworld/telemetry_lines.h"

namespace mw::harness::orch {

std::vector<std::string> Run::touched(const ActionSpec& a) const {
  if (a.network()) return s_.worldsTouchedBy(a);
  return std::visit(Overload{
                        [&](const RemoveWorld& f) { return std::vector<std::string>{f.world}; },
                        [&](const AddWorld& f) { return std::vector<std::string>{f.world}; },
                        [&](const Failpoint& f) { return failpointWorlds(f.role, f.point); },
                        [&](const ClearFailpoint& f) { return failpointWorlds(f.role, f.point); },
                        [&](const auto&) { return s_.worldsOf(a.role()); },
                    },
                    a.fault);
}

std::vector<std::string> Run::failpointWorlds(const std::string& role,
                                              const std::string& point) const {
  if (chaos::isPosixPoint(point)) return s_.worldsOf(role);  // the whole process
  // "mw/gloo/send/w1": that world; "mw/gloo/send/*": every world of the role.
  std::string last = point.substr(point.rfind('/') + 1);
  if (s_.worlds.count(last)) return {last};
  return s_.worldsOf(role);
}

void Run::act(size_t i) {
  const ActionSpec& a = s_.timeline[i];
  FaultRec& f = res_.record.faults[i];
  f.sent = rel(chaos::monoNs());
  Status st = a.network() ? actOnNetwork(a, f) : actOnRole(a, f);
  if (st.ok()) {
    f.outcome = FaultOutcome::kOk;
  } else {
    f.outcome = st.code() == Code::kUnavailable ? FaultOutcome::kSkipped : FaultOutcome::kError;
    f.why = st.message();
  }
}

Status Run::actOnNetwork(const ActionSpec& a, FaultRec& f) {
  std::string slow;  // the hosts that were slow to do it (netOnAll)
  Status st = std::visit(
      Overload{
          [&](const Partition& p) {
            // Each side's agent drops (or rejects) what its host sends to the other side: every
            // host's request sent before any answer is awaited.
            std::vector<std::pair<std::string, agent::Net>> cuts;
            auto cut = [&](const std::vector<std::string>& from,
                           const std::vector<std::string>& to) {
              agent::Net m;
              m.op = "cut";
              m.loud = p.loud;
              for (const auto& h : to) m.peers.push_back(hostAddress(h));
              for (const auto& h : from) cuts.emplace_back(h, m);
            };
            cut(p.a, p.b);
            if (!p.oneway) cut(p.b, p.a);
            MW_RETURN_IF_ERROR(netOnAll(cuts, &slow));
            // The rules name the other side's addresses only (docs/hosts.md).
            f.note = "cuts the scenario hosts' traffic only: the controller, the control plane " +
                     std::string("and anything outside the scenario still reach every host");
            return Status::Ok();
          },
          [&](const Heal&) {
            std::vector<std::pair<std::string, agent::Net>> heals;
            for (const auto& h : s_.hosts()) {
              heals.emplace_back(h, agent::Net{});
              heals.back().second.op = "heal";
            }
            Status st = netOnAll(heals, &slow);
            clearDelays();
            return st;
          },
          [&](const Loss& l) {
            agent::Net m;
            m.op = "loss";
            m.p = l.p;
            return netOn(l.host, m, &slow);
          },
          [&](const Bandwidth& b) {
            agent::Net m;
            m.op = "bandwidth";
            m.rate = b.rate;
            m.peers = peersOf(b.host);  // the agent shapes the interface its route to them uses
            return netOn(b.host, m, &slow);
          },
          [&](const Delay& d) {
            if (auto it = no_netem_.find(d.host); it != no_netem_.end()) {
              // Known before the run (prepareNetwork): the note says "no netem" once.
              Status st = delayByFailpoint(d, f, Status(Code::kUnavailable, it->second));
              if (st.ok()) f.note += " (found when the host was readied, before the run)";
              return st;
            }
            agent::Net m;
            m.op = "delay";
            m.peers = peersOf(d.host);
            m.delay_ms = d.delay_ms;
            m.jitter_ms = d.jitter_ms;
            Status st = netOn(d.host, m, &slow);
            if (st.code() == Code::kUnavailable) st = delayByFailpoint(d, f, st);
            return st;
          },
          [&](const auto&) { return Status(Code::kInvalidArgument, "not a network fault"); },
      },
      a.fault);
  f.acked = rel(chaos::monoNs());
  if (!slow.empty()) f.note += (f.note.empty() ? "" : "; ") + slow;
  return st;
}

std::vector<std::string> Run::peersOf(const std::string& host) const {
  std::vector<std::string> out;
  for (const auto& h : s_.hosts()) {
    if (h != host && !hostAddress(h).empty()) out.push_back(hostAddress(h));
  }
  return out;
}

Status Run::netOn(const std::string& host, agent::Net m, std::string* slow) {
  return netOnAll({{host, std::move(m)}}, slow);
}

std::vector<Run::NetAnswer> Run::postAndAwait(
    const std::vector<std::pair<std::string, agent::Net>>& requests) {
  std::vector<NetAnswer> out(requests.size());
  std::vector<std::pair<size_t, uint64_t>> sent;  // index in requests, id
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& [host, m] = requests[i];
    auto it = agents_.find(host);
    if (it == agents_.end()) {
      out[i].status = Status(Code::kInvalidArgument, "no agent for host '" + host + "'");
      continue;
    }
    out[i].sent_ns = chaos::monoNs();
    auto id = it->second->post(m);
    if (id.ok()) {
      sent.emplace_back(i, *id);
    } else {
      out[i].status = id.status();
    }
  }
  // While one is awaited the others' answers are read too (setWhileWaiting), and kept.
  for (const auto& [i, id] : sent) {
    agent::Connection& c = *agents_.at(requests[i].first);
    auto r = c.await(id, std::chrono::seconds(30));
    out[i].read_ns = chaos::monoNs();
    if (!r.ok()) {
      out[i].status = r.status();
      continue;
    }
    if (r->t_ns != 0) out[i].done_ns = c.toLocal(r->t_ns);
    out[i].took_ns = r->took_ns;
  }
  return out;
}

// "h2 in force 2470 ms after it was sent (2460 ms of it doing it, its answer read 4 ms later)",
// for each host whose request was done more than 100 ms after it was sent: where a fault
// was in force late, and whether the host or the reading of its answer took the time.
std::string Run::slowHosts(const std::vector<std::pair<std::string, agent::Net>>& requests,
                           const std::vector<NetAnswer>& got) {
  constexpr int64_t kSlowNs = 100'000'000;
  auto ms = [](int64_t ns) { return std::to_string((ns + 500'000) / 1'000'000); };
  std::string out;
  for (size_t i = 0; i < got.size(); ++i) {
    const NetAnswer& a = got[i];
    if (!a.status.ok() || a.sent_ns == 0) continue;
    // Within [sent, read]: an estimated clock offset may put the host's time a little outside.
    const int64_t done = std::clamp(a.done_ns != 0 ? a.done_ns : a.read_ns, a.sent_ns, a.read_ns);
    if (done - a.sent_ns <= kSlowNs && a.read_ns - a.sent_ns <= kSlowNs) continue;
    out += (out.empty() ? "" : ", ") + requests[i].first + " in force " + ms(done - a.sent_ns) +
           " ms after it was sent (" + ms(a.took_ns) + " ms of it doing it, its answer read " +
           ms(a.read_ns - done) + " ms later)";
  }
  return out.empty() ? out : "slow: " + out;
}

Status Run::netOnAll(const std::vector<std::pair<std::string, agent::Net>>& requests,
                     std::string* slow) {
  const std::vector<NetAnswer> got = postAndAwait(requests);
  if (slow != nullptr) *slow = slowHosts(requests, got);
  Status first;
  std::string where;  // the hosts where it was done
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].status.ok()) {
      where += (where.empty() ? "" : ", ") + requests[i].first;
    } else if (first.ok()) {
      first = got[i].status;
    }
  }
  if (first.ok() || where.empty()) return first;
  // Done on some hosts, not on others: delivered in part, an error (never "skipped", which says
  // nothing was done), naming where it is in force.
  return Status(first.code() == Code::kUnavailable ? Code::kIoError : first.code(),
                first.message() + " (done on " + where + " nonetheless)");
}

Status Run::actOnRole(const ActionSpec& a, FaultRec& f) {
  Worker& w = workers_[a.role()];
  if (const auto* r = std::get_if<Restart>(&a.fault)) {
    if (w.proc) {
      w.proc->killAndReap();
      w.killed_by_scenario = true;
      f.ends_role = true;
      f.gone = rel(chaos::monoNs());
      finishWorker(w);
      releaseWorker(w);
    }
    f.acked = f.sent;
    if (!start(r->role)) return Status(Code::kIoError, "could not start the worker again");
    return Status::Ok();
  }
  if (!w.proc || w.proc->poll()) {
    return Status(Code::kInvalidUsage, "role '" + a.role() + "' is not running");
  }
  auto sent = [&f] {  // a signal or a command on stdin is done once sent
    f.acked = f.sent;
    return Status::Ok();
  };
  return std::visit(
      Overload{
          [&](const Kill& k) {
            // Decided once, here, before the signal can take the process (and its /proc entry)
            // away; the expectations read it from the fault record.
            // (Its agent decides, before it sends the signal.)
            f.ends_role = w.proc->signal(k.signal);
            w.killed_by_scenario = w.killed_by_scenario || f.ends_role;
            if (f.ends_role) w.ending_fault = static_cast<int>(&f - res_.record.faults.data());
            return sent();
          },
          [&](const ScancelStep& c) { return scancelStep(c, w, f); },
          [&](const Pause&) { return w.proc->signal(SIGSTOP), sent(); },
          [&](const Resume&) { return w.proc->signal(SIGCONT), sent(); },
          [&](const RemoveWorld& r) { return w.proc->tell("remove " + r.world), sent(); },
          [&](const AddWorld& r) { return w.proc->tell("add " + r.world), sent(); },
          [&](const Failpoint& p) {
            return fifoCommand(w, f,
                               chaos::enableCommand(p.point, p.mode.failnum, p.mode.failinfo,
                                                    p.mode.probability, p.mode.once));
          },
          [&](const ClearFailpoint& p) {
            return fifoCommand(w, f, chaos::disableCommand(p.point));
          },
          [&](const auto&) { return Status(Code::kInvalidArgument, "not a fault on a role"); },
      },
      a.fault);
}

Status Run::scancelStep(const ScancelStep& c, Worker& w, FaultRec& f) {
  agent::Connection& a = agentOfRole(c.role);
  const auto& facts = a.hello().facts;
  const auto job = facts.find("slurm_job"), step = facts.find("slurm_step");
  if (job == facts.end() || step == facts.end()) {
    return Status(Code::kInvalidUsage, "scancel_step: the agent of host '" + a.host() +
                                           "' runs in no Slurm step (no SLURM_JOB_ID and "
                                           "SLURM_STEP_ID where it runs)");
  }
  const std::string scancel = chaos::onPath("scancel");
  if (scancel.empty()) {
    return Status(Code::kUnavailable, "scancel_step: no scancel on $PATH or in /usr/bin");
  }
  std::vector<std::string> argv = {scancel};
  if (c.signal != 0) argv.push_back("--signal=" + c.signal_name.substr(3));  // SIGTERM: TERM
  argv.push_back(job->second + "." + step->second);
  // The step takes the host's agent with it: that loss is this fault's effect, not the harness's
  // error (pump()), and the role ends. Nothing is read from the agent while scancel runs (this
  // thread), so deciding it now is before the agent can report the role's exit.
  ended_steps_.insert(a.host());
  Status st = chaos::runProgram(argv, std::chrono::seconds(10));
  if (!st.ok()) {
    // A signal that ends the step at once (USR1 to the agent, which cleans up and exits) can end
    // it before slurmctld answers scancel, which then says "Invalid job id specified": the step
    // is gone, as asked. Only an agent still there means that scancel did nothing.
    for (int i = 0; i < 100 && a.alive(); ++i) {
      pollfd p{a.fd(), POLLIN, 0};
      ::poll(&p, 1, 20);
      a.pump();
    }
    if (a.alive()) {
      ended_steps_.erase(a.host());
      return st;
    }
  }
  w.killed_by_scenario = true;
  w.ending_fault = static_cast<int>(&f - res_.record.faults.data());
  f.ends_role = true;
  f.acked = rel(chaos::monoNs());
  f.note = "scancel " + argv.back() + ": host '" + a.host() +
           "' left with its step, so it is not audited for orphans (Slurm tears a cancelled "
           "step's processes down)";
  return Status::Ok();
}

Status Run::fifoCommand(Worker& w, FaultRec& f, const std::string& command) {
  if (w.fifo_unavailable) {
    return Status(Code::kUnavailable,
                  std::string(w.program ? "the libmultiworld in role '" + w.role + "'s program"
                                        : "this build of the worker") +
                      " has no failpoints (configure with -DMW_WITH_FIU=ON and libfiu-dev)");
  }
  if (!w.fifo_open) {
    return Status(Code::kInvalidUsage, "role '" + w.role + "' has no failpoint fifo");
  }
  Status st = fifoOn(w, command);
  if (st.ok()) f.acked = rel(chaos::monoNs());
  return st;
}

Status Run::fifoOn(Worker& w, const std::string& command) {
  const int ms = static_cast<int>(std::chrono::milliseconds(kCommandLimit).count());
  return agentOfRole(w.role)
      .call(agent::FifoCommand{w.role, command, ms}, std::chrono::milliseconds(ms) + 1s)
      .status();
}

Status Run::delayByFailpoint(const Delay& d, FaultRec& f, const Status& netem) {
  std::string roles;
  for (const auto& [name, r] : s_.roles) {
    if (r.host != d.host) continue;
    Worker& w = workers_[name];
    if (w.fifo_unavailable || !w.fifo_open) {
      return Status(Code::kUnavailable, netem.message() + "; and role '" + name +
                                            "' has no failpoint fifo to delay it instead");
    }
    for (const auto& [world, rank] : r.ranks) {
      const std::string point =
          std::string("mw/") + backendName(s_.worlds.at(world).backend) + "/delay/" + world;
      Status st = fifoOn(w, chaos::enableCommand(point, d.delay_ms, 0, 1.0, false));
      if (!st.ok()) return st;
      delays_.emplace_back(name, point);
    }
    roles += (roles.empty() ? "" : ", ") + name;
  }
  f.note = "no netem in this kernel: each operation of " + roles + " delayed by " +
           std::to_string(d.delay_ms) + " ms through the mw/<backend>/delay failpoint";
  return Status::Ok();
}

void Run::prepareNetwork() {
  std::map<std::string, bool> shaped;  // host -> delayed too
  std::set<std::string> cut;           // hosts a partition or a loss writes rules on
  for (const auto& a : s_.timeline) {
    if (const auto* d = std::get_if<Delay>(&a.fault)) shaped[d->host] = true;
    if (const auto* b = std::get_if<Bandwidth>(&a.fault)) shaped.try_emplace(b->host, false);
    if (const auto* l = std::get_if<Loss>(&a.fault)) cut.insert(l->host);
    if (const auto* p = std::get_if<Partition>(&a.fault)) {
      cut.insert(p->a.begin(), p->a.end());
      if (!p->oneway) cut.insert(p->b.begin(), p->b.end());
    }
  }
  // Every host's request is sent before any answer is awaited: the set-up takes the slowest
  // host's time, not their sum. An error is met again, and reported, by the fault itself; only
  // a delay's missing netem is kept, for its note.
  std::vector<std::pair<std::string, agent::Net>> requests;
  for (const auto& [host, delayed] : shaped) {
    agent::Net m;
    m.op = "prepare";  // the chains too, whatever the device answers
    m.peers = peersOf(host);
    m.delay_ms = delayed ? 1 : 0;
    requests.emplace_back(host, std::move(m));
  }
  for (const auto& host : cut) {
    if (shaped.count(host) != 0) continue;
    agent::Net m;
    m.op = "ready";
    requests.emplace_back(host, std::move(m));
  }
  const std::vector<NetAnswer> got = postAndAwait(requests);
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string& host = requests[i].first;
    const auto it = shaped.find(host);
    if (it != shaped.end() && it->second && got[i].status.code() == Code::kUnavailable) {
      no_netem_[host] = got[i].status.message();
    }
  }
}

void Run::clearDelays() {
  for (const auto& [role, point] : delays_) {
    Worker& w = workers_[role];
    if (w.fifo_open) fifoOn(w, chaos::disableCommand(point)).ignore();
  }
  delays_.clear();
}

}  // namespace mw::harness::orch
