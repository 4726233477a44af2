// What one run of a scenario recorded: worker events and metrics, faults with their planned,
// sent and acknowledged times, how each worker ended, and what the harness itself saw. Times are
// seconds since the run's start (every worker joined), on the monotonic clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/scenario.h"
#include "multiworld/status.h"
#include "multiworld/world_manager.h"

namespace mw::harness {

// What a worker reported of a world: the runtime's world events, and joins that failed.
enum class EventKind : uint8_t { kCreated, kBroken, kRemoved, kJoinFailed };
// "created", "broken", "removed", "join_failed".
const char* eventKindText(EventKind k);
// The kind eventKindText printed as `name`, or nullopt.
std::optional<EventKind> parseEventKindText(std::string_view name);
// The record's kind of a runtime world event.
EventKind eventKindOf(WorldEvent::Kind k);

struct EventRec {
  double t = 0;
  std::string role;
  std::string world;
  EventKind kind = EventKind::kCreated;  // join_failed: detail holds the error
  uint64_t generation = 0;
  Cause cause = Cause::kNone;  // for broken
  int peer = -1;
  std::string detail;
};

// One 100 ms window of one world in one role.
struct WindowRec {
  double t = 0;  // end of the window
  uint64_t generation = 0;
  double bytes = 0;
  double ops = 0;
  double lat_sum_ns = 0;
  double lat_max_ns = 0;
};

// One 100 ms window of one role's worker process: the CPU its threads got and how long they were
// runnable but waited for a CPU (kernel schedstat), in seconds.
struct CpuRec {
  double t = 0;  // end of the window
  double cpu = 0;
  double wait = 0;
};

// The whole machine's busy CPU-seconds (every process) counted from the run's start, at time t.
struct MachineRec {
  double t = 0;
  double busy = 0;
};

// What became of a fault the timeline planned.
enum class FaultOutcome : uint8_t {
  kPending,  // not sent (yet)
  kOk,       // delivered
  kError,    // could not be delivered: FaultRec::why says why (the run is judged an error)
  kSkipped,  // this machine or build cannot do it: FaultRec::why says what is missing
};

// How late a fault may take effect before the run and its judge take its real time instead of
// its planned one (seconds): a network fault acknowledged this much or more after it was sent
// moves the rest of the timeline (Run::play), and detection then counts from its acknowledgement;
// likewise from the kernel's close of a killed process's sockets (checks::detection). Below it,
// the harness's own scheduling delay would be credited to the survivors.
inline constexpr double kFaultLateS = 0.020;

struct FaultRec {
  std::string action;  // ActionSpec::describe()
  FaultKind kind = FaultKind::kKill;
  std::string role;   // "" for a network fault
  std::string where;  // file:line in the scenario
  double planned = 0;
  double sent = -1;   // -1: never sent
  double acked = -1;  // failpoints: when the worker's libfiu answered; others: = sent
  FaultOutcome outcome = FaultOutcome::kPending;
  std::string why;                  // for kError and kSkipped
  std::string note;                 // how it was done, when not the obvious way
  std::vector<std::string> worlds;  // the worlds it touches
  bool ends_role = false;  // it ended the role's process: a restart, or a signal that ends it
  // For a fault that ended the role's process: when the harness saw that process's files closed
  // (its sockets close in the same step of the kernel's exit), -1 until then. On a starved
  // machine the kernel can take a second or more after SIGKILL to get there; until it does, no
  // peer can see the death except by silence (docs/scenarios.md, "detected_within").
  double gone = -1;

  bool delivered() const { return outcome == FaultOutcome::kOk && sent >= 0; }
  // The report's form: "ok", "pending", "error: <why>" or "skipped: <why>".
  std::string outcomeText() const;
  // Sets outcome and why from outcomeText()'s form; false when `text` is not of it.
  bool setOutcome(const std::string& text);
};

struct WorkerRec {
  std::string role;
  int pid = 0;
  int starts = 0;
  std::string exit;   // "exited 0", "killed by SIGKILL"
  bool hung = false;  // did not exit within the grace after stop
  bool killed_by_scenario = false;
  std::string stderr_tail;
  std::string stdout_tail;  // a program role's stdout (a worker's stdout is the protocol)
};

// An operation of the built-in traffic that completed with content other than it must have
// (mw_worker checks every element it receives: chaos/traffic_check.h). expect.data_intact.
struct ViolationRec {
  double t = 0;  // when the operation completed
  std::string role;
  std::string world;
  uint64_t generation = 0;  // the role's count of the world's incarnations
  std::string op;           // "recv", "broadcast", "all_reduce"
  uint64_t seq = 0;         // the operation's number in the incarnation, from 0
  uint64_t offset = 0;      // the first wrong element
  uint64_t wrong = 0;       // how many elements were wrong
  double expected = 0;      // the first wrong element's value as it should be
  double found = 0;         // and as it was (may be nan or inf)
  std::string detail;       // whose content, and what arrived instead when known
};

// What one role received and checked in one world, over the whole run.
struct CheckedRec {
  double ops = 0;         // operations with every element right
  double bytes = 0;       // their bytes
  double violations = 0;  // operations with wrong content (a ViolationRec each, up to 100)
};

// One of a program role's own checks (mw::reportCheck), over the whole run. expect.app_checks.
struct AppCheckRec {
  double passed = 0;
  double failed = 0;
  double first_failure_t = -1;  // when the first failure's window ended; -1: none failed
  std::string first_failure;    // its detail
};

// One operation of a role's traffic in the run's history (mwchaos run --history; docs/scenarios.md,
// "The operation history").
struct HistoryOpRec {
  double start = 0, end = 0;  // seconds from the start
  std::string world;
  uint64_t generation = 0;  // the role's count of the world's incarnations
  std::string op;           // "send", "recv", "broadcast", "all_reduce"
  int peer = -1;            // the destination, source or root; -1 for an all-reduce
  uint64_t seq = 0;         // the operation's number in the incarnation (ViolationRec::seq)
  std::string outcome;      // "ok", "unchecked", "violation", or the failure's code name
};

// One role's history: its operations in the order they ended, up to the run's limit.
struct RoleHistoryRec {
  std::vector<HistoryOpRec> ops;
  std::optional<double> full_at;  // when the first operation left out began; empty: none was
};

// The key in RunRecord::windows of a program's own metric `name` (its value in WindowRec::bytes).
// World names cannot hold ':', so the keys never meet.
inline std::string appSeries(const std::string& name) { return "app:" + name; }

// A host agent of the run (docs/hosts.md): where it ran, and how its clock was placed on the
// controller's. Times its roles wrote are moved by offset_ms, and are right to within
// uncertainty_ms (0 when the host shares the controller's clock).
struct HostRec {
  std::string name;         // the scenario's host; "local" for this machine without one
  std::string launcher;     // local, netns, ssh, slurm
  std::string node;         // the agent's host name (uname)
  bool same_clock = false;  // the controller's own clock: times taken as they are
  double offset_ms = 0;     // agent clock - controller clock
  double uncertainty_ms = 0;
  double rtt_ms = 0;    // the round trip of the best clock sample
  std::string address;  // the data-plane address its peers reach it by, resolved ("" here)
};

struct RunRecord {
  double duration = 0;  // planned, seconds
  double elapsed = 0;   // from start to the end of the timeline
  double startup = 0;   // seconds until every worker had joined
  bool interrupted = false;
  std::vector<std::string> harness_errors;
  std::vector<EventRec> events;
  // world (or appSeries(metric)) -> role -> windows
  std::map<std::string, std::map<std::string, std::vector<WindowRec>>> windows;
  std::map<std::string, std::vector<CpuRec>> cpu;  // role -> its process's windows
  std::vector<ViolationRec> violations;            // in the order they were reported
  std::map<std::string, std::map<std::string, CheckedRec>> checked;      // world -> role -> totals
  std::map<std::string, std::map<std::string, AppCheckRec>> app_checks;  // role -> name -> totals
  int64_t history_limit = 0;  // operations a role's history may hold; 0: no history was kept
  std::map<std::string, RoleHistoryRec> history;  // role -> its history (mw_worker roles only)
  std::vector<MachineRec> machine;                // sampled about every 100 ms
  int machine_cpus = 0;                           // CPUs online
  std::vector<FaultRec> faults;
  std::vector<WorkerRec> workers;
  int leftover_processes = 0;
  int leftover_namespaces = 0;  // simulated hosts' network namespaces still alive after the run
  std::vector<std::string> leftover_files;
  std::vector<HostRec> hosts;  // the agents; empty in reports of runs before them
  double harness_cpu = 0;      // seconds of CPU the harness used
  double workers_cpu = 0;      // seconds of CPU its workers used

  // Whether time `t` (seconds from the start) is within the run: from the start to the end of the
  // timeline, and never past the planned duration (stopping the workers afterwards ends every
  // world; what they report then is no verdict's business). Events outside are reported, not
  // judged (`in_run` in the report).
  bool inRun(double t) const {
    const double end = duration > 0 ? std::min(elapsed, duration) : elapsed;
    return t >= 0 && t <= end;
  }

  // Moves time zero `seconds` later: every time recorded so far (events, windows, CPU and machine
  // samples, faults, the history) is made relative to the new zero. What was recorded before the
  // new zero (a program's windows and events while the others were still joining) gets negative
  // times, outside inRun(), so every series stays in time order.
  void shiftTimes(double seconds);

  // How far off the times of `host`'s roles may be (ms): its agent's clock uncertainty, 0 when it
  // shares the controller's clock or is not known. ("" is this machine: "local".)
  double clockUncertaintyMs(const std::string& host) const;
};

// The first place where a series of the record goes back in time: "windows of world W at role R:
// window i at t=a s after t=b s" (the same for CPU and machine samples), or "" when none does.
// The checkers judge a record where this is not "" the harness's error (model/checkers).
std::string timeOrderError(const RunRecord& r);

}  // namespace mw::harness
