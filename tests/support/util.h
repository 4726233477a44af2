// Test support: ports, descriptor and thread counts, time scaling for sanitizer builds.
#pragma once

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "chaos/ports.h"

namespace mw::test {

using mw::chaos::freePort;

inline int countEntries(const char* dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}
inline int openFds() { return countEntries("/proc/self/fd") - 1; }  // minus opendir's own
inline int threadCount() { return countEntries("/proc/self/task"); }

// The names of this process's threads (/proc/self/task/*/comm).
inline std::vector<std::string> threadNames() {
  std::vector<std::string> names;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      names.push_back(name);
    }
    ::closedir(d);
  }
  return names;
}

// Time bounds are multiplied by MW_TEST_TIME_SCALE (sanitizer builds run slower).
inline double timeScale() {
  const char* s = std::getenv("MW_TEST_TIME_SCALE");
  double v = s ? std::atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}
inline std::chrono::milliseconds scaled(long ms) {
  return std::chrono::milliseconds(static_cast<long>(ms * timeScale()));
}

// Path of the test worker binary (set by CTest; falls back to the build layout).
inline std::string workerPath() {
  const char* p = std::getenv("MW_TEST_WORKER");
  return p ? p : "./tests/runtime/mw_test_worker";
}

}  // namespace mw::test
