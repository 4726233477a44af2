#include "chaos/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "chaos/held_off.h"

namespace mw::chaos {

namespace {

bool readAvailable(int fd, std::string* into) {
  if (fd < 0) return false;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EINTR;
  }
}

}  // namespace

Result<std::unique_ptr<Process>> Process::spawn(const std::vector<std::string>& argv,
                                                const std::string& netns,
                                                const std::vector<std::string>& env) {
  SpawnOptions options;
  options.netns = netns;
  options.env = env;
  return spawn(argv, options);
}

Result<std::unique_ptr<Process>> Process::spawn(const std::vector<std::string>& argv,
                                                const SpawnOptions& options) {
  const std::string& netns = options.netns;
  const std::vector<std::string>& env = options.env;
  if (argv.empty()) return Status(Code::kInvalidArgument, "spawn: an empty command");
  // The child's environment: ours, with `env`'s entries replacing those of the same name.
  std::vector<std::string> vars;
  for (const auto& e : env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      return Status(Code::kInvalidArgument, "environment entry '" + e + "': expected NAME=value");
    }
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string v = *e;
    bool replaced = false;
    for (const auto& o : env) {
      replaced |= v.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0;
    }
    if (!replaced) vars.push_back(std::move(v));
  }
  vars.insert(vars.end(), env.begin(), env.end());
  int ns_fd = -1;
  if (!netns.empty()) {
    ns_fd = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) {
      return Status(Code::kIoError,
                    "opening network namespace " + netns + ": " + std::strerror(errno));
    }
  }
  struct NsFd {
    int fd;
    ~NsFd() {
      if (fd >= 0) ::close(fd);
    }
  } ns_guard{ns_fd};
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0)
    return Status(Code::kIoError, std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    return Status(Code::kIoError, std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]), ::close(out[0]), ::close(out[1]);
    return Status(Code::kIoError, std::string("pipe: ") + std::strerror(errno));
  }
  int tel[2] = {-1, -1};
  if (options.telemetry && ::pipe2(tel, O_CLOEXEC) != 0) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    return Status(Code::kIoError, std::string("pipe: ") + std::strerror(errno));
  }
  const char* executable =
      options.executable.empty() ? argv[0].c_str() : options.executable.c_str();
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& v : vars) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], tel[0], tel[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return Status(Code::kIoError, std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the harness died before prctl
    // The harness may ignore or block signals; the worker starts with the defaults.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    // The namespace first: its descriptor may be one of 0..3, which the dup2s below replace.
    if (ns_fd >= 0 && ::setns(ns_fd, CLONE_NEWNET) != 0) {
      const char msg[] = "mwchaos: cannot enter the simulated host's network namespace\n";
      ssize_t w = ::write(err[1], msg, sizeof(msg) - 1);
      (void)w;
      ::_exit(126);
    }
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (tel[1] == 3) {
      ::fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    } else if (tel[1] >= 0) {
      ::dup2(tel[1], 3);
    }
    if (cwd != nullptr && ::chdir(cwd) != 0) {
      const char msg[] = "mwchaos: cannot enter the role's working directory\n";
      ssize_t w = ::write(2, msg, sizeof(msg) - 1);
      (void)w;
      ::_exit(126);
    }
    ::execve(executable, args.data(), envp.data());
    const char msg[] = "mwchaos: cannot execute the role's program\n";
    ssize_t w = ::write(2, msg, sizeof(msg) - 1);
    (void)w;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from here, so signals to the group work at once
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (tel[1] >= 0) {
    ::close(tel[1]);
    ::fcntl(tel[0], F_SETFL, O_NONBLOCK);
  }
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  auto p = std::make_unique<Process>();
  p->pid_ = pid;
  p->in_ = in[1];
  p->out_ = out[0];
  p->err_ = err[0];
  p->tel_ = tel[0];
  return p;
}

Process::~Process() {
  if (pid_ > 0 && !released_) killAndReap();
  for (int fd : {in_, out_, err_, tel_}) {
    if (fd >= 0) ::close(fd);
  }
}

bool Process::endedBy(int sig) const {
  switch (sig) {
    case SIGSTOP:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGCONT:
    case SIGCHLD:
    case SIGURG:
    case SIGWINCH:
      return false;
    default:
      break;
  }
  if (reaped_ || sig <= 0 || sig >= NSIG) return false;
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigIgn:", 0) != 0) continue;
    const unsigned long long ignored = std::stoull(line.substr(7), nullptr, 16);
    return (ignored & (1ULL << (sig - 1))) == 0;
  }
  return true;  // gone between the check and the read: it ended anyway
}

void Process::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(-pid_, sig);
}

void Process::tell(const std::string& line) {
  if (in_ < 0) return;
  std::string msg = line + "\n";
  ssize_t n = ::write(in_, msg.data(), msg.size());
  (void)n;  // EPIPE (ignored signal) or EAGAIN: the worker is gone or stuck; nothing to do
}

void Process::closeStdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void Process::noteStatus(int status) {
  reaped_ = true;
  if (WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    term_signal_ = WTERMSIG(status);
  }
}

bool Process::poll() {
  if (reaped_ || pid_ <= 0) return reaped_;
  // WNOWAIT: learn that it ended, and how, without releasing it. Releasing a process (the kernel's
  // release_task) can take the caller seconds beside busy CPUs on some kernels (6.18 in a VM:
  // invalidating the dead task's /proc entries), and poll() runs in the harness's timeline loop:
  // many_worlds' kill of one worker stalled that loop for 5 to 230 s beside two CPU hogs. The
  // process stays a zombie (its pid is not reused) until release().
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid_) {
    return false;
  }
  reaped_ = true;
  if (info.si_code == CLD_EXITED) {
    exit_code_ = info.si_status;
  } else {
    term_signal_ = info.si_status;
  }
  return true;
}

void Process::release() {
  if (pid_ <= 0 || released_) return;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  released_ = true;
  if (!reaped_) noteStatus(status);
}

bool Process::waitUntil(Deadline deadline) {
  while (!poll()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

void Process::killAndReap() {
  if (pid_ <= 0 || released_) return;
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
  }
  release();
}

void Process::killGroup() {
  if (pid_ > 0 && !released_) ::kill(-pid_, SIGKILL);
}

void Process::abandon() {
  released_ = true;
  reaped_ = true;  // nothing is sent to its group from now on (signal() checks it)
  for (int* fd : {&in_, &out_, &err_, &tel_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

std::string Process::exitText() const {
  if (!reaped_) return "running";
  if (term_signal_ != 0) return std::string("killed by SIG") + sigabbrev_np(term_signal_);
  return "exited " + std::to_string(exit_code_);
}

bool Process::readStdout(std::string* into) { return readAvailable(out_, into); }
bool Process::readStderr(std::string* into) { return readAvailable(err_, into); }
bool Process::readTelemetry(std::string* into) { return readAvailable(tel_, into); }

std::string whichProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0 ? prog : "";
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    std::string p = std::string(dir) + "/" + prog;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string onPath(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty() || dir.front() != '/') {  // the current directory, or a path from it
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof cwd) == nullptr) {
        start = end + 1;
        continue;
      }
      dir = dir.empty() ? std::string(cwd) : std::string(cwd) + "/" + dir;
    }
    const std::string p = dir + "/" + prog;
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) {
      return p;
    }
    start = end + 1;
  }
  return whichProgram(prog);
}

Status runProgram(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
                  std::string* stdout_text, const std::string& input) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "runProgram: empty argv");
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
  std::vector<std::string> cmd = argv;
  cmd[0] = whichProgram(argv[0]);
  if (cmd[0].empty()) {
    return Status(Code::kUnavailable,
                  "'" + argv[0] + "' is not installed (needed for '" + text + "')");
  }
  auto p = Process::spawn(cmd);
  if (!p.ok()) return p.status();
  if (!input.empty()) {
    // Small (a batch of rules): written whole while the program reads it, then its end.
    const auto until = Clock::now() + limit;
    for (size_t off = 0; off < input.size();) {
      const ssize_t n = ::write((*p)->stdinFd(), input.data() + off, input.size() - off);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN && Clock::now() < until) {
        pollfd pf{(*p)->stdinFd(), POLLOUT, 0};
        ::poll(&pf, 1, 100);
      } else if (!(n < 0 && errno == EINTR)) {
        const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
        (*p)->killAndReap();
        return Status(Code::kIoError, "'" + text + "': writing its input: " + why);
      }
    }
    (*p)->closeStdin();
  }
  std::string err, out;
  const auto started = Clock::now();
  const auto hard = started + 6 * limit;
  auto until = started + limit;
  RunQueueWait wait;
  Clock::duration held_off{0};  // this thread's own oversleeping: the machine (or it) frozen
  for (;;) {
    if ((*p)->poll()) break;
    const auto now = Clock::now();
    if (now >= until) {
      // The limit bounds the command's own time: what it spent waiting for a CPU, or what this
      // thread was frozen for (a whole machine frozen: the command's wait does not show it), is
      // the machine's, and extends it.
      wait = runQueueWait((*p)->pid());
      const auto excused =
          std::max(std::chrono::duration_cast<Clock::duration>(wait.waited), held_off);
      until = std::min(hard, started + limit + excused);
      if (now >= until) break;
    }
    (*p)->readStderr(&err);
    (*p)->readStdout(&out);
    const auto before = Clock::now();
    ::usleep(500);
    held_off += heldOff(before, std::chrono::microseconds(500));  // past scheduling jitter
  }
  if (!(*p)->poll()) {
    (*p)->killAndReap();
    const auto ms = [](auto d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
    };
    return Status(Code::kTimeout, "'" + text + "' did not finish in " + ms(limit) +
                                      " ms of its own time (ran " + ms(Clock::now() - started) +
                                      " ms: " + ms(wait.waited) +
                                      " ms of them waiting for a CPU, " + ms(held_off) +
                                      " ms with its caller frozen; state " + wait.state + ")");
  }
  (*p)->readStderr(&err);
  (*p)->readStdout(&out);
  if (stdout_text != nullptr) *stdout_text = std::move(out);
  if ((*p)->exitCode() != 0) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Status(Code::kIoError, "'" + text + "' failed (" + (*p)->exitText() + "): " + err);
  }
  return Status::Ok();
}

RunQueueWait runQueueWait(pid_t pid) {
  RunQueueWait w;
  {
    std::ifstream sched("/proc/" + std::to_string(pid) + "/schedstat");
    unsigned long long on_cpu = 0, waited = 0;
    if (sched >> on_cpu >> waited) w.waited = std::chrono::nanoseconds(waited);
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    const size_t paren = line.rfind(')');  // comm may hold spaces and parentheses
    if (paren != std::string::npos && paren + 2 < line.size()) w.state = line[paren + 2];
  }
  return w;
}

std::vector<pid_t> allPids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

int aliveInGroup(pid_t pgid) {
  int n = 0;
  for (pid_t pid : allPids()) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces, so parse after the last ')'.
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z') ++n;
  }
  return n;
}

}  // namespace mw::chaos
