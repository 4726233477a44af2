// What one run of a scenario recorded: worker events and metrics, faults with their planned,
// sent and acknowledged times, how each worker ended, and what the harness itself saw. Times are
// seconds since the run's start (every worker joined), on the monotonic clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mw::harness {

struct EventRec {
  double t = 0;
  std::string role;
  std::string world;
  std::string kind;  // created | broken | removed | join_failed (detail: the error)
  uint64_t generation = 0;
  std::string cause;  // for broken
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

struct FaultRec {
  std::string action;  // ActionSpec::describe()
  std::string kind;
  std::string role;
  std::string where;  // file:line in the scenario
  double planned = 0;
  double sent = -1;                 // -1: never sent
  double acked = -1;                // failpoints: when the worker's libfiu answered; others: = sent
  std::string outcome = "pending";  // ok | error: ... | skipped: ...
  std::string note;                 // how it was done, when not the obvious way
  std::vector<std::string> worlds;  // the worlds it touches
  bool ends_role = false;  // it ended the role's process: a restart, or a signal that ends it
};

struct WorkerRec {
  std::string role;
  int pid = 0;
  int starts = 0;
  std::string exit;   // "exited 0", "killed by SIGKILL"
  bool hung = false;  // did not exit within the grace after stop
  bool killed_by_scenario = false;
  std::string stderr_tail;
};

struct RunRecord {
  double duration = 0;  // planned, seconds
  double elapsed = 0;   // from start to the end of the timeline
  double startup = 0;   // seconds until every worker had joined
  bool interrupted = false;
  std::vector<std::string> harness_errors;
  std::vector<EventRec> events;
  std::map<std::string, std::map<std::string, std::vector<WindowRec>>> windows;  // world -> role
  std::map<std::string, std::vector<CpuRec>> cpu;  // role -> its process's windows
  std::vector<MachineRec> machine;                 // sampled about every 100 ms
  int machine_cpus = 0;                            // CPUs online
  std::vector<FaultRec> faults;
  std::vector<WorkerRec> workers;
  int leftover_processes = 0;
  int leftover_namespaces = 0;  // simulated hosts' network namespaces still alive after the run
  std::vector<std::string> leftover_files;
  double harness_cpu = 0;  // seconds of CPU the harness used
  double workers_cpu = 0;  // seconds of CPU its workers used

  // Whether time `t` (seconds from the start) is within the run: from the start to the end of the
  // timeline, and never past the planned duration (stopping the workers afterwards ends every
  // world; what they report then is no verdict's business). Events outside are reported, not
  // judged (`in_run` in the report).
  bool inRun(double t) const {
    const double end = duration > 0 ? std::min(elapsed, duration) : elapsed;
    return t >= 0 && t <= end;
  }
};

}  // namespace mw::harness
