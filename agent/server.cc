#include "agent/server.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "agent/host_util.h"
#include "chaos/cpu_meter.h"
#include "chaos/fifo_control.h"
#include "chaos/held_off.h"
#include "chaos/host_rules.h"
#include "chaos/process.h"
#include "model/agent_protocol.h"

namespace mw::agent {

namespace {

using namespace std::chrono_literals;
using chaos::heldOff;
using chaos::kLongestWait;
using chaos::monoNs;

// How long the cleanup waits for the roles it killed to exit (a process stuck in the kernel may
// never): past it they are left to the kernel, and the agent exits.
constexpr auto kReapLimit = 3s;

// One role's process and what the agent keeps for it.
struct RoleState {
  std::unique_ptr<chaos::Process> proc;
  int pidfd = -1;  // readable once the process exits
  bool exit_sent = false;
  bool eof[4] = {true, false, false, true};  // by stream; 3 is open only with telemetry
  std::string buf[4];
  std::unique_ptr<chaos::CpuMeter> meter;
  chaos::FifoControl fifo;
  std::vector<std::string> dirs;

  ~RoleState() {
    if (pidfd >= 0) ::close(pidfd);
  }
};

class Server {
 public:
  Server(int in, int out, const ServeOptions& o) : in_(in), out_(out), options_(o) {}
  int run();

 private:
  void send(uint64_t id, Message m);
  void answer(uint64_t id, Reply r) { send(id, std::move(r)); }
  void fail(uint64_t id, const Status& s) {
    Reply r;
    r.code = s.code();
    r.why = s.message();
    answer(id, std::move(r));
  }
  // Handles one frame; returns an exit code to end with, or -1 to go on.
  int handle(const Frame& f);
  Status spawn(const Spawn& m, Reply& r);
  Status kill(const std::string& role);
  Status release(const std::string& role, Reply& r);
  Status net(const Net& m);
  RoleState* find(const std::string& role, Status* why);
  // Reads what role `name` wrote and relays it (complete lines, or a chunk of a long one); at end
  // of file the rest and an Eof.
  void relay(const std::string& name, RoleState& st, int stream, bool drain = false);
  void noteExit(const std::string& name, RoleState& st);
  // Kills every role, removes their folders and the network rules. Returns how many processes
  // it had to kill.
  int cleanup();

  int in_, out_;
  ServeOptions options_;
  std::string inbuf_;
  bool hello_ = false;
  bool broken_out_ = false;
  bool input_closed_ = false;
  int sfd_ = -1;          // SIGTERM, SIGINT, SIGHUP
  std::string lost_why_;  // set where the lease ends outside the loop (a write that waits)
  std::chrono::steady_clock::time_point last_rx_ = std::chrono::steady_clock::now();
  // Time this agent was held off the CPU past a wait's end (chaos/held_off.h): the lease is
  // extended by it, since the controller's frames could not be read meanwhile either.
  std::chrono::steady_clock::duration held_off_{};
  void excuse(std::chrono::steady_clock::duration held) {
    if (held <= std::chrono::steady_clock::duration::zero()) return;
    held_off_ += held;
    const auto now = std::chrono::steady_clock::now();
    const auto lease = std::chrono::milliseconds(lease_ms_);
    // And a quarter of the lease at least from now: a controller frozen alike pings again within
    // lease/8 of running again.
    last_rx_ = std::min(std::max(last_rx_ + held, now - lease + lease / 4), now);
  }
  // "; this agent was itself held off the CPU for N ms more", or "".
  std::string heldOffNote() const {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(held_off_).count();
    return ms == 0 ? std::string()
                   : "; this agent was itself held off the CPU for " + std::to_string(ms) +
                         " ms more, not counted";
  }
  // Reads what the controller has sent (non-blocking) into inbuf_; any byte renews the lease.
  void readInput();
  int lease_ms_ = 2000;
  // What the sweep of dead agents' leftovers at start removed, for hello's facts.
  std::string swept_;
  TestHooks hooks_;  // tests only (TestHooks::fromEnv)
  std::vector<std::pair<int, int>> exempt_;
  std::map<std::string, RoleState> roles_;
  std::unique_ptr<chaos::HostRules> rules_;
};

void Server::send(uint64_t id, Message m) {
  if (broken_out_) return;
  const std::string line = encode(Frame{id, std::move(m)});
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(out_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      // The controller is not reading: its frames are read meanwhile (kept for the loop), so
      // that its pings keep the lease even while the agent waits here.
      pollfd p[3] = {{out_, POLLOUT, 0}, {input_closed_ ? -1 : in_, POLLIN, 0}, {sfd_, POLLIN, 0}};
      const auto start = std::chrono::steady_clock::now();
      ::poll(p, 3, 100);
      excuse(heldOff(start, std::chrono::milliseconds(100)));
      if (p[1].revents != 0) readInput();
      // The lease and the signals hold here too: a controller that stops reading but keeps its
      // pipe open (stopped, its host frozen) must not keep the agent waiting forever.
      if (p[2].revents != 0) {
        lost_why_ = "a signal while waiting to write";
      } else if (std::chrono::steady_clock::now() - last_rx_ >
                 std::chrono::milliseconds(lease_ms_)) {
        lost_why_ = "lease expired while waiting to write (the controller stopped reading" +
                    heldOffNote() + ")";
      }
      if (!lost_why_.empty()) {
        broken_out_ = true;
        return;
      }
      continue;
    }
    if (n <= 0) {
      broken_out_ = true;  // the controller is gone: the loop ends as for a closed input
      return;
    }
    off += static_cast<size_t>(n);
  }
}

void Server::readInput() {
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(in_, chunk, sizeof chunk);
    if (n > 0) {
      last_rx_ = std::chrono::steady_clock::now();
      inbuf_.append(chunk, static_cast<size_t>(n));
      if (inbuf_.size() >= kMaxFrameBytes) return;  // takeLines refuses it
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != EAGAIN) input_closed_ = true;
    return;
  }
}

RoleState* Server::find(const std::string& role, Status* why) {
  auto it = roles_.find(role);
  if (it == roles_.end() || !it->second.proc) {
    *why = Status(Code::kNotFound, "no role '" + role + "' on this agent");
    return nullptr;
  }
  return &it->second;
}

void Server::relay(const std::string& name, RoleState& st, int stream, bool drain) {
  if (st.eof[stream]) return;
  std::string& b = st.buf[stream];
  bool open = true;
  for (int i = 0; i < (drain ? 64 : 1) && open; ++i) {
    const size_t before = b.size();
    open = stream == 1   ? st.proc->readStdout(&b)
           : stream == 2 ? st.proc->readStderr(&b)
                         : st.proc->readTelemetry(&b);
    if (b.size() == before) break;
  }
  for (;;) {
    // Whole lines, up to kMaxOutputChunk bytes a frame; a longer line is cut, at a UTF-8
    // character's boundary.
    size_t cut = b.rfind('\n', kMaxOutputChunk - 1);
    if (cut == std::string::npos) {
      if (b.size() < kMaxOutputChunk && open) break;
      cut = std::min(b.size(), kMaxOutputChunk) - 1;
      // The next chunk starts at `next`: moved back over at most 3 continuation bytes.
      auto continuation = [&](size_t i) {
        return i < b.size() && (static_cast<unsigned char>(b[i]) & 0xC0) == 0x80;
      };
      size_t next = cut + 1;
      while (next > 1 && cut + 1 - next < 3 && continuation(next)) --next;
      if (!continuation(next)) cut = next - 1;
    }
    if (b.empty()) break;
    Output o{name, stream, b.substr(0, cut + 1)};
    b.erase(0, cut + 1);
    send(0, std::move(o));
  }
  if (!open) {
    if (!b.empty()) send(0, Output{name, stream, std::move(b)});
    b.clear();
    st.eof[stream] = true;
    send(0, Eof{name, stream});
  }
}

void Server::noteExit(const std::string& name, RoleState& st) {
  if (st.exit_sent || !st.proc->poll()) return;
  for (int s = 1; s <= 3; ++s) relay(name, st, s, /*drain=*/true);
  st.exit_sent = true;
  send(0, Exit{name, st.proc->exitText(), st.proc->exitCode(), st.proc->termSignal(), monoNs()});
}

Status Server::spawn(const Spawn& m, Reply& r) {
  auto it = roles_.find(m.role);
  if (it != roles_.end() && it->second.proc) {
    return Status(Code::kInvalidUsage,
                  "role '" + m.role + "' already has a process here (release it first)");
  }
  chaos::SpawnOptions o;
  o.env = m.env;
  o.cwd = m.cwd;
  o.executable = m.executable;
  o.telemetry = m.telemetry;
  auto p = chaos::Process::spawn(m.argv, o);
  if (!p.ok()) return p.status();
  RoleState& st = roles_[m.role];
  st.proc = std::move(*p);
  st.exit_sent = false;
  st.eof[1] = st.eof[2] = false;
  st.eof[3] = !m.telemetry;
  for (auto& b : st.buf) b.clear();
  st.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, st.proc->pid(), 0));
  if (m.meter) st.meter = std::make_unique<chaos::CpuMeter>(st.proc->pid());
  r.pid = st.proc->pid();
  return Status::Ok();
}

Status Server::kill(const std::string& role) {
  Status why;
  RoleState* st = find(role, &why);
  if (st == nullptr) return why;
  // Its group killed and the leader seen to exit, but not reaped: release() kills what is left
  // of the group while the leader's zombie still holds the group's id.
  if (!st->proc->poll()) {
    st->proc->killGroup();
    st->proc->waitUntil(deadlineIn(std::chrono::milliseconds(5000)));
  }
  noteExit(role, *st);
  return Status::Ok();
}

Status Server::release(const std::string& role, Reply& r) {
  auto it = roles_.find(role);
  if (it == roles_.end()) return Status::Ok();  // nothing of it here (never started)
  RoleState& st = it->second;
  if (st.proc) {
    if (!st.proc->poll()) {
      return Status(Code::kInvalidUsage, "role '" + role + "' is still running (kill it first)");
    }
    noteExit(role, st);
    // The role has exited, but processes of its group (its own children) may take a moment to
    // die after the group's SIGKILL: give them a second, then count what is left. The leader is
    // reaped only after: while it is a zombie its pid, the group's id, is nobody else's, so the
    // group's SIGKILL can reach no other process.
    const pid_t group = st.proc->pid();
    const auto until = std::chrono::steady_clock::now() + 1s;
    int alive = chaos::aliveInGroup(group);
    while (alive > 0 && std::chrono::steady_clock::now() < until) {
      st.proc->killGroup();
      std::this_thread::sleep_for(5ms);
      alive = chaos::aliveInGroup(group);
    }
    st.proc->release();
    r.count = alive;
  }
  st.fifo = chaos::FifoControl();
  for (const auto& d : st.dirs) {
    if (!removeDir(d)) r.path = d;
  }
  roles_.erase(it);
  return Status::Ok();
}

Status Server::net(const Net& m) {
  const int delay_ms = hooks_.net_delay_ms;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  const std::string& fail_peer = hooks_.net_fail_peer;
  if (m.op == "cut" && !fail_peer.empty() &&
      std::find(m.peers.begin(), m.peers.end(), fail_peer) != m.peers.end()) {
    return Status(Code::kIoError,
                  "cutting " + fail_peer + " failed (MW_AGENT_TEST_NET_FAIL_PEER, a test hook)");
  }
  if (!rules_)
    rules_ = std::make_unique<chaos::HostRules>(exempt_, options_.default_dev, controlPeer());
  if (m.op == "cut") return rules_->cut(m.peers, m.loud);
  if (m.op == "loss") return rules_->loss(m.p);
  if (m.op == "ready") return rules_->ready();
  // The device shaped: the fault's, else --dev's, else the one the route to the peers takes.
  std::string dev = !m.dev.empty() ? m.dev : options_.default_dev;
  for (size_t i = 0; dev.empty() && i < m.peers.size(); ++i) dev = routeDevice(m.peers[i]);
  if (m.op == "bandwidth") return rules_->bandwidth(dev, m.rate);
  if (m.op == "delay") return rules_->delay(dev, m.delay_ms, m.jitter_ms);
  if (m.op == "prepare") return rules_->prepare(dev, m.delay_ms > 0);
  return rules_->heal();
}

int Server::handle(const Frame& f) {
  if (!hello_ && !std::holds_alternative<Hello>(f.msg)) {
    fail(f.id, Status(Code::kInvalidUsage,
                      std::string("'") + typeName(f.msg) + "' before hello: say hello first"));
    return -1;
  }
  Reply r;
  Status s;
  if (const auto* m = std::get_if<Hello>(&f.msg)) {
    send(f.id, helloReply(swept_));
    Status peer = checkPeer(m->version, m->build, "the controller");
    if (!peer.ok()) {
      std::fprintf(stderr, "mwchaos agent: refused: %s\n", peer.message().c_str());
      return kServedRefused;
    }
    hello_ = true;
    lease_ms_ = m->lease_ms;
    exempt_.clear();
    for (const auto& e : m->exempt) exempt_.emplace_back(e.first, e.last);
    return -1;
  }
  if (std::holds_alternative<Ping>(f.msg)) return -1;
  if (const auto* m = std::get_if<Spawn>(&f.msg)) {
    s = spawn(*m, r);
  } else if (const auto* m = std::get_if<Signal>(&f.msg)) {
    if (RoleState* st = find(m->role, &s)) {
      r.ends = st->proc->endedBy(m->sig);
      st->proc->signal(m->sig);
    }
  } else if (const auto* m = std::get_if<Tell>(&f.msg)) {
    if (RoleState* st = find(m->role, &s)) st->proc->tell(m->line);
  } else if (const auto* m = std::get_if<CloseStdin>(&f.msg)) {
    if (RoleState* st = find(m->role, &s)) st->proc->closeStdin();
  } else if (const auto* m = std::get_if<Kill>(&f.msg)) {
    s = kill(m->role);
  } else if (const auto* m = std::get_if<Release>(&f.msg)) {
    s = release(m->role, r);
  } else if (const auto* m = std::get_if<MakeDir>(&f.msg)) {
    char dir[] = "/tmp/mwchaos-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
      s = Status(Code::kIoError, std::string("mkdtemp: ") + std::strerror(errno));
    } else {
      roles_[m->role].dirs.push_back(dir);
      r.path = dir;
    }
  } else if (const auto* m = std::get_if<FifoOpen>(&f.msg)) {
    RoleState* st = find(m->role, &s);
    if (st != nullptr && !insideFolders(m->path, st->dirs)) {
      s = Status(Code::kInvalidArgument, "fifo '" + m->path +
                                             "' is not inside a folder this agent made for role '" +
                                             m->role + "' (make_dir)");
      st = nullptr;
    }
    if (st != nullptr) {
      auto fifo =
          chaos::FifoControl::open(m->path, deadlineIn(std::chrono::milliseconds(m->timeout_ms)));
      if (fifo.ok()) {
        st->fifo = std::move(*fifo);
        // The fifos are unlinked once open: their folder goes now, so that nothing is left on
        // disk even if the agent is killed.
        std::erase_if(st->dirs, [&](const std::string& d) {
          return m->path.rfind(d + "/", 0) == 0 && removeDir(d);
        });
      } else {
        s = fifo.status();
      }
    }
  } else if (const auto* m = std::get_if<FifoCommand>(&f.msg)) {
    if (RoleState* st = find(m->role, &s)) {
      s = st->fifo.isOpen()
              ? st->fifo.command(m->command, deadlineIn(std::chrono::milliseconds(m->timeout_ms)))
              : Status(Code::kUnavailable, "role '" + m->role + "' has no open failpoint fifo");
    }
  } else if (const auto* m = std::get_if<Net>(&f.msg)) {
    const int64_t start = monoNs();
    s = net(*m);
    r.t_ns = monoNs();
    r.took_ns = r.t_ns - start;
  } else if (std::holds_alternative<ClockRead>(f.msg)) {
    r.t_ns = monoNs();
  } else if (std::holds_alternative<Sample>(f.msg)) {
    for (auto& [name, st] : roles_) {
      if (!st.meter || !st.proc || st.proc->reaped()) continue;
      const auto d = st.meter->sample();
      r.cpu.push_back(CpuUse{name, d.cpu_ns, d.wait_ns});
    }
    r.t_ns = monoNs();
  } else if (std::holds_alternative<Bye>(f.msg)) {
    cleanup();
    answer(f.id, std::move(r));
    return kServedBye;
  } else {
    s = Status(Code::kInvalidArgument,
               std::string("'") + typeName(f.msg) + "' is not a request an agent answers");
  }
  if (s.ok()) {
    answer(f.id, std::move(r));
  } else {
    fail(f.id, s);
  }
  return -1;
}

int Server::cleanup() {
  // The network first: a partition must not outlive its agent, whatever happens to the roles.
  if (rules_) {
    Status s = rules_->remove();
    if (!s.ok()) {
      std::string left;
      for (const auto& u : rules_->unhealed()) left += (left.empty() ? "" : ", ") + u;
      std::fprintf(stderr, "mwchaos agent: removing network rules: %s%s%s\n", s.toString().c_str(),
                   left.empty() ? "" : "; left: ", left.c_str());
    }
    rules_.reset();
  }
  // Then the roles (killRoles: never a group whose leader was reaped), and their folders.
  std::vector<chaos::Process*> procs;
  for (auto& [name, st] : roles_) {
    if (st.proc) procs.push_back(st.proc.get());
  }
  int left = 0;
  const int killed = killRoles(procs, kReapLimit, hooks_.stall_reap, &left);
  for (auto& [name, st] : roles_) {
    st.fifo = chaos::FifoControl();
    for (const auto& d : st.dirs) removeDir(d);
  }
  if (left > 0) {
    std::fprintf(stderr,
                 "mwchaos agent: %d role process(es) did not exit within %lld ms of SIGKILL "
                 "(stuck in the kernel?): left to it\n",
                 left, static_cast<long long>(kReapLimit.count() * 1000));
  }
  roles_.clear();
  return killed;
}

int Server::run() {
  ::signal(SIGPIPE, SIG_IGN);
  // Every signal that would end the agent and can be caught runs the cleanup: TERM, INT and HUP
  // (a controller or a session going), and the others a user, a scheduler (scancel --signal
  // USR1) or a watchdog may send. Roles start with an empty mask (chaos::Process).
  sfd_ = cleanupSignalFd();
  const int sfd = sfd_;
  // Whoever started the agent (the controller, sshd's session, srun) dying is a lost lease: the
  // agent is told by SIGTERM (handled below), never killed before it cleans up.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  hooks_ = TestHooks::fromEnv();
  // What agents that died on this host (SIGKILL, the OOM killer, a crash) left: their chains,
  // jumps and qdiscs go now, before this one makes any (never a live agent's).
  swept_ = sweepLeftovers();
  if (!swept_.empty()) std::fprintf(stderr, "mwchaos agent: %s\n", swept_.c_str());
  for (int fd : {in_, out_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  last_rx_ = std::chrono::steady_clock::now();
  std::string ended;
  int code = -1;
  std::vector<pollfd> fds;
  std::vector<std::pair<std::string, int>> who;  // per pollfd past the first two: role, stream
  while (code < 0) {
    fds.clear();
    who.clear();
    fds.push_back({input_closed_ ? -1 : in_, POLLIN, 0});
    fds.push_back({sfd, POLLIN, 0});
    for (auto& [name, st] : roles_) {
      if (!st.proc) continue;
      const int stream_fds[4] = {-1, st.proc->stdoutFd(), st.proc->stderrFd(),
                                 st.proc->telemetryFd()};
      for (int s = 1; s <= 3; ++s) {
        if (!st.eof[s] && stream_fds[s] >= 0) {
          fds.push_back({stream_fds[s], POLLIN, 0});
          who.emplace_back(name, s);
        }
      }
      if (!st.exit_sent && st.pidfd >= 0) {
        fds.push_back({st.pidfd, POLLIN, 0});
        who.emplace_back(name, 0);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        last_rx_ + std::chrono::milliseconds(lease_ms_) - std::chrono::steady_clock::now());
    // Exits wake the poll through their pidfds; without one (a kernel before 5.3) they are
    // polled every 50 ms. Input read while writing is handled at once.
    bool polled_exits = false;
    for (auto& [name, st] : roles_) polled_exits |= st.proc && !st.exit_sent && st.pidfd < 0;
    // At most kLongestWait at a time, so that a stretch this agent was held off the CPU is told
    // from a quiet one and not counted against the controller (chaos/held_off.h).
    const int timeout = inbuf_.find('\n') != std::string::npos
                            ? 0
                            : static_cast<int>(std::clamp<int64_t>(
                                  left.count() + 1, 1, polled_exits ? 50 : kLongestWait.count()));
    const auto poll_start = std::chrono::steady_clock::now();
    ::poll(fds.data(), fds.size(), timeout);
    excuse(heldOff(poll_start, std::chrono::milliseconds(timeout)));
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si{};
      (void)!::read(sfd, &si, sizeof si);
      ended = std::string("signal ") + strsignal(static_cast<int>(si.ssi_signo));
      code = kServedLeaseLost;
      break;
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto& [name, stream] = who[i - 2];
      auto it = roles_.find(name);
      if (it == roles_.end() || !it->second.proc) continue;
      if (stream > 0) relay(name, it->second, stream);
    }
    for (auto& [name, st] : roles_) {
      if (st.proc) noteExit(name, st);
    }
    if (fds[0].revents != 0) readInput();
    std::vector<std::string> lines;
    Status s = takeLines(inbuf_, lines);
    for (const auto& line : lines) {
      auto f = decode(line);
      if (!f.ok()) {
        fail(0, f.status());
        ended = "refused a frame: " + f.status().message();
        code = kServedRefused;
        break;
      }
      code = handle(*f);
      if (code >= 0) break;
    }
    // Busy with a long request (a fifo that takes seconds to open) is not silence.
    if (!lines.empty()) last_rx_ = std::chrono::steady_clock::now();
    if (code < 0 && !s.ok()) {
      ended = s.message();
      code = kServedRefused;
    }
    if (code == kServedRefused && ended.empty()) ended = "refused the controller";
    if (code < 0 && input_closed_ && inbuf_.find('\n') == std::string::npos) {
      ended = "the controller's pipe closed";
      code = kServedLeaseLost;
    }
    if (code < 0 && broken_out_) {
      ended = lost_why_.empty() ? "the controller stopped reading" : lost_why_;
      code = kServedLeaseLost;
    }
    if (code < 0 &&
        std::chrono::steady_clock::now() - last_rx_ > std::chrono::milliseconds(lease_ms_)) {
      // Never while something the controller sent waits unread.
      pollfd p{input_closed_ ? -1 : in_, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) continue;
      ended = "lease expired (no word from the controller for " + std::to_string(lease_ms_) +
              " ms" + heldOffNote() + ")";
      code = kServedLeaseLost;
    }
  }
  if (code != kServedBye) {
    const int killed = cleanup();
    std::fprintf(stderr, "mwchaos agent: %s: network rules removed, %d process(es) killed\n",
                 ended.c_str(), killed);
  }
  if (sfd >= 0) ::close(sfd);
  return code;
}

}  // namespace

int serve(int in_fd, int out_fd, const ServeOptions& options) {
  Server s(in_fd, out_fd, options);
  return s.run();
}

}  // namespace mw::agent
