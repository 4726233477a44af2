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
  f.sent = rel(nowNs());
  Status st = a.network() ? actOnNetwork(a, f) : actOnRole(a, f);
  if (st.ok()) {
    f.outcome = FaultOutcome::kOk;
  } else {
    f.outcome = st.code() == Code::kUnavailable ? FaultOutcome::kSkipped : FaultOutcome::kError;
    f.why = st.message();
  }
}

Status Run::actOnNetwork(const ActionSpec& a, FaultRec& f) {
  Status st = std::visit(
      Overload{
          [&](const Partition& p) { return net_->partition(p.a, p.b, p.loud, p.oneway); },
          [&](const Heal&) {
            Status st = net_->heal();
            clearDelays();
            return st;
          },
          [&](const Loss& l) { return net_->loss(l.host, l.p); },
          [&](const Bandwidth& b) { return net_->bandwidth(b.host, b.rate); },
          [&](const Delay& d) {
            Status st = net_->delay(d.host, d.delay_ms, d.jitter_ms);
            if (st.code() == Code::kUnavailable) st = delayByFailpoint(d, f, st);
            return st;
          },
          [&](const auto&) { return Status(Code::kInvalidArgument, "not a network fault"); },
      },
      a.fault);
  f.acked = rel(nowNs());
  return st;
}

Status Run::actOnRole(const ActionSpec& a, FaultRec& f) {
  Worker& w = workers_[a.role()];
  if (const auto* r = std::get_if<Restart>(&a.fault)) {
    if (w.proc) {
      w.proc->killAndReap();
      w.killed_by_scenario = true;
      f.ends_role = true;
      f.gone = rel(nowNs());
      finishWorker(w);
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
            f.ends_role = w.proc->endedBy(k.signal);
            w.killed_by_scenario = w.killed_by_scenario || f.ends_role;
            if (f.ends_role) w.ending_fault = static_cast<int>(&f - res_.record.faults.data());
            w.proc->signal(k.signal);
            return sent();
          },
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

Status Run::fifoCommand(Worker& w, FaultRec& f, const std::string& command) {
  if (w.fifo_unavailable) {
    return Status(Code::kUnavailable,
                  std::string(w.program ? "the libmultiworld in role '" + w.role + "'s program"
                                        : "this build of the worker") +
                      " has no failpoints (configure with -DMW_WITH_FIU=ON and libfiu-dev)");
  }
  if (!w.fifo.isOpen()) {
    return Status(Code::kInvalidUsage, "role '" + w.role + "' has no failpoint fifo");
  }
  Status st = w.fifo.command(command, deadlineIn(kCommandLimit));
  if (st.ok()) f.acked = rel(nowNs());
  return st;
}

Status Run::delayByFailpoint(const Delay& d, FaultRec& f, const Status& netem) {
  std::string roles;
  for (const auto& [name, r] : s_.roles) {
    if (r.host != d.host) continue;
    Worker& w = workers_[name];
    if (w.fifo_unavailable || !w.fifo.isOpen()) {
      return Status(Code::kUnavailable, netem.message() + "; and role '" + name +
                                            "' has no failpoint fifo to delay it instead");
    }
    for (const auto& [world, rank] : r.ranks) {
      const std::string point =
          std::string("mw/") + backendName(s_.worlds.at(world).backend) + "/delay/" + world;
      Status st = w.fifo.command(chaos::enableCommand(point, d.delay_ms, 0, 1.0, false),
                                 deadlineIn(kCommandLimit));
      if (!st.ok()) return st;
      delays_.emplace_back(name, point);
    }
    roles += (roles.empty() ? "" : ", ") + name;
  }
  f.note = "no netem in this kernel: each operation of " + roles + " delayed by " +
           std::to_string(d.delay_ms) + " ms through the mw/<backend>/delay failpoint";
  return Status::Ok();
}

void Run::clearDelays() {
  for (const auto& [role, point] : delays_) {
    Worker& w = workers_[role];
    if (w.fifo.isOpen())
      w.fifo.command(chaos::disableCommand(point), deadlineIn(kCommandLimit)).ignore();
  }
  delays_.clear();
}

}  // namespace mw::harness::orch
