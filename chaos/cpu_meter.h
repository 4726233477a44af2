// CpuMeter: how much CPU a process's threads got, and how long they waited for one, from the
// kernel's per-thread scheduler statistics (/proc/<pid>/task/<tid>/schedstat: time on a CPU, time
// runnable on a run queue). The chaos worker reports both for each metrics window about itself,
// and the harness measures a program role's process from outside the same way, so that a
// throughput verdict can tell a survivor slowed by a fault from one starved by the machine.
//
// Thread rules: one thread calls sample(); the object is not shared.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace mw::chaos {

class CpuMeter {
 public:
  struct Delta {
    int64_t cpu_ns = 0;     // time this process's threads ran
    int64_t wait_ns = 0;    // time they were runnable but waited for a CPU
    bool available = true;  // false: the kernel gives no schedstat (then both are 0)
  };

  // The CPU and wait time of the process's threads since the previous call (since construction
  // for the first). Threads that ended between two calls lose their last part; threads that began
  // count from their start. A process that is gone gives zeros.
  Delta sample();

  // Meters process `pid` (this process when 0).
  explicit CpuMeter(int pid = 0)
      : proc_(pid == 0 ? std::string("/proc/self") : "/proc/" + std::to_string(pid)) {
    sample();
  }
  ~CpuMeter();
  CpuMeter(const CpuMeter&) = delete;
  CpuMeter& operator=(const CpuMeter&) = delete;

 private:
  struct Thread {
    int fd = -1;  // its schedstat file, kept open and read again from the start
    int64_t cpu = 0, wait = 0;
  };
  void discover();                  // opens the schedstat of threads not yet known
  const std::string proc_;          // "/proc/self" or "/proc/<pid>"
  std::map<long, Thread> threads_;  // tid -> its file and counters at the previous sample
  long known_threads_ = -2;
};

// CPU-seconds the whole machine's CPUs have been busy since boot (every process, the kernel
// included: /proc/stat's user, nice, system, irq, softirq and steal), or -1 when unreadable. The
// difference of two readings, less what a scenario's own processes used, is the load that came
// from outside the scenario. Resolution: the kernel's clock tick (10 ms here).
double machineBusySeconds();

}  // namespace mw::chaos
