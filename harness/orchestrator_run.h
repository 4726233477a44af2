// The orchestrator's run of one scenario (internal to the harness): the Run class, declared here
// and defined in three files: orchestrator.cc (preparing, starting and joining the workers, playing
// the timeline, stopping and cleaning up), orchestrator_io.cc (the workers' pipes and lines,
// progress, the machine's CPU samples) and orchestrator_faults.cc (delivering each fault).
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/client.h"
#include "chaos/held_off.h"
#include "chaos/netsim.h"
#include "chaos/worker_config.h"
#include "harness/orchestrator.h"
#include "multiworld/status.h"
#include "multiworld/telemetry_lines.h"

namespace mw::harness::orch {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline constexpr auto kFifoLimit = 5s;  // a worker's failpoint fifo answers
// An agent answers its hello: a new ssh (key exchange, a login shell) to a loaded host, or through
// a bastion, can take seconds; one took over 10 s here beside two CPU hogs.
inline constexpr auto kAgentStart = 30s;
inline constexpr auto kCommandLimit = 1s;  // one failpoint command answered
inline constexpr size_t kStderrTail = 4000;

inline double cpuSeconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Worker {
  std::string role;
  std::unique_ptr<agent::RemoteProcess> proc;  // on its host's agent
  bool fifo_open = false;                      // its libfiu fifo is open (at its agent)
  std::string fifo_dir;                        // on its host
  std::string out_buf;  // protocol lines not yet complete (a program role's telemetry pipe)
  std::string err_tail;
  std::string out_tail;  // a program role's stdout: logs, never parsed
  bool program = false;  // a program role: lines come from its telemetry pipe (fd 3)
  bool ready = false;
  bool fifo_wanted = false;
  bool fifo_unavailable = false;
  bool killed_by_scenario = false;
  bool stopped = false;                   // told to stop at the end
  bool out_eof = false, err_eof = false;  // pipes closed: no longer polled
  bool tel_eof = true;                    // a program role's telemetry pipe closed (or none)
  int ending_fault = -1;  // the fault (index in the run record) ending this process, until gone
  int starts = 0;
};

class Run {
 public:
  Run(const Scenario& s, const RunOptions& o) : s_(s), o_(o) {}

  RunResult go();

 private:
  void fail(Outcome o, const std::string& why);

  bool interrupted() const { return o_.interrupted != nullptr && o_.interrupted->load(); }
  bool forced() const { return o_.forced != nullptr && o_.forced->load(); }
  // The run ends interrupted (unless it had already failed: that outcome stays).
  void markInterrupted();

  void prepare();

  // The worlds a fault touches (FaultRec::worlds).
  std::vector<std::string> touched(const ActionSpec& a) const;
  std::vector<std::string> failpointWorlds(const std::string& role, const std::string& point) const;

  // The role's failpoint seed, derived from the scenario's: every process draws its own sequence.
  unsigned roleSeed(const std::string& role) const;

  // What the role's worker runs (chaos/worker_config.h).
  chaos::WorkerConfig config(const std::string& role, const std::string& fifo_prefix) const;

  bool start(const std::string& role);
  // A program role's command and environment, placeholders expanded (docs/scenarios.md,
  // "Program roles"), with the variables the harness gives it.
  std::vector<std::string> programArgv(const RoleSpec& r) const;
  std::vector<std::string> programEnv(const RoleSpec& r) const;
  // Where each world's store is, and `role`'s device in it (placeholders, worker configs).
  std::map<std::string, StoreAddress> stores(const std::string& role) const;
  // "cpu", or the role's GPU for an nccl world.
  std::string deviceIn(const std::string& role, const WorldSpec& w) const;

  void startAll();

  double rel(long long t_ns) const { return static_cast<double>(t_ns - t0_ns_) / 1e9; }

  void finishWorker(Worker& w);

  // Forgets the worker's process on its host (its folder goes), counting what was left behind.
  void releaseWorker(Worker& w);

  // The agent of a host ("" for this machine without simulated hosts).
  agent::Connection& agentOf(const std::string& host) { return *agents_.at(host); }
  agent::Connection& agentOfRole(const std::string& role) {
    const std::string& host = s_.roles.at(role).host;
    return agentOf(agents_.count(host) ? host : "");
  }
  // Starts one agent per host (prepare()).
  void startAgents();
  // The address a host's peers reach it by ("" for this machine: loopback).
  std::string hostAddress(const std::string& host) const {
    auto it = addresses_.find(host);
    return it == addresses_.end() ? std::string() : it->second;
  }
  // One network request to the agent of `host` (netOnAll()).
  Status netOn(const std::string& host, agent::Net m, std::string* slow = nullptr);
  // netOn() for each (host, request) at once: every request is sent before any answer is
  // awaited, so the hosts act within one round trip of each other, and the wait is the slowest
  // host's. Every request is sent and awaited whatever the others answer; the first error, and
  // when others were done, never kUnavailable (a fault delivered in part is not skipped), its
  // message naming the hosts where it was done. `slow`, when given, is set to the hosts that did
  // it more than 100 ms after it was sent, with the times (for the fault's note), else "".
  Status netOnAll(const std::vector<std::pair<std::string, agent::Net>>& requests,
                  std::string* slow = nullptr);
  // One request's answer and its times (monoNs(), this controller's clock; 0 when unknown).
  struct NetAnswer {
    Status status;        // the answer, or why it was not sent (kInvalidArgument: no agent)
    int64_t sent_ns = 0;  // posted
    int64_t done_ns = 0;  // done at the host (its Reply.t_ns, on this clock)
    int64_t read_ns = 0;  // its answer read here
    int64_t took_ns = 0;  // the host's own time doing it
  };
  // The sending and awaiting of netOnAll(), one answer per request, in its order.
  std::vector<NetAnswer> postAndAwait(
      const std::vector<std::pair<std::string, agent::Net>>& requests);
  // What netOnAll() says in `slow`, from postAndAwait()'s answers.
  static std::string slowHosts(const std::vector<std::pair<std::string, agent::Net>>& requests,
                               const std::vector<NetAnswer>& got);
  // The data-plane addresses of the scenario's other hosts than `host`.
  std::vector<std::string> peersOf(const std::string& host) const;

  void readAll(Worker& w);

  // The worker's files are closed (its stdout reached end of file): the fault that ended it
  // records the time (FaultRec::gone).
  void noteGone(Worker& w);

  // A line the worker wrote that cannot be read is an error in the report, never a crash.
  void handleLine(Worker& w, const std::string& line);

  void take(Worker& w, const telemetry_lines::Metrics& l);
  void take(Worker& w, const telemetry_lines::Cpu& l);
  void take(Worker& w, const telemetry_lines::Event& l);
  // A program role's `created` event names the options it joined with: any that differ from the
  // scenario's world end the run as the harness's error, naming the role, world, option and both
  // values.
  void checkJoinedWith(const Worker& w, const telemetry_lines::Event& l);
  // A join that failed (the worker tries again): an event of its own, with the error.
  void take(Worker& w, const telemetry_lines::JoinFail& l);
  void take(Worker& w, const telemetry_lines::Ready&) { w.ready = true; }
  void take(Worker& w, const telemetry_lines::Fifo& l);
  void take(Worker& w, const telemetry_lines::Error& l);
  // A program's own metric: a series of its own in the record (appSeries(name), this role).
  void take(Worker& w, const telemetry_lines::App& l);
  // What mw_worker checked in a window of a world: added to the role's totals (RunRecord::checked).
  void take(Worker& w, const telemetry_lines::Verified& l);
  // An operation that completed with wrong content: RunRecord::violations.
  void take(Worker& w, const telemetry_lines::Violation& l);
  // One operation of the role's history (RunRecord::history), and the history's end.
  void take(Worker& w, const telemetry_lines::History& l);
  void take(Worker& w, const telemetry_lines::HistoryFull& l);
  // A program's own check in a window: added to the role's totals (RunRecord::app_checks).
  void take(Worker& w, const telemetry_lines::Check& l);

  // Polls every worker's pipes for up to `ms`.
  void pump(int ms);

  void waitReady();

  static std::string lastLines(const std::string& s);
  // What a role wrote last: its stderr's last lines, and a program role's stdout's.
  static std::string lastOutput(const Worker& w);
  // Appends `more` to a tail kept to its last kStderrTail bytes.
  static void keepTail(std::string& tail, const std::string& more);

  // Delivers timeline entry i and records its outcome in the run record's fault i.
  void act(size_t i);
  Status actOnNetwork(const ActionSpec& a, FaultRec& f);
  Status actOnRole(const ActionSpec& a, FaultRec& f);
  // A libfiu command through w's control fifo; kUnavailable when its build has no failpoints.
  // scancel_step: `scancel [--signal=SIG] JOB.STEP` of the step that holds the role's agent.
  Status scancelStep(const ScancelStep& c, Worker& w, FaultRec& f);
  Status fifoCommand(Worker& w, FaultRec& f, const std::string& command);
  // One command through the role's fifo, at its agent.
  Status fifoOn(Worker& w, const std::string& command);

  // No netem: delay every operation of the host's roles through the runtime's delay failpoint
  // (mw/<backend>/delay/<world>), which models latency per operation rather than per packet.
  Status delayByFailpoint(const Delay& d, FaultRec& f, const Status& netem);
  // Before any traffic, the agent of each host a bandwidth or delay fault names readies it
  // (Net "prepare": the device checked and in the agent's owner record), so that the fault at its
  // time runs one tc program and no iptables one; for a delay, whether netem works there too:
  // where it does not, the fault goes straight to delayByFailpoint (no_netem_) instead of trying
  // netem then, which took 0.78 s beside two busy loops. The agent of each host a partition or a
  // loss writes rules on makes its chains (Net "ready"), so that the fault is one iptables-restore
  // program: made at the fault, the chains were about ten programs, each of which could wait
  // seconds on the kernel beside busy CPUs (docs/testing.md, Hunt 23). An error is left for the
  // fault itself to meet and report.
  void prepareNetwork();

  void clearDelays();

  void progress(bool final_line);

  // Samples the machine's busy CPU time every 100 ms or so (throughput verdicts tell load from
  // outside the scenario by it).
  void sampleMachine();

  void play();

  void stopAll();

  void cleanup();

  const Scenario& s_;
  const RunOptions& o_;
  RunResult res_;
  long long t0_ns_ = 0;
  long long next_machine_ns_ = 0;
  double machine_base_ = -1;
  std::map<std::string, uint16_t> ports_;
  std::map<std::string, std::string> devices_;
  std::set<std::string> fifo_roles_;
  std::set<std::string> posix_roles_;   // started with libfiu's POSIX preload
  std::string token_env_;               // "MW_CHAOS_STORE_TOKEN=<this run's token>"
  std::string token_;                   // this run's token
  std::string posix_env_;               // "LD_PRELOAD=..." for them
  std::unique_ptr<chaos::SimNet> net_;  // simulated hosts, when the scenario places roles on them
  // The host agents, by host ("" for this machine): declared before workers_, so that every
  // worker's process is released before its agent goes.
  std::map<std::string, std::unique_ptr<agent::Connection>> agents_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::string> addresses_;  // host -> its data-plane address
  std::set<std::string> lost_agents_;             // hosts whose agent was lost (said once)
  std::set<std::string> ended_steps_;  // hosts whose agent's Slurm step scancel_step ended
  std::map<std::string, std::string> worker_paths_;          // host -> mw_worker there
  std::vector<std::pair<std::string, std::string>> delays_;  // role, delay failpoint enabled
  std::map<std::string, std::string> no_netem_;  // host -> why delay has no netem (prepareNetwork)
  std::map<std::string, EventKind> state_;       // world/role -> last event kind
  std::map<std::string, double> last_bytes_;     // world/role -> last window's bytes
  std::set<std::string> hung_;
};

}  // namespace mw::harness::orch
