#include "chaos/cpu_meter.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace mw::chaos {

CpuMeter::Delta CpuMeter::sample() {
  Delta d;
  std::map<long, Seen> now;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) {
    d.available = false;
    return d;
  }
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;  // "." and ".."
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", tid);
    FILE* f = std::fopen(path, "re");
    if (f == nullptr) continue;  // the thread ended meanwhile
    long long cpu = 0, wait = 0;
    const bool read = std::fscanf(f, "%lld %lld", &cpu, &wait) == 2;
    std::fclose(f);
    if (!read) continue;
    now[tid] = {cpu, wait};
    auto it = last_.find(tid);
    const Seen before = it == last_.end() ? Seen{} : it->second;
    // A tid reused by a new thread starts below the old one's counters: count it from zero.
    d.cpu_ns += cpu >= before.cpu ? cpu - before.cpu : cpu;
    d.wait_ns += wait >= before.wait ? wait - before.wait : wait;
  }
  ::closedir(dir);
  if (now.empty()) d.available = false;
  last_ = std::move(now);
  return d;
}

double machineBusySeconds() {
  FILE* f = std::fopen("/proc/stat", "re");
  if (f == nullptr) return -1;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system,
                            &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  const long tick = ::sysconf(_SC_CLK_TCK);
  if (n < 4 || tick <= 0) return -1;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(tick);
}

}  // namespace mw::chaos
