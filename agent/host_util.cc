#include "agent/host_util.h"

#include <dirent.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "chaos/host_rules.h"
#include "chaos/process.h"

namespace mw::agent {

std::string firstLine(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

int countGpus() {
  int n = 0;
  if (DIR* d = ::opendir("/dev")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
          name.find_first_not_of("0123456789", 6) == std::string::npos) {
        ++n;
      }
    }
    ::closedir(d);
  }
  return n;
}

bool removeDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

bool insideFolders(const std::string& path, const std::vector<std::string>& folders) {
  for (const auto& f : folders) {
    if (f.empty() || path.size() <= f.size() + 1 || path.compare(0, f.size(), f) != 0 ||
        path[f.size()] != '/') {
      continue;
    }
    const std::string name = path.substr(f.size() + 1);
    if (name.find('/') == std::string::npos && name != "." && name != "..") return true;
  }
  return false;
}

HelloReply helloReply(const std::string& swept) {
  HelloReply h;
  h.build = buildId();
  utsname u{};
  if (::uname(&u) == 0) h.host = u.nodename;
  h.pid = ::getpid();
  h.boot_id = firstLine("/proc/sys/kernel/random/boot_id");
  h.facts["root"] = ::geteuid() == 0 ? "yes" : "no";
  for (const char* tool : {"iptables", "iptables-restore", "tc", "nsenter", "ip"}) {
    const std::string path = chaos::whichProgram(tool);
    h.facts[tool] = path.empty() ? "missing" : path;
  }
  h.facts["gpus"] = std::to_string(countGpus());
  if (!swept.empty()) h.facts["swept"] = swept;
  // Inside an srun step: which one (scancel_step cancels it through slurmctld).
  for (const auto& [fact, var] :
       {std::pair{"slurm_job", "SLURM_JOB_ID"}, std::pair{"slurm_step", "SLURM_STEP_ID"}}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') h.facts[fact] = v;
  }
  return h;
}

std::string routeDevice(const std::string& address) {
  std::string out;
  if (!chaos::runProgram({"ip", "route", "get", address}, std::chrono::seconds(5), &out).ok()) {
    return "";
  }
  std::istringstream words(out);
  for (std::string w; words >> w;) {
    if (w == "dev" && (words >> w)) return w;
  }
  return "";
}

std::string controlPeer() {
  if (const char* c = std::getenv("SSH_CONNECTION"); c != nullptr && *c != '\0') {
    std::istringstream words(c);  // "client_ip client_port server_ip server_port"
    std::string client;
    if (words >> client) return client;
  }
  if (const char* h = std::getenv("SLURM_SRUN_COMM_HOST"); h != nullptr && *h != '\0') return h;
  return "";
}

std::string sweepLeftovers() {
  auto swept = chaos::sweepDeadAgents();
  if (!swept.ok() || (swept->chains + swept->qdiscs == 0 && swept->failed.empty())) return "";
  std::string who;
  for (const auto& o : swept->owners) who += (who.empty() ? "" : ", ") + o;
  std::string out = "removed " + std::to_string(swept->chains) + " chain(s) and " +
                    std::to_string(swept->qdiscs) + " qdisc(s) left by dead agents" +
                    (who.empty() ? "" : " (" + who + ")");
  for (const auto& f : swept->failed) out += "; could not remove " + f;
  return out;
}

int cleanupSignalFd() {
  constexpr int kCleanupSignals[] = {SIGHUP,  SIGINT,    SIGQUIT, SIGABRT,   SIGUSR1,
                                     SIGUSR2, SIGALRM,   SIGTERM, SIGSTKFLT, SIGXCPU,
                                     SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,     SIGPWR};
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : kCleanupSignals) sigaddset(&mask, sig);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  return ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

int killRoles(const std::vector<chaos::Process*>& procs, std::chrono::milliseconds limit,
              bool stall, int* left) {
  int killed = 0;
  for (chaos::Process* p : procs) {
    if (!p->poll()) {
      p->signal(SIGKILL);
      ++killed;
    }
  }
  std::vector<bool> reaped(procs.size(), false);
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    *left = 0;
    for (size_t i = 0; i < procs.size(); ++i) {
      if (reaped[i]) continue;
      const bool exited = !stall && procs[i]->poll();
      if (exited && chaos::aliveInGroup(procs[i]->pid()) == 0) {
        procs[i]->release();
        reaped[i] = true;
        continue;
      }
      procs[i]->killGroup();  // its leader, unreaped, still holds the group's id
      ++*left;
    }
    if (*left == 0 || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!reaped[i]) procs[i]->abandon();  // never waited for again (the kernel has it)
  }
  return killed;
}

TestHooks TestHooks::fromEnv() {
  TestHooks h;
  const char* stall = std::getenv("MW_AGENT_TEST_STALL_REAP");
  h.stall_reap = stall != nullptr && std::string(stall) == "1";
  if (const char* d = std::getenv("MW_AGENT_TEST_NET_DELAY_MS"); d != nullptr) {
    h.net_delay_ms = std::clamp(std::atoi(d), 0, 10'000);
  }
  if (const char* p = std::getenv("MW_AGENT_TEST_NET_FAIL_PEER"); p != nullptr) h.net_fail_peer = p;
  return h;
}

}  // namespace mw::agent
