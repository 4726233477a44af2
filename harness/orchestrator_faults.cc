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
#include "chaos/worker_lines.h"
#include "harness/orchestrator_run.h"
#include "multiworld/status.h"
#include "multiworld/store.h"

namespace mw::harness::orch {

std::vector<std::string> Run::touched(const ActionSpec& a) const {
  if (a.network()) return s_.worldsTouchedBy(a);
  if (a.kind == "remove_world" || a.kind == "add_world") return {a.world};
  if (chaos::isPosixPoint(a.point)) return s_.worldsOf(a.role);  // the whole process
  if (a.kind == "failpoint" || a.kind == "clear_failpoint") {
    std::string last = a.point.substr(a.point.rfind('/') + 1);
    if (s_.worlds.count(last)) return {last};
    std::vector<std::string> out;
    for (const auto& w : s_.worldsOf(a.role)) {
      // "mw/gloo/send/*": every world of the role
      out.push_back(w);
    }
    return out;
  }
  return s_.worldsOf(a.role);
}

void Run::act(size_t i) {
  const ActionSpec& a = s_.timeline[i];
  FaultRec& f = res_.record.faults[i];
  f.sent = rel(nowNs());
  if (a.network()) {
    Status st;
    if (a.kind == "partition")
      st = net_->partition(a.hosts_a, a.hosts_b, a.loud, a.oneway);
    else if (a.kind == "heal")
      st = net_->heal();
    else if (a.kind == "loss")
      st = net_->loss(a.host, a.loss);
    else if (a.kind == "bandwidth")
      st = net_->bandwidth(a.host, a.rate);
    else if (a.kind == "delay")
      st = net_->delay(a.host, a.delay_ms, a.jitter_ms);
    if (a.kind == "delay" && st.code() == Code::kUnavailable) st = delayByFailpoint(a, f, st);
    if (a.kind == "heal") clearDelays();
    f.acked = rel(nowNs());
    f.outcome = st.ok()                           ? "ok"
                : st.code() == Code::kUnavailable ? "skipped: " + st.message()
                                                  : "error: " + st.message();
    return;
  }
  Worker& w = workers_[a.role];
  auto running = [&] { return w.proc && !w.proc->poll(); };
  if (a.kind == "restart") {
    if (w.proc) {
      w.proc->killAndReap();
      w.killed_by_scenario = true;
      f.ends_role = true;
      finishWorker(w);
    }
    f.outcome = start(a.role) ? "ok" : "error: could not start the worker again";
    f.acked = f.sent;
    return;
  }
  if (!running()) {
    f.outcome = "error: role '" + a.role + "' is not running";
    return;
  }
  if (a.kind == "kill") {
    // Decided once, here, before the signal can take the process (and its /proc entry) away;
    // the expectations read it from the fault record.
    f.ends_role = w.proc->endedBy(a.signal);
    w.killed_by_scenario = w.killed_by_scenario || f.ends_role;
    w.proc->signal(a.signal);
  } else if (a.kind == "pause") {
    w.proc->signal(SIGSTOP);
  } else if (a.kind == "resume") {
    w.proc->signal(SIGCONT);
  } else if (a.kind == "remove_world") {
    w.proc->tell("remove " + a.world);
  } else if (a.kind == "add_world") {
    w.proc->tell("add " + a.world);
  } else if (a.kind == "failpoint" || a.kind == "clear_failpoint") {
    if (w.fifo_unavailable) {
      f.outcome =
          "skipped: this build of the worker has no failpoints (configure with "
          "-DMW_WITH_FIU=ON and libfiu-dev)";
      return;
    }
    if (!w.fifo.isOpen()) {
      f.outcome = "error: role '" + a.role + "' has no failpoint fifo";
      return;
    }
    std::string cmd = a.kind == "failpoint"
                          ? chaos::enableCommand(a.point, a.mode.failnum, a.mode.failinfo,
                                                 a.mode.probability, a.mode.once)
                          : chaos::disableCommand(a.point);
    Status st = w.fifo.command(cmd, deadlineIn(kCommandLimit));
    if (!st.ok()) {
      f.outcome = "error: " + st.message();
      return;
    }
    f.acked = rel(nowNs());
    f.outcome = "ok";
    return;
  }
  f.acked = f.sent;
  f.outcome = "ok";
}

Status Run::delayByFailpoint(const ActionSpec& a, FaultRec& f, const Status& netem) {
  std::string roles;
  for (const auto& [name, r] : s_.roles) {
    if (r.host != a.host) continue;
    Worker& w = workers_[name];
    if (w.fifo_unavailable || !w.fifo.isOpen()) {
      return Status(Code::kUnavailable, netem.message() + "; and role '" + name +
                                            "' has no failpoint fifo to delay it instead");
    }
    for (const auto& [world, rank] : r.ranks) {
      const std::string point = "mw/" + s_.worlds.at(world).backend + "/delay/" + world;
      Status st = w.fifo.command(chaos::enableCommand(point, a.delay_ms, 0, 1.0, false),
                                 deadlineIn(kCommandLimit));
      if (!st.ok()) return st;
      delays_.emplace_back(name, point);
    }
    roles += (roles.empty() ? "" : ", ") + name;
  }
  f.note = "no netem in this kernel: each operation of " + roles + " delayed by " +
           std::to_string(a.delay_ms) + " ms through the mw/<backend>/delay failpoint";
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
