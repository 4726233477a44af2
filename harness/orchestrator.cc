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
#include "harness/launchers.h"
#include "harness/orchestrator_run.h"
#include "multiworld/status.h"
#include "multiworld/store.h"
#include "multiworld/telemetry_lines.h"

namespace mw::harness::orch {

RunResult Run::go() {
  res_.record.duration = static_cast<double>(s_.duration.count()) / 1000.0;
  res_.record.history_limit = o_.history;
  const double cpu0 = cpuSeconds(RUSAGE_SELF);
  const double child0 = cpuSeconds(RUSAGE_CHILDREN);
  t0_ns_ = chaos::monoNs();
  prepare();
  if (res_.outcome == Outcome::kCompleted) startAll();
  if (res_.outcome == Outcome::kCompleted) waitReady();
  if (res_.outcome == Outcome::kCompleted) {
    // Time zero moves to now: what was recorded while the roles joined (a program's first
    // windows) keeps its place in time, before zero.
    const long long now = chaos::monoNs();
    res_.record.startup = static_cast<double>(now - t0_ns_) / 1e9;
    res_.record.shiftTimes(res_.record.startup);
    t0_ns_ = now;
    play();
  }
  stopAll();
  cleanup();
  // An interrupt after the run's last look at it (during the host agents' cleanup, the stop's
  // last moment) still ends the run interrupted, unjudged, as mwchaos's exit code (130) says.
  if (interrupted()) markInterrupted();
  res_.record.harness_cpu = cpuSeconds(RUSAGE_SELF) - cpu0;
  res_.record.workers_cpu = cpuSeconds(RUSAGE_CHILDREN) - child0;
  return std::move(res_);
}

void Run::fail(Outcome o, const std::string& why) {
  if (res_.outcome == Outcome::kCompleted) {
    res_.outcome = o;
    res_.why = why;
  }
  res_.record.harness_errors.push_back(why);
}

void Run::markInterrupted() {
  res_.record.interrupted = true;
  if (res_.outcome == Outcome::kCompleted) res_.outcome = Outcome::kInterrupted;
}

void Run::prepare() {
  std::set<uint16_t> used;
  for (const auto& [name, w] : s_.worlds) {
    uint16_t p = 0;
    for (int i = 0; i < 100 && (p == 0 || used.count(p)); ++i) p = chaos::freeStorePort();
    used.insert(p);
    ports_[name] = p;
  }
  int gpu_next = 0;
  for (const auto& [name, r] : s_.roles) {
    bool any_nccl = false;
    for (const auto& [w, rank] : r.ranks) any_nccl |= s_.worlds.at(w).backend == BackendKind::kNccl;
    std::string dev = r.device;
    if (dev == "auto") dev = any_nccl ? "gpu" : "cpu";
    if (dev == "gpu") {
      if (o_.gpus <= 0) {
        fail(Outcome::kUnavailable,
             "role '" + name +
                 "' needs a GPU (an nccl world) and this machine has none; run "
                 "with --backend gloo to play the scenario on CPU worlds");
        return;
      }
      dev = "cuda:" + std::to_string(gpu_next++ % o_.gpus);
    }
    devices_[name] = dev;
  }
  const auto hosts = s_.hosts();
  if (!hosts.empty() && simulatedHosts(o_.inventory)) {
    auto net = chaos::SimNet::create(hosts);
    if (!net.ok()) {
      fail(net.status().code() == Code::kUnavailable ? Outcome::kUnavailable
                                                     : Outcome::kHarnessError,
           "simulated hosts: " + net.status().message());
      return;
    }
    net_ = std::move(*net);
  }
  startAgents();
  if (res_.outcome != Outcome::kCompleted) return;
  for (const auto& a : s_.timeline) {
    if (const auto* f = std::get_if<Failpoint>(&a.fault); f && chaos::isPosixPoint(f->point))
      posix_roles_.insert(f->role);
    if (a.kind() == FaultKind::kFailpoint || a.kind() == FaultKind::kClearFailpoint)
      fifo_roles_.insert(a.role());
    // A delay may have to fall back to the runtime's delay failpoint (no netem).
    if (const auto* d = std::get_if<Delay>(&a.fault)) {
      for (const auto& [name, r] : s_.roles) {
        if (r.host == d->host) fifo_roles_.insert(name);
      }
    }
  }
  prepareNetwork();
  // Every world of this run gets this run's random token: other local processes cannot join
  // or disturb them. It reaches the workers in their environment, never on a command line.
  auto token = mw::randomStoreToken();
  if (!token.ok()) {
    fail(Outcome::kHarnessError, "making the run's store token: " + token.status().message());
    return;
  }
  token_ = *token;
  token_env_ = std::string(chaos::kTokenVariable) + "=" + token_;
  if (!posix_roles_.empty()) {
    auto preload = chaos::posixPreload();
    if (!preload.ok()) {
      fail(Outcome::kUnavailable, preload.status().message());
      return;
    }
    const char* theirs = std::getenv("LD_PRELOAD");
    posix_env_ = "LD_PRELOAD=" + *preload +
                 (theirs != nullptr && *theirs != '\0' ? " " + std::string(theirs) : "");
  }
  for (const auto& a : s_.timeline) {
    FaultRec f;
    f.action = a.describe();
    f.kind = a.kind();
    f.role = a.role();
    f.where = a.where;
    f.planned = static_cast<double>(a.at.count()) / 1000.0;
    f.worlds = touched(a);
    res_.record.faults.push_back(std::move(f));
  }
}

unsigned Run::roleSeed(const std::string& role) const {
  return static_cast<unsigned>((s_.seed * 0x9E3779B97F4A7C15ULL) ^ std::hash<std::string>{}(role));
}

chaos::WorkerConfig Run::config(const std::string& role, const std::string& fifo_prefix) const {
  const RoleSpec& r = s_.roles.at(role);
  chaos::WorkerConfig c;
  c.role = role;
  c.seed = roleSeed(role);
  c.fifo_prefix = fifo_prefix;
  c.check = s_.expect.data_intact;
  c.check_every_element = s_.expect.data_intact_every_element;
  c.history = o_.history;
  const auto where = stores(role);
  for (const auto& [w, rank] : r.ranks) {
    const WorldSpec& ws = s_.worlds.at(w);
    chaos::WorkerWorld cw;
    cw.name = w;
    cw.host = where.at(w).addr;
    cw.rank = rank;
    cw.size = ws.size;
    cw.port = where.at(w).port;
    cw.backend = ws.backend;
    if (ws.backend == BackendKind::kNccl) {
      auto device = parseDevice(devices_.at(role));
      if (device.ok()) cw.device = *device;
    }
    cw.heartbeat = ws.heartbeat;
    cw.op_timeout = ws.op_timeout;
    cw.rejoin = ws.rejoin;
    cw.start = ws.start;
    c.worlds.push_back(std::move(cw));
  }
  for (const auto& t : s_.traffic) {
    for (const auto& w : t.worlds) {
      if (r.ranks.count(w)) c.traffic.push_back({w, t.pattern, t.bytes, t.dtype, t.rate, t.root});
    }
  }
  return c;
}

std::map<std::string, StoreAddress> Run::stores(const std::string& role) const {
  std::map<std::string, StoreAddress> out;
  for (const auto& [name, ws] : s_.worlds) {
    StoreAddress& a = out[name];
    // The store lives with rank 0: on its simulated host's address, else on loopback.
    const std::string addr = hostAddress(s_.roles.at(s_.membersOf(name).at(0)).host);
    if (!addr.empty()) a.addr = addr;
    a.port = ports_.at(name);
    a.device = deviceIn(role, ws);
  }
  return out;
}

std::string Run::deviceIn(const std::string& role, const WorldSpec& w) const {
  auto it = devices_.find(role);
  return w.backend == BackendKind::kNccl && it != devices_.end() ? it->second : "cpu";
}

std::vector<std::string> Run::programArgv(const RoleSpec& r) const {
  const auto where = stores(r.name);
  std::vector<std::string> argv;
  for (const auto& a : r.program) {
    std::string err;  // validation accepted every placeholder
    argv.push_back(expandPlaceholders(a, s_, r, where, token_, &err).value_or(a));
  }
  return argv;
}

std::vector<std::string> Run::programEnv(const RoleSpec& r) const {
  const auto where = stores(r.name);
  std::vector<std::string> env;
  for (const auto& [name, value] : r.env) {
    std::string err;
    env.push_back(name + "=" +
                  expandPlaceholders(value, s_, r, where, token_, &err).value_or(value));
  }
  std::string worlds;  // r.ranks is sorted by name
  for (const auto& [world, rank] : r.ranks) worlds += (worlds.empty() ? "" : ",") + world;
  env.push_back("MW_TELEMETRY_FD=3");
  env.push_back("MW_TELEMETRY_WORLDS=" + worlds);
  env.push_back("MW_CHAOS_ROLE=" + r.name);
  // Each world's options, as the runtime's `created` event names them (docs/scenarios.md).
  std::string options;
  for (const auto& [world, rank] : r.ranks) {
    options += (options.empty() ? "" : ";") + world + ":" +
               worldOptionsText(s_.worlds.at(world), where.at(world).device);
  }
  env.push_back("MW_CHAOS_WORLD_OPTIONS=" + options);
  env.push_back(token_env_);
  return env;
}

bool Run::start(const std::string& role) {
  auto& w = workers_[role];
  w.role = role;
  const RoleSpec& spec = s_.roles.at(role);
  w.program = spec.isProgram();
  std::string prefix;
  w.fifo_wanted = fifo_roles_.count(role) > 0;
  if (w.fifo_wanted) {
    // A folder on the role's host, for libfiu's fifos: the agent removes it with the role.
    auto dir = agentOfRole(role).call(agent::MakeDir{role});
    if (!dir.ok()) {
      fail(Outcome::kHarnessError, "a folder for role '" + role + "': " + dir.status().message());
      return false;
    }
    w.fifo_dir = dir->path;
    prefix = w.fifo_dir + "/fiu";
  }
  agent::Spawn options;
  options.role = role;
  if (w.program) {
    options.argv = programArgv(spec);
    options.env = programEnv(spec);
    if (w.fifo_wanted) {
      // The runtime in the program opens libfiu's control fifo there and names it on fd 3.
      options.env.push_back("MW_FAILPOINT_FIFO=" + prefix);
      options.env.push_back("MW_FAILPOINT_SEED=" + std::to_string(roleSeed(role)));
    }
    options.executable = spec.executable;
    options.cwd = spec.cwd;
    options.telemetry = true;
    options.meter = true;  // a program writes no `cpu` lines: its agent meters it
  } else {
    const std::string& host = agents_.count(spec.host) ? spec.host : "";
    options.argv = {worker_paths_[host], "--config", chaos::toJson(config(role, prefix))};
    options.env = {token_env_};
    if (posix_roles_.count(role)) options.env.push_back(posix_env_);  // libfiu's POSIX preload
  }
  w.proc.reset();
  auto p = agentOfRole(role).spawn(options);
  if (!p.ok()) {
    fail(Outcome::kHarnessError, "starting role '" + role + "': " + p.status().message());
    return false;
  }
  w.proc = std::move(*p);
  w.fifo_open = false;
  w.ready = false;
  w.out_eof = w.err_eof = false;
  w.tel_eof = !w.program;
  w.out_buf.clear();
  ++w.starts;
  return true;
}

void Run::startAll() {
  for (const auto& [name, r] : s_.roles) {
    if (interrupted()) {  // (host agents may have taken seconds to start): no role is started
      markInterrupted();
      return;
    }
    if (!start(name)) return;
  }
}

void Run::finishWorker(Worker& w) {
  WorkerRec rec;
  rec.role = w.role;
  rec.pid = w.proc ? w.proc->pid() : 0;
  rec.starts = w.starts;
  rec.killed_by_scenario = w.killed_by_scenario;
  if (w.proc) {
    readAll(w);
    rec.exit = w.proc->exitText();
  }
  rec.stderr_tail = w.err_tail;
  rec.stdout_tail = w.out_tail;
  res_.record.workers.push_back(rec);
}

void Run::releaseWorker(Worker& w) {
  if (!w.proc) return;
  std::string left_dir;
  res_.record.leftover_processes += w.proc->release(&left_dir);
  if (!left_dir.empty()) res_.record.leftover_files.push_back(left_dir);
  w.proc.reset();
  w.fifo_dir.clear();
  w.fifo_open = false;
}

void Run::startAgents() {
  auto plan = planLaunches(
      s_, o_.inventory, o_.agent_path, o_.worker_path,
      [this](const std::string& h) { return net_ ? net_->netns(h) : std::string(); },
      [this](const std::string& h) { return net_ ? net_->address(h) : std::string(); });
  if (!plan.ok()) {
    fail(Outcome::kHarnessError, plan.status().message());
    return;
  }
  // Every agent is started here (this thread outlives them: their parent-death signal follows
  // it), then all are waited for at once, each handshake on a thread of its own: a run over many
  // hosts waits for the slowest ssh or srun, not for their sum. A failure is reported once all
  // have answered or timed out; the started ones then say bye as they go.
  std::vector<agent::LaunchSpec> specs;
  for (const auto& launch : *plan) specs.push_back(launch.spec);
  auto spawned = agent::Connection::startAll(specs, kAgentStart);
  for (size_t i = 0; i < plan->size(); ++i) {
    const HostLaunch& launch = (*plan)[i];
    const std::string& host = launch.host;
    const agent::LaunchSpec& spec = launch.spec;
    addresses_[host] = launch.address;
    worker_paths_[host] = launch.worker_path;
    auto& c = spawned[i];
    if (!c.ok()) {
      fail(Outcome::kHarnessError, c.status().message());
      return;
    }
    const agent::Connection& a = **c;
    HostRec rec;
    rec.name = spec.host;
    rec.launcher = spec.launcher;
    rec.node = a.hello().host;
    rec.address = launch.address;
    rec.same_clock = a.sameClock();
    rec.offset_ms = static_cast<double>(a.clock().offset_ns) / 1e6;
    rec.uncertainty_ms = static_cast<double>(a.clock().uncertainty_ns) / 1e6;
    rec.rtt_ms = static_cast<double>(a.clock().rtt_ns) / 1e6;
    res_.record.hosts.push_back(rec);
    agents_[host] = std::move(*c);
  }
  // While one agent is slow to answer (iptables under load, say), the others are read: one poll
  // over their fds, and a read of only those that have something.
  for (auto& [host, a] : agents_) {
    // The two lists live in the hook, cleared at each wake: no allocation after the first.
    a->setWhileWaiting([this, me = host, fds = std::vector<pollfd>{},
                        who = std::vector<agent::Connection*>{}]() mutable {
      fds.clear();
      who.clear();
      for (auto& [other, b] : agents_) {
        if (other == me || !b->alive()) continue;
        fds.push_back(pollfd{b->fd(), POLLIN, 0});
        who.push_back(b.get());
      }
      if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents != 0) who[i]->pump();
      }
    });
  }
}
void Run::waitReady() {
  const auto until = deadlineIn(s_.startup);
  for (;;) {
    pump(20);
    if (res_.outcome != Outcome::kCompleted) return;
    bool all = true;
    for (auto& [role, w] : workers_) {
      if (w.proc && w.proc->poll() && !w.ready) {
        readAll(w);
        if (res_.outcome != Outcome::kCompleted) return;
        fail(Outcome::kHarnessError, "role '" + role + "' " + w.proc->exitText() +
                                         " before it joined its worlds: " + lastOutput(w));
        return;
      }
      all &= w.ready;
    }
    if (all) return;
    if (interrupted()) {
      markInterrupted();
      return;
    }
    if (Clock::now() >= until) {
      // Per role, the worlds it never reported joined (no "created" event from it).
      std::string missing;
      for (auto& [role_name, w] : workers_) {
        if (w.ready) continue;
        const std::string& role = role_name;  // (clang cannot capture a structured binding)
        std::string never;
        for (const auto& member : s_.roles.at(role).ranks) {
          const std::string& world = member.first;
          const bool joined = std::any_of(
              res_.record.events.begin(), res_.record.events.end(), [&](const EventRec& e) {
                return e.role == role && e.world == world && e.kind == EventKind::kCreated;
              });
          if (!joined) never += (never.empty() ? "" : ", ") + world;
        }
        missing += (missing.empty() ? "" : "; ") + role +
                   (never.empty() ? " (joined its worlds but never said ready)"
                                  : " (never joined " + never + ")");
      }
      const long long ms = s_.startup.count();
      const std::string limit =
          ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
      fail(Outcome::kHarnessError,
           "roles did not join their worlds within " + limit + " (startup): " + missing);
      return;
    }
  }
}

void Run::play() {
  size_t next = 0;
  res_.record.machine_cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  // A network fault is in force once its hosts answered. One that took kFaultLateS or more (an
  // iptables program held up by the kernel beside busy CPUs: docs/hosts.md) moves the rest of the
  // timeline and the run's end by its lateness, so that what the scenario planned after the
  // fault (a heal 300 ms on, 2 s to see a world break) still comes after it in force. The judge
  // counts its detection from the same acknowledgement past the same threshold.
  constexpr auto kLateNs = static_cast<long long>(kFaultLateS * 1e9);
  long long shift = 0;
  auto due = [&](size_t i) { return t0_ns_ + s_.timeline[i].at.count() * 1000000LL + shift; };
  auto endNs = [&] { return t0_ns_ + s_.duration.count() * 1000000LL + shift; };
  auto actNow = [&](size_t i) {
    const long long planned = due(i);
    act(i);
    FaultRec& f = res_.record.faults[i];
    if (!s_.timeline[i].network() || f.outcome != FaultOutcome::kOk) return;
    const long long late = t0_ns_ + static_cast<long long>(f.acked * 1e9) - planned;
    if (late < kLateNs) return;
    shift += late;
    f.note += std::string(f.note.empty() ? "" : "; ") + "in force " +
              std::to_string(late / 1000000) +
              " ms after its time: the rest of the timeline and the run's end moved as much later";
  };
  long long next_progress = t0_ns_;
  const long long progress_every = o_.tty ? 250000000LL : 1000000000LL;
  while (chaos::monoNs() < endNs() && res_.outcome == Outcome::kCompleted) {
    if (interrupted()) {
      markInterrupted();
      break;
    }
    while (next < s_.timeline.size() && chaos::monoNs() >= due(next)) actNow(next++);
    long long wake = endNs();
    if (next < s_.timeline.size()) wake = std::min(wake, due(next));
    // Rounded up (waitMillis): rounded down, the last fraction of a millisecond before an
    // action was a zero timeout, and this loop spun through it.
    int ms = static_cast<int>(std::min<long long>(
        mw::waitMillis(std::chrono::nanoseconds(wake - chaos::monoNs())).count(), 20));
    pump(ms);
    sampleMachine();
    for (auto& [role, w] : workers_) {
      if (w.proc && w.proc->poll() && !w.killed_by_scenario && !w.stopped) {
        readAll(w);
        res_.record.harness_errors.push_back("role '" + role + "' " + w.proc->exitText() +
                                             " unexpectedly: " + lastOutput(w));
        w.stopped = true;
      }
    }
    if (chaos::monoNs() >= next_progress) {
      progress(false);
      next_progress += progress_every;
    }
  }
  // Actions planned for the very end still happen.
  while (!res_.record.interrupted && next < s_.timeline.size()) actNow(next++);
  // The judged length: the planned duration, and what late network faults moved it by, in whole
  // milliseconds down (never past elapsed_s, which the report rounds to them).
  res_.record.duration =
      static_cast<double>((s_.duration.count() * 1000000LL + shift) / 1000000LL) / 1000.0;
  res_.record.elapsed = rel(chaos::monoNs());
  if (o_.tty) progress(true);  // ends the redrawn line
}

void Run::stopAll() {
  for (auto& [role, w] : workers_) {
    if (!w.proc || w.proc->poll()) continue;
    w.proc->signal(SIGCONT);  // a paused worker must run to stop
    if (w.program) {
      w.proc->signal(SIGTERM);  // a program is stopped by SIGTERM to its group
    } else {
      w.proc->tell("stop");
    }
    w.proc->closeStdin();
    w.stopped = true;
  }
  // Each role has its own time to exit (Scenario::stopWithin); one still running past it is
  // killed and reaped there, and judged hung. An interrupt (Ctrl-C, SIGTERM) ends the run
  // interrupted and still gives the roles their time, saying how long that may be; a second one
  // kills what is left at once (not judged hung: the run is over unjudged).
  const auto told = Clock::now();
  bool announced = false;
  for (;;) {
    if (interrupted()) {
      markInterrupted();
      if (forced()) {
        for (auto& [role, w] : workers_) {
          if (w.proc && !w.proc->poll()) w.proc->killAndReap();
        }
        break;
      }
    }
    bool all = true;
    Ms longest{0};  // the longest time left to a role still running, in whole seconds
    for (auto& [role, w] : workers_) {
      if (!w.proc || w.proc->poll()) continue;
      const auto left = s_.stopWithin(role) - (Clock::now() - told);
      if (left <= Clock::duration::zero()) {
        w.proc->killAndReap();
        hung_.insert(role);
        continue;
      }
      all = false;
      longest = std::max<Ms>(longest, std::chrono::ceil<std::chrono::seconds>(left));
    }
    if (all) break;
    if (interrupted() && !announced) {  // -q or not: it answers what the user did
      announced = true;
      std::fprintf(stderr,
                   "mwchaos: interrupted: waiting for the roles to exit (up to %s, their "
                   "stop_within); interrupt again to kill them now\n",
                   timeText(longest).c_str());
    }
    pump(10);
  }
  for (auto& [role, w] : workers_) {
    if (!w.proc) continue;
    finishWorker(w);
    if (hung_.count(role)) res_.record.workers.back().hung = true;
  }
}

void Run::cleanup() {
  for (auto& [role, w] : workers_) releaseWorker(w);
  // Each agent removes its network rules and what is left of its roles, and exits.
  for (auto& [host, a] : agents_) {
    Status st = a->bye();
    if (!st.ok() && !ended_steps_.count(host)) {
      res_.record.harness_errors.push_back("host agent: " + st.message());
    }
  }
  agents_.clear();
  if (net_) {
    // The holders die with net_, and the kernel removes each namespace with its veths, bridge
    // and rules once nothing is left in it: count any that some process still holds.
    auto inodes = net_->namespaceInodes();
    net_.reset();
    res_.record.leftover_namespaces = chaos::namespacesAlive(inodes);
  }
}

}  // namespace mw::harness::orch

namespace mw::harness {

RunResult runScenario(const Scenario& s, const RunOptions& options) {
  orch::Run run(s, options);
  return run.go();
}

}  // namespace mw::harness
