#include "harness/orchestrator.h"

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
#include "multiworld/status.h"
#include "multiworld/store.h"

namespace mw::harness {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kStartupLimit = 60s;  // every worker joined
constexpr auto kStopGrace = 5s;      // a worker told to stop has exited
constexpr auto kFifoLimit = 5s;      // a worker's failpoint fifo answers
constexpr auto kCommandLimit = 1s;   // one failpoint command answered
constexpr size_t kStderrTail = 4000;

long long nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

double cpuSeconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Worker {
  std::string role;
  std::unique_ptr<chaos::Process> proc;
  chaos::FifoControl fifo;
  std::string fifo_dir;
  std::string out_buf;
  std::string err_tail;
  bool ready = false;
  bool fifo_wanted = false;
  bool fifo_unavailable = false;
  bool killed_by_scenario = false;
  bool stopped = false;                   // told to stop at the end
  bool out_eof = false, err_eof = false;  // pipes closed: no longer polled
  int starts = 0;
};

class Run {
 public:
  Run(const Scenario& s, const RunOptions& o) : s_(s), o_(o) {}

  RunResult go() {
    res_.record.duration = static_cast<double>(s_.duration.count()) / 1000.0;
    const double cpu0 = cpuSeconds(RUSAGE_SELF);
    const double child0 = cpuSeconds(RUSAGE_CHILDREN);
    t0_ns_ = nowNs();
    prepare();
    if (res_.outcome == RunOutcome::kCompleted) startAll();
    if (res_.outcome == RunOutcome::kCompleted) waitReady();
    if (res_.outcome == RunOutcome::kCompleted) {
      res_.record.startup = static_cast<double>(nowNs() - t0_ns_) / 1e9;
      t0_ns_ = nowNs();
      play();
    }
    stopAll();
    cleanup();
    res_.record.harness_cpu = cpuSeconds(RUSAGE_SELF) - cpu0;
    res_.record.workers_cpu = cpuSeconds(RUSAGE_CHILDREN) - child0;
    return std::move(res_);
  }

 private:
  void fail(RunOutcome o, const std::string& why) {
    if (res_.outcome == RunOutcome::kCompleted) {
      res_.outcome = o;
      res_.why = why;
    }
    res_.record.harness_errors.push_back(why);
  }

  bool interrupted() const { return o_.interrupted != nullptr && o_.interrupted->load(); }

  void prepare() {
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
      for (const auto& [w, rank] : r.ranks) any_nccl |= s_.worlds.at(w).backend == "nccl";
      std::string dev = r.device;
      if (dev == "auto") dev = any_nccl ? "gpu" : "cpu";
      if (dev == "gpu") {
        if (o_.gpus <= 0) {
          fail(RunOutcome::kUnavailable,
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
    if (!hosts.empty()) {
      auto net = chaos::SimNet::create(hosts);
      if (!net.ok()) {
        fail(net.status().code() == Code::kUnavailable ? RunOutcome::kUnavailable
                                                       : RunOutcome::kHarnessError,
             "simulated hosts: " + net.status().message());
        return;
      }
      net_ = std::move(*net);
    }
    for (const auto& a : s_.timeline) {
      if (a.kind == "failpoint" && chaos::isPosixPoint(a.point)) posix_roles_.insert(a.role);
      if (a.kind == "failpoint" || a.kind == "clear_failpoint") fifo_roles_.insert(a.role);
      // A delay may have to fall back to the runtime's delay failpoint (no netem).
      if (a.kind == "delay") {
        for (const auto& [name, r] : s_.roles) {
          if (r.host == a.host) fifo_roles_.insert(name);
        }
      }
    }
    // Every world of this run gets this run's random token: other local processes cannot join
    // or disturb them. It reaches the workers in their environment, never on a command line.
    auto token = mw::randomStoreToken();
    if (!token.ok()) {
      fail(RunOutcome::kHarnessError, "making the run's store token: " + token.status().message());
      return;
    }
    token_env_ = std::string(chaos::kTokenVariable) + "=" + *token;
    if (!posix_roles_.empty()) {
      auto preload = chaos::posixPreload();
      if (!preload.ok()) {
        fail(RunOutcome::kUnavailable, preload.status().message());
        return;
      }
      const char* theirs = std::getenv("LD_PRELOAD");
      posix_env_ = "LD_PRELOAD=" + *preload +
                   (theirs != nullptr && *theirs != '\0' ? " " + std::string(theirs) : "");
    }
    for (const auto& a : s_.timeline) {
      res_.record.faults.push_back(FaultRec{a.describe(), a.kind, a.role, a.where,
                                            static_cast<double>(a.at.count()) / 1000.0, -1, -1,
                                            "pending", "", touched(a)});
    }
  }

  std::vector<std::string> touched(const ActionSpec& a) const {
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

  json config(const std::string& role, const std::string& fifo_prefix) const {
    const RoleSpec& r = s_.roles.at(role);
    json c;
    c["role"] = role;
    // Per-role seeds derived from the scenario's: every process draws its own sequence.
    c["seed"] =
        static_cast<unsigned>((s_.seed * 0x9E3779B97F4A7C15ULL) ^ std::hash<std::string>{}(role));
    c["window_ms"] = 100;
    if (!fifo_prefix.empty()) c["fifo_prefix"] = fifo_prefix;
    c["worlds"] = json::array();
    for (const auto& [w, rank] : r.ranks) {
      const WorldSpec& ws = s_.worlds.at(w);
      // The store lives with rank 0: on its simulated host's address, else on loopback.
      std::string store_host = "127.0.0.1";
      if (net_) {
        auto members = s_.membersOf(w);
        store_host = net_->address(s_.roles.at(members.at(0)).host);
      }
      c["worlds"].push_back({{"name", w},
                             {"host", store_host},
                             {"rank", rank},
                             {"size", ws.size},
                             {"port", ports_.at(w)},
                             {"backend", ws.backend},
                             {"device", ws.backend == "nccl" ? devices_.at(role) : "cpu"},
                             {"heartbeat_ms", ws.heartbeat.count()},
                             {"op_timeout_ms", ws.op_timeout.count()},
                             {"rejoin", ws.rejoin},
                             {"start", ws.start}});
    }
    c["traffic"] = json::array();
    for (const auto& t : s_.traffic) {
      for (const auto& w : t.worlds) {
        if (!r.ranks.count(w)) continue;
        std::string pattern = t.pattern == "gather_to_leader" ? "gather"
                              : t.pattern == "ring_allreduce" ? "allreduce"
                                                              : t.pattern;
        c["traffic"].push_back({{"world", w},
                                {"pattern", pattern},
                                {"bytes", t.bytes},
                                {"dtype", t.dtype},
                                {"rate", t.rate},
                                {"root", t.root}});
      }
    }
    return c;
  }

  bool start(const std::string& role) {
    auto& w = workers_[role];
    w.role = role;
    std::string prefix;
    w.fifo_wanted = fifo_roles_.count(role) > 0;
    if (w.fifo_wanted) {
      char dir[] = "/tmp/mwchaos-XXXXXX";
      if (::mkdtemp(dir) == nullptr) {
        fail(RunOutcome::kHarnessError, std::string("mkdtemp: ") + std::strerror(errno));
        return false;
      }
      w.fifo_dir = dir;
      prefix = w.fifo_dir + "/fiu";
    }
    const std::string netns = net_ ? net_->netns(s_.roles.at(role).host) : "";
    std::vector<std::string> env{token_env_};
    if (posix_roles_.count(role)) env.push_back(posix_env_);  // libfiu's POSIX preload
    auto p = chaos::Process::spawn({o_.worker_path, "--config", config(role, prefix).dump()}, netns,
                                   env);
    if (!p.ok()) {
      fail(RunOutcome::kHarnessError, "starting role '" + role + "': " + p.status().message());
      return false;
    }
    w.proc = std::move(*p);
    w.ready = false;
    w.out_eof = w.err_eof = false;
    w.out_buf.clear();
    ++w.starts;
    return true;
  }

  void startAll() {
    for (const auto& [name, r] : s_.roles) {
      if (!start(name)) return;
    }
  }

  double rel(long long t_ns) const { return static_cast<double>(t_ns - t0_ns_) / 1e9; }

  void finishWorker(Worker& w) {
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
    res_.record.workers.push_back(rec);
    removeFifoDir(w);
  }

  void removeFifoDir(Worker& w) {
    if (w.fifo_dir.empty()) return;
    // libfiu's fifos are unlinked once opened; remove them too when they never were.
    if (w.proc) {
      std::string base = w.fifo_dir + "/fiu-" + std::to_string(w.proc->pid());
      ::unlink((base + ".in").c_str());
      ::unlink((base + ".out").c_str());
    }
    ::rmdir(w.fifo_dir.c_str());
    w.fifo_dir.clear();
  }

  void readAll(Worker& w) {
    if (!w.proc) return;
    std::string got;
    if (!w.out_eof && !w.proc->readStdout(&got)) w.out_eof = true;
    w.out_buf += got;
    size_t nl;
    while ((nl = w.out_buf.find('\n')) != std::string::npos) {
      std::string line = w.out_buf.substr(0, nl);
      w.out_buf.erase(0, nl + 1);
      handleLine(w, line);
    }
    std::string err;
    if (!w.err_eof && !w.proc->readStderr(&err)) w.err_eof = true;
    if (!err.empty()) {
      if (o_.verbosity >= 2) std::fprintf(stderr, "[%s stderr] %s", w.role.c_str(), err.c_str());
      w.err_tail += err;
      if (w.err_tail.size() > kStderrTail) w.err_tail.erase(0, w.err_tail.size() - kStderrTail);
    }
  }

  // A line the worker wrote that cannot be read is an error in the report, never a crash.
  void handleLine(Worker& w, const std::string& line) {
    if (o_.verbosity >= 2) std::fprintf(stderr, "[%s] %s\n", w.role.c_str(), line.c_str());
    auto parsed = chaos::lines::parse(line);
    if (!parsed.ok()) {
      res_.record.harness_errors.push_back("role '" + w.role + "' wrote a line that is not " +
                                           "the worker protocol (" + parsed.status().message() +
                                           "): '" + line.substr(0, 200) + "'");
      return;
    }
    std::visit([&](auto& l) { take(w, l); }, *parsed);
  }

  void take(Worker& w, const chaos::lines::Metrics& l) {
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
  void take(Worker& w, const chaos::lines::Cpu& l) {
    res_.record.cpu[w.role].push_back(
        {rel(l.t_ns), static_cast<double>(l.cpu_ns) / 1e9, static_cast<double>(l.wait_ns) / 1e9});
  }
  void take(Worker& w, const chaos::lines::Event& l) {
    EventRec e;
    e.t = rel(l.t_ns);
    e.role = w.role;
    e.world = l.world;
    e.kind = l.kind;
    e.generation = l.generation;
    e.cause = l.cause;
    e.peer = l.peer;
    e.detail = l.detail;
    res_.record.events.push_back(e);
    state_[e.world + "/" + w.role] = e.kind;
  }
  // A join that failed (the worker tries again): an event of its own, with the error.
  void take(Worker& w, const chaos::lines::JoinFail& l) {
    EventRec e;
    e.t = rel(l.t_ns);
    e.role = w.role;
    e.world = l.world;
    e.kind = "join_failed";
    e.detail = l.status;
    res_.record.events.push_back(e);
  }
  void take(Worker& w, const chaos::lines::Ready&) { w.ready = true; }
  void take(Worker& w, const chaos::lines::Fifo& l) {
    if (l.path.empty()) {
      w.fifo_unavailable = true;
      return;
    }
    auto c = chaos::FifoControl::open(l.path, deadlineIn(kFifoLimit));
    if (!c.ok()) {
      res_.record.harness_errors.push_back("role '" + w.role + "': " + c.status().message());
    } else {
      w.fifo = std::move(*c);
    }
    removeFifoDir(w);
  }
  void take(Worker& w, const chaos::lines::Error& l) {
    if (l.message.rfind("unavailable", 0) == 0 && !w.ready) {
      fail(RunOutcome::kUnavailable, "role '" + w.role + "': " + l.message);
    } else {
      res_.record.harness_errors.push_back("role '" + w.role + "': " + l.message);
    }
  }

  // Polls every worker's pipes for up to `ms`.
  void pump(int ms) {
    std::vector<pollfd> fds;
    for (auto& [role, w] : workers_) {
      if (!w.proc) continue;
      if (!w.out_eof) fds.push_back({w.proc->stdoutFd(), POLLIN, 0});
      if (!w.err_eof) fds.push_back({w.proc->stderrFd(), POLLIN, 0});
    }
    if (!fds.empty())
      ::poll(fds.data(), fds.size(), ms);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (auto& [role, w] : workers_) readAll(w);
  }

  void waitReady() {
    const auto until = deadlineIn(kStartupLimit);
    for (;;) {
      pump(20);
      if (res_.outcome != RunOutcome::kCompleted) return;
      bool all = true;
      for (auto& [role, w] : workers_) {
        if (w.proc && w.proc->poll() && !w.ready) {
          readAll(w);
          if (res_.outcome != RunOutcome::kCompleted) return;
          fail(RunOutcome::kHarnessError,
               "role '" + role + "' " + w.proc->exitText() +
                   " before it joined its worlds: " + lastLines(w.err_tail));
          return;
        }
        all &= w.ready;
      }
      if (all) return;
      if (interrupted()) {
        res_.outcome = RunOutcome::kInterrupted;
        res_.record.interrupted = true;
        return;
      }
      if (Clock::now() >= until) {
        std::string missing;
        for (auto& [role, w] : workers_) {
          if (!w.ready) missing += (missing.empty() ? "" : ", ") + role;
        }
        fail(RunOutcome::kHarnessError, "roles did not join their worlds within 60 s: " + missing);
        return;
      }
    }
  }

  static std::string lastLines(const std::string& s) {
    std::string t = s.size() > 600 ? s.substr(s.size() - 600) : s;
    for (char& c : t) {
      if (c == '\n') c = ' ';
    }
    return t.empty() ? "(no output)" : t;
  }

  void act(size_t i) {
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

  // No netem: delay every operation of the host's roles through the runtime's delay failpoint
  // (mw/<backend>/delay/<world>), which models latency per operation rather than per packet.
  Status delayByFailpoint(const ActionSpec& a, FaultRec& f, const Status& netem) {
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

  void clearDelays() {
    for (const auto& [role, point] : delays_) {
      Worker& w = workers_[role];
      if (w.fifo.isOpen())
        w.fifo.command(chaos::disableCommand(point), deadlineIn(kCommandLimit)).ignore();
    }
    delays_.clear();
  }

  void progress(bool final_line) {
    if (o_.verbosity < 1) return;
    const double t = rel(nowNs());
    int healthy = 0, broken = 0;
    double rate = 0;
    for (const auto& [name, ws] : s_.worlds) {
      bool any_broken = false;
      for (const auto& role : s_.membersOf(name)) {
        auto it = state_.find(name + "/" + role);
        if (it != state_.end() && it->second == "broken") any_broken = true;
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

  // Samples the machine's busy CPU time every 100 ms or so (throughput verdicts tell load from
  // outside the scenario by it).
  void sampleMachine() {
    const long long now = nowNs();
    if (now < next_machine_ns_) return;
    next_machine_ns_ = now + 100000000LL;
    const double busy = chaos::machineBusySeconds();
    if (busy < 0) return;
    if (machine_base_ < 0) machine_base_ = busy;
    res_.record.machine.push_back({rel(now), busy - machine_base_});
  }

  void play() {
    size_t next = 0;
    res_.record.machine_cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
    const long long end_ns = t0_ns_ + s_.duration.count() * 1000000LL;
    long long next_progress = t0_ns_;
    const long long progress_every = o_.tty ? 250000000LL : 1000000000LL;
    while (nowNs() < end_ns) {
      if (interrupted()) {
        res_.outcome = RunOutcome::kInterrupted;
        res_.record.interrupted = true;
        break;
      }
      while (next < s_.timeline.size() &&
             nowNs() >= t0_ns_ + s_.timeline[next].at.count() * 1000000LL) {
        act(next++);
      }
      long long wake = end_ns;
      if (next < s_.timeline.size())
        wake = std::min(wake, t0_ns_ + s_.timeline[next].at.count() * 1000000LL);
      // Rounded up (waitMillis): rounded down, the last fraction of a millisecond before an
      // action was a zero timeout, and this loop spun through it.
      int ms = static_cast<int>(std::min<long long>(
          mw::waitMillis(std::chrono::nanoseconds(wake - nowNs())).count(), 20));
      pump(ms);
      sampleMachine();
      for (auto& [role, w] : workers_) {
        if (w.proc && w.proc->poll() && !w.killed_by_scenario && !w.stopped) {
          readAll(w);
          res_.record.harness_errors.push_back("role '" + role + "' " + w.proc->exitText() +
                                               " unexpectedly: " + lastLines(w.err_tail));
          w.stopped = true;
        }
      }
      if (nowNs() >= next_progress) {
        progress(false);
        next_progress += progress_every;
      }
    }
    // Actions planned for the very end still happen.
    while (!res_.record.interrupted && next < s_.timeline.size()) act(next++);
    res_.record.elapsed = rel(nowNs());
    if (o_.tty) progress(true);  // ends the redrawn line
  }

  void stopAll() {
    for (auto& [role, w] : workers_) {
      if (!w.proc || w.proc->poll()) continue;
      w.proc->signal(SIGCONT);  // a paused worker must run to stop
      w.proc->tell("stop");
      w.proc->closeStdin();
      w.stopped = true;
    }
    const auto until = deadlineIn(kStopGrace);
    for (;;) {
      bool all = true;
      for (auto& [role, w] : workers_) all &= !w.proc || w.proc->poll();
      if (all || Clock::now() >= until) break;
      pump(10);
    }
    for (auto& [role, w] : workers_) {
      if (!w.proc) continue;
      if (!w.proc->poll()) {
        w.proc->killAndReap();
        hung_.insert(role);
      }
      finishWorker(w);
      if (hung_.count(role)) res_.record.workers.back().hung = true;
    }
  }

  void cleanup() {
    for (auto& [role, w] : workers_) {
      if (!w.proc) continue;
      // The worker is reaped, but processes of its group (its own children) may take a moment
      // to die after the group's SIGKILL: give them a second, then count what is left.
      const pid_t group = w.proc->pid();
      const auto until = deadlineIn(1s);
      int alive = chaos::aliveInGroup(group);
      while (alive > 0 && Clock::now() < until) {
        ::kill(-group, SIGKILL);
        std::this_thread::sleep_for(5ms);
        alive = chaos::aliveInGroup(group);
      }
      res_.record.leftover_processes += alive;
      w.proc.reset();
    }
    if (net_) {
      // The holders die with net_, and the kernel removes each namespace with its veths, bridge
      // and rules once nothing is left in it: count any that some process still holds.
      auto inodes = net_->namespaceInodes();
      net_.reset();
      res_.record.leftover_namespaces = chaos::namespacesAlive(inodes);
    }
    for (auto& [role, w] : workers_) {
      if (!w.fifo_dir.empty()) {
        struct stat st {};
        if (::stat(w.fifo_dir.c_str(), &st) == 0) res_.record.leftover_files.push_back(w.fifo_dir);
      }
    }
  }

  const Scenario& s_;
  const RunOptions& o_;
  RunResult res_;
  long long t0_ns_ = 0;
  long long next_machine_ns_ = 0;
  double machine_base_ = -1;
  std::map<std::string, uint16_t> ports_;
  std::map<std::string, std::string> devices_;
  std::set<std::string> fifo_roles_;
  std::set<std::string> posix_roles_;  // started with libfiu's POSIX preload
  std::string token_env_;              // "MW_CHAOS_STORE_TOKEN=<this run's token>"
  std::string posix_env_;              // "LD_PRELOAD=..." for them
  std::map<std::string, Worker> workers_;
  std::unique_ptr<chaos::SimNet> net_;
  std::vector<std::pair<std::string, std::string>>
      delays_;  // role, delay failpoint enabled  // simulated hosts, when the scenario places roles
                // on them
  std::map<std::string, std::string> state_;  // world/role -> last event kind
  std::map<std::string, double> last_bytes_;  // world/role -> last window's bytes
  std::set<std::string> hung_;
};

}  // namespace

RunResult runScenario(const Scenario& s, const RunOptions& options) {
  Run run(s, options);
  return run.go();
}

}  // namespace mw::harness
