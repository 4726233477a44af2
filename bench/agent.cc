// The leader's side of agents: spawning, the command line protocol, reaping.
#include "agent.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace mwb {

std::unique_ptr<Agent> Agent::spawn(const std::string& label, int cpu) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw BenchError(std::string("socketpair: ") + std::strerror(errno));
  }
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::string a0 = "mw_bench", a1 = "agent", a2 = "--fd", a3 = "3";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (cpu >= 0) CPU_SET(cpu, &cpus);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw BenchError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    if (cpu >= 0 && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) ::_exit(125);
    if (sv[1] == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else if (::dup2(sv[1], 3) != 3) {
      ::_exit(126);
    }
    ::execv("/proc/self/exe", argv);
    ::_exit(127);
  }
  ::close(sv[1]);
  return std::unique_ptr<Agent>(new Agent(label, pid, sv[0]));
}

Agent::~Agent() {
  if (!dead_) {
    const char quit[] = "quit\n";
    (void)!::send(fd_, quit, sizeof quit - 1, MSG_NOSIGNAL);
    for (int i = 0; i < 3000; ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        dead_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!dead_) {
      ::kill(pid_, SIGKILL);
      reap();
    }
  }
  ::close(fd_);
}

void Agent::reap() {
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  dead_ = true;
}

void Agent::signal(int sig) {
  if (dead_) return;
  ::kill(pid_, sig);
  if (sig == SIGKILL) reap();
}

void Agent::post(const std::string& line) {
  std::string msg = line + "\n";
  for (size_t done = 0; done < msg.size();) {
    ssize_t n = ::send(fd_, msg.data() + done, msg.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw BenchError(label_ + ": agent is gone (sending '" + line + "')");
    done += static_cast<size_t>(n);
  }
}

std::string Agent::reply(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    auto nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      if (line.rfind("err", 0) == 0) throw BenchError(label_ + ": " + line);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) throw BenchError(label_ + ": no answer in time");
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw BenchError(label_ + ": agent exited");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void fillPattern(float* p, size_t count) {
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(i % 65521);
}

bool checkPattern(const float* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (p[i] != static_cast<float>(i % 65521)) return false;
  }
  return true;
}

void expectOk(const mw::Status& s, const std::string& what) {
  if (!s.ok()) throw BenchError(what + ": " + s.toString());
}

Hosted hostWorld(mw::WorldManager& m, const std::string& name, int size,
                 std::chrono::milliseconds heartbeat_timeout) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = 0;
  o.size = size;
  o.heartbeat_timeout = heartbeat_timeout;
  Hosted h;
  h.join = m.initWorldAsync(o, mw::deadlineIn(std::chrono::seconds(20)));
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (h.port == 0) {
    if (h.join.test()) expectOk(h.join.status(), "joining " + name);
    if (auto info = m.world(name); info.ok()) h.port = info->store_port;
    if (h.port != 0) break;
    if (Clock::now() > until) throw BenchError("world " + name + ": no store port");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return h;
}

std::string joinCommand(const std::string& name, int rank, int size, uint16_t port,
                        std::chrono::milliseconds heartbeat_timeout) {
  return "join " + name + " " + std::to_string(rank) + " " + std::to_string(size) + " " +
         std::to_string(port) + " " + std::to_string(heartbeat_timeout.count());
}

}  // namespace mwb
