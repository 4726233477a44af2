#include "agent/client.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>

#include "chaos/held_off.h"

namespace mw::agent {

namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using chaos::heldOff;
using chaos::monoNs;

std::string bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

std::string describe(const LaunchSpec& s) {
  return "the agent of host '" + s.host + "' (launcher " + s.launcher + ")";
}

}  // namespace

// ---- Connection ----

Result<std::unique_ptr<Connection>> Connection::start(const LaunchSpec& spec,
                                                      std::chrono::milliseconds limit) {
  auto c = spawn(spec);
  if (!c.ok()) return c.status();
  MW_RETURN_IF_ERROR((*c)->handshake(limit));
  return c;
}

Result<std::unique_ptr<Connection>> Connection::spawn(const LaunchSpec& spec) {
  std::unique_ptr<Connection> c(new Connection(spec));
  if (spec.argv.empty()) return Status(Code::kInvalidArgument, describe(spec) + ": no command");
  std::vector<std::string> argv = spec.argv;
  argv[0] = chaos::onPath(argv[0]);
  if (argv[0].empty()) {
    return Status(Code::kUnavailable, "starting " + describe(spec) + ": '" + spec.argv[0] +
                                          "' is not installed (not on $PATH)");
  }
  chaos::SpawnOptions o;
  o.netns = spec.netns;
  o.env = spec.env;
  auto p = chaos::Process::spawn(argv, o);
  if (!p.ok()) {
    return Status(Code::kUnavailable, "starting " + describe(spec) + ": " + p.status().message());
  }
  c->proc_ = std::move(*p);
  return c;
}

Status Connection::handshake(std::chrono::milliseconds limit) {
  Hello h;
  h.build = buildId();
  h.lease_ms = spec_.lease_ms;
  h.exempt = spec_.exempt;
  auto r = call(h, limit);
  if (!r.ok()) {
    std::string err = stderrText();
    proc_->killAndReap();
    alive_ = false;
    if (r.status().code() == Code::kInvalidUsage) return r.status();
    return Status(Code::kUnavailable,
                  describe(spec_) + " did not answer: " + r.status().message() +
                      (err.empty() ? "" : "; it wrote: " + err) +
                      (proc_->exitText() != "still running" ? " (" + proc_->exitText() + ")" : ""));
  }
  Status peer = checkPeer(hello_.version, hello_.build, describe(spec_).c_str());
  if (!peer.ok()) return peer;
  MW_RETURN_IF_ERROR(measureClock(16));
  keepalive_ = std::thread([this] { keepAlive(); });
  return Status::Ok();
}

Connection::~Connection() {
  // The hook may reach connections destroyed before this one (a controller's others): the
  // destructor's bye() waits without it.
  while_waiting_ = nullptr;
  if (alive_ && !said_bye_) bye(2s).ignore();
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  if (proc_ && !proc_->poll()) {
    // An agent still cleaning up (iptables, its roles' groups) gets its input closed and a
    // SIGTERM, and time, before it is killed.
    proc_->closeStdin();
    proc_->signal(SIGTERM);
    proc_->waitUntil(deadlineIn(std::chrono::seconds(10)));
  }
  if (proc_) proc_->killAndReap();
}

void Connection::keepAlive() {
  // A ping to an agent that just exited must not end the program (SIGPIPE goes to the thread that
  // wrote: blocked here, the write fails with EPIPE instead).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  // Eight pings a lease: a controller held off the CPU for most of a lease still gets one through.
  const auto every = std::chrono::milliseconds(std::max(10, spec_.lease_ms / 8));
  std::unique_lock<std::mutex> l(stop_mu_);
  while (!stop_cv_.wait_for(l, every, [this] { return stopping_; })) {
    l.unlock();
    write(Frame{0, Ping{}}).ignore();
    l.lock();
  }
}

std::string Connection::stderrText() {
  if (proc_) {
    std::string more;
    proc_->readStderr(&more);
    err_tail_ += more;
    if (err_tail_.size() > 4000) err_tail_.erase(0, err_tail_.size() - 4000);
  }
  std::string s = err_tail_;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

namespace {

// Holds SIGPIPE back from the calling thread while it lives, and takes back one that a write of
// its own raised: a write to an agent that just exited fails with EPIPE instead of ending a
// program that did not ignore SIGPIPE (mwchaos does; a benchmark or a user's program may not).
class SigpipeHeld {
 public:
  SigpipeHeld() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeHeld() {
    if (raised_ && !was_pending_) {
      const timespec now{0, 0};
      while (::sigtimedwait(&pipe_, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeHeld(const SigpipeHeld&) = delete;
  SigpipeHeld& operator=(const SigpipeHeld&) = delete;
  void raised() { raised_ = true; }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
  bool raised_ = false;
};

}  // namespace

Status Connection::write(const Frame& f) {
  const std::string line = encode(f);
  std::lock_guard<std::mutex> l(write_mu_);
  SigpipeHeld held;
  const int fd = proc_ ? proc_->stdinFd() : -1;
  if (fd < 0) return Status(Code::kUnavailable, describe(spec_) + " is gone");
  size_t off = 0;
  const auto until = SteadyClock::now() + 10s;
  while (off < line.size()) {
    ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && SteadyClock::now() < until) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    const int err = errno;
    if (n < 0 && err == EPIPE) held.raised();
    return Status(Code::kUnavailable, describe(spec_) + ": writing to it: " +
                                          (n < 0 ? std::strerror(err) : "stalled for 10 s"));
  }
  return Status::Ok();
}

void Connection::lost(const std::string& why) {
  if (!alive_) return;
  alive_ = false;
  const std::string err = stderrText();
  error_ = describe(spec_) + " " + why + (err.empty() ? "" : ": " + err);
  // Every role it ran is gone with it, as far as this run can tell.
  for (auto& [role, rp] : roles_) {
    for (int s = 1; s <= 3; ++s) rp->eof_[s] = true;
    if (!rp->exited_) {
      rp->exited_ = true;
      rp->exit_text_ = "lost with its agent";
      rp->exit_ns_ = monoNs();
    }
  }
}

int Connection::fd() const { return proc_ ? proc_->stdoutFd() : -1; }

bool Connection::pump() {
  if (!alive_) return false;
  const bool open = proc_->readStdout(&inbuf_);
  std::vector<std::string> lines;
  Status s = takeLines(inbuf_, lines);
  for (auto& line : lines) {
    auto f = decode(line);
    if (!f.ok()) {
      lost("sent a frame that cannot be read: " + f.status().message());
      return false;
    }
    dispatch(std::move(*f));
  }
  if (!s.ok()) {
    lost(s.message());
    return false;
  }
  if (!open) {
    proc_->poll();
    lost("went away (" + proc_->exitText() + ")");
    return false;
  }
  return true;
}

void Connection::dispatch(Frame&& f) {
  if (auto* r = std::get_if<Reply>(&f.msg)) {
    replies_[f.id] = std::move(*r);
    return;
  }
  if (auto* h = std::get_if<HelloReply>(&f.msg)) {
    hello_ = std::move(*h);
    hello_seen_ = true;
    replies_[f.id] = Reply{};
    return;
  }
  auto route = [this](const std::string& role) -> RemoteProcess* {
    auto it = roles_.find(role);
    return it == roles_.end() ? nullptr : it->second;
  };
  if (auto* o = std::get_if<Output>(&f.msg)) {
    if (RemoteProcess* rp = route(o->role)) rp->data_[o->stream] += o->data;
  } else if (auto* e = std::get_if<Eof>(&f.msg)) {
    if (RemoteProcess* rp = route(e->role)) rp->eof_[e->stream] = true;
  } else if (auto* x = std::get_if<Exit>(&f.msg)) {
    if (RemoteProcess* rp = route(x->role)) {
      rp->exited_ = true;
      rp->exit_text_ = x->text;
      rp->exit_code_ = x->code;
      rp->term_signal_ = x->signal;
      rp->exit_ns_ = toLocal(x->t_ns);
    }
  }
}

std::vector<Result<std::unique_ptr<Connection>>> Connection::startAll(
    const std::vector<LaunchSpec>& specs, std::chrono::milliseconds limit) {
  std::vector<Result<std::unique_ptr<Connection>>> out;
  out.reserve(specs.size());
  for (const auto& spec : specs) out.push_back(spawn(spec));
  std::vector<std::future<Status>> handshakes(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].ok()) continue;
    handshakes[i] = std::async(std::launch::async,
                               [conn = out[i]->get(), limit] { return conn->handshake(limit); });
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!handshakes[i].valid()) continue;
    Status st = handshakes[i].get();
    if (!st.ok()) out[i] = st;
  }
  return out;
}

Result<Reply> Connection::call(Message request, std::chrono::milliseconds limit) {
  auto id = post(std::move(request));
  if (!id.ok()) return id.status();
  return await(*id, limit);
}

Result<uint64_t> Connection::post(Message request) {
  if (!alive_) return Status(Code::kUnavailable, error_);
  const uint64_t id = next_id_++;
  std::string type = typeName(request);
  Status w = write(Frame{id, std::move(request)});
  if (!w.ok()) {
    lost("cannot be written to");
    return w;
  }
  pending_[id] = std::move(type);
  return id;
}

Result<Reply> Connection::await(uint64_t id, std::chrono::milliseconds limit) {
  auto pending = pending_.find(id);
  if (pending == pending_.end()) {
    return Status(Code::kInvalidUsage, "await: no request " + std::to_string(id) + " is pending");
  }
  const std::string type = std::move(pending->second);
  pending_.erase(pending);
  // The agent is lost only once silent past the lease, the bound it judges the controller by:
  // a host held off the CPU for seconds (seen beside CPU hogs: docs/hosts.md, "The lease") is
  // slow, not gone.
  const auto wait = std::max(limit, std::chrono::milliseconds(spec_.lease_ms));
  auto until = SteadyClock::now() + wait;
  for (;;) {
    auto it = replies_.find(id);
    if (it != replies_.end()) {
      Reply r = std::move(it->second);
      replies_.erase(it);
      if (r.code != Code::kOk) return Status(r.code, r.why);
      return r;
    }
    if (!alive_) return Status(Code::kUnavailable, error_);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now());
    if (left.count() <= 0) {
      // An agent that does not answer is lost: the run ends with that error rather than wait out
      // every later request's limit.
      Status t(Code::kTimeout, describe(spec_) + " did not answer '" + type + "' within " +
                                   std::to_string(wait.count()) + " ms");
      lost("did not answer '" + type + "' within " + std::to_string(wait.count()) + " ms");
      return t;
    }
    pollfd p{fd(), POLLIN, 0};
    const int timeout = static_cast<int>(std::min<int64_t>(left.count() + 1, 100));
    const auto start = SteadyClock::now();
    ::poll(&p, 1, timeout);
    // Time this controller was held off the CPU is not the agent's silence (chaos/held_off.h), and
    // an agent frozen alike gets a quarter of the wait to answer once both run again.
    if (const auto held = heldOff(start, std::chrono::milliseconds(timeout)); held.count() > 0) {
      until = std::max(until + held, SteadyClock::now() + wait / 4);
    }
    pump();
    if (while_waiting_) while_waiting_();
  }
}

Status Connection::measureClock(int n) {
  std::vector<ClockSample> samples;
  for (int i = 0; i < n; ++i) {
    const int64_t t0 = monoNs();
    auto r = call(ClockRead{}, 5s);
    const int64_t t1 = monoNs();
    if (!r.ok()) return r.status();
    samples.push_back({t0, r->t_ns, t1});
  }
  clock_ = estimateOffset(samples);
  const int64_t off = clock_.offset_ns < 0 ? -clock_.offset_ns : clock_.offset_ns;
  same_clock_ =
      hello_.boot_id == bootId() && !hello_.boot_id.empty() && off <= clock_.uncertainty_ns;
  return Status::Ok();
}

Result<std::unique_ptr<RemoteProcess>> Connection::spawn(const Spawn& m) {
  // Registered before it is asked for: its first output can come in the same read as the answer.
  auto rp = std::make_unique<RemoteProcess>(this, m.role, 0, m.telemetry);
  auto r = call(m);
  if (!r.ok()) {
    rp->exited_ = rp->released_ = true;  // nothing of it on the host to kill or release
    return r.status();
  }
  rp->pid_ = static_cast<pid_t>(r->pid);
  return rp;
}

Status Connection::bye(std::chrono::milliseconds limit) {
  if (said_bye_) return Status::Ok();
  said_bye_ = true;
  if (!alive_) return Status(Code::kUnavailable, error_);
  auto r = call(Bye{}, limit);
  if (!r.ok()) return r.status();
  if (!proc_->waitUntil(deadlineIn(limit))) {
    return Status(Code::kTimeout, describe(spec_) + " did not exit after bye");
  }
  alive_ = false;
  return Status::Ok();
}

// ---- RemoteProcess ----

RemoteProcess::RemoteProcess(Connection* c, std::string role, pid_t pid, bool telemetry)
    : conn_(c), role_(std::move(role)), pid_(pid) {
  eof_[3] = !telemetry;
  conn_->roles_[role_] = this;
}

RemoteProcess::~RemoteProcess() {
  if (!exited_) killAndReap();
  if (!released_) release();
  auto it = conn_->roles_.find(role_);
  if (it != conn_->roles_.end() && it->second == this) conn_->roles_.erase(it);
}

bool RemoteProcess::signal(int sig) {
  if (exited_) return false;
  auto r = conn_->call(agent::Signal{role_, sig});
  return r.ok() && r->ends;
}

void RemoteProcess::tell(const std::string& line) {
  if (!exited_) conn_->call(Tell{role_, line}).status().ignore();
}

void RemoteProcess::closeStdin() {
  if (!exited_) conn_->call(CloseStdin{role_}).status().ignore();
}

void RemoteProcess::killAndReap() {
  if (exited_) return;
  conn_->call(Kill{role_}, 30s).status().ignore();
  if (!exited_) {  // the agent is gone, or did not say
    exited_ = true;
    exit_text_ = conn_->alive() ? "killed (no exit reported)" : "lost with its agent";
  }
}

int RemoteProcess::release(std::string* leftover_dir) {
  if (released_) return 0;
  released_ = true;
  auto r = conn_->call(Release{role_}, 10s);
  if (!r.ok()) return 0;
  if (leftover_dir != nullptr) *leftover_dir = r->path;
  return static_cast<int>(r->count);
}

bool RemoteProcess::take(int stream, std::string* into) {
  into->append(data_[stream]);
  data_[stream].clear();
  return !eof_[stream];
}

}  // namespace mw::agent
