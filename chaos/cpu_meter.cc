#include "chaos/cpu_meter.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mw::chaos {

namespace {

// The thread count of the process at `proc` (its stat's 20th field), or -1.
long threadCount(const std::string& proc) {
  int fd = ::open((proc + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  if (p == nullptr) return -1;
  long threads = -1;
  // After ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice num_threads
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %ld",
                  &threads) != 1) {
    return -1;
  }
  return threads;
}

}  // namespace

CpuMeter::~CpuMeter() {
  for (auto& [tid, t] : threads_) ::close(t.fd);
}

void CpuMeter::discover() {
  DIR* dir = ::opendir((proc_ + "/task").c_str());
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || threads_.count(tid)) continue;
    const std::string path = proc_ + "/task/" + std::to_string(tid) + "/schedstat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) threads_[tid] = {fd, 0, 0};
  }
  ::closedir(dir);
}

CpuMeter::Delta CpuMeter::sample() {
  Delta d;
  // The task list is read only when the thread count changed; each thread's file stays open and
  // is read again from its start (one pread per thread and window, no path lookups).
  const long count = threadCount(proc_);
  if (count != known_threads_) {
    discover();
    known_threads_ = count;
  }
  for (auto it = threads_.begin(); it != threads_.end();) {
    char buf[128];
    ssize_t n = ::pread(it->second.fd, buf, sizeof(buf) - 1, 0);
    long long cpu = 0, wait = 0;
    if (n > 0) buf[n] = '\0';
    if (n <= 0 || std::sscanf(buf, "%lld %lld", &cpu, &wait) != 2) {
      ::close(it->second.fd);  // the thread ended
      it = threads_.erase(it);
      continue;
    }
    Thread& t = it->second;
    d.cpu_ns += cpu >= t.cpu ? cpu - t.cpu : cpu;
    d.wait_ns += wait >= t.wait ? wait - t.wait : wait;
    t.cpu = cpu, t.wait = wait;
    ++it;
  }
  if (threads_.empty()) d.available = false;
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
