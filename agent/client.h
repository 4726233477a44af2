// The controller's side of host agents (docs/hosts.md): a Connection to one agent, started by a
// launcher command (mwchaos agent --stdio on this machine or in a simulated host's namespace; ssh
// or srun to a real host) and held for the whole run, and a RemoteProcess for each role the agent
// runs, which the orchestrator uses as it would a local process.
//
// Thread rules: a Connection and its RemoteProcesses belong to one thread (the orchestrator's).
// The Connection's own keep-alive thread only writes Ping frames, under the write lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chaos/process.h"
#include "model/agent_protocol.h"
#include "model/clock_offset.h"
#include "multiworld/status.h"

namespace mw::agent {

class RemoteProcess;

// How to start an agent and what to tell it first.
struct LaunchSpec {
  std::string host;               // the scenario's name for the host ("local" when none)
  std::string launcher;           // "local", "netns", "ssh", "slurm": named in errors
  std::vector<std::string> argv;  // the command that runs `mwchaos agent --stdio` there
  std::string netns;              // a namespace to start it in ("/proc/<pid>/ns/net"), or ""
  std::vector<std::string> env;   // extra "NAME=value" for the launcher command
  int lease_ms = harness::kDefaultLeaseMs;
  std::vector<PortRange> exempt;  // control-plane ports the agent never cuts
};

class Connection {
 public:
  // Starts the launcher command, says hello, checks the agent's version and build, and estimates
  // its clock's offset. kUnavailable when the command cannot start or the agent never answers
  // within `limit` (naming the launcher, host and what the command wrote on stderr);
  // kInvalidUsage when the agent is of another version or build (both named).
  static Result<std::unique_ptr<Connection>> start(const LaunchSpec& spec,
                                                   std::chrono::milliseconds limit);
  // start() in two steps, so that many agents can be waited for at once: spawn() starts the
  // launcher command, handshake() says hello, checks the peer and measures the clock (errors as
  // start()'s). The thread that calls spawn() must outlive the connection: the agent gets
  // SIGTERM when that thread ends (PR_SET_PDEATHSIG follows the thread, not the process).
  // handshake() may run on any thread, once.
  static Result<std::unique_ptr<Connection>> spawn(const LaunchSpec& spec);
  Status handshake(std::chrono::milliseconds limit);
  // start() for many agents at once: every launcher command is started on the calling thread
  // (which must outlive the connections, as spawn's), then every handshake runs on a thread of
  // its own, so the wait is the slowest agent's, not their sum. One result per spec, in order.
  static std::vector<Result<std::unique_ptr<Connection>>> startAll(
      const std::vector<LaunchSpec>& specs, std::chrono::milliseconds limit);
  ~Connection();  // bye() unless done (without the setWhileWaiting hook), then kills the launcher
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends `request` and waits up to `limit`, or the lease when that is longer, for its answer,
  // relaying the events that come meanwhile to their RemoteProcesses. The answer's own status
  // when it is an error; kUnavailable when the agent is gone; kTimeout, and the agent counts as
  // lost, when no answer came.
  Result<Reply> call(Message request, std::chrono::milliseconds limit = std::chrono::seconds(10));
  // call() in two steps, so that one request can be sent to many agents before any answer is
  // waited for: post() sends `request` and returns its id (kUnavailable when the agent is gone
  // or cannot be written to); await() waits for that id's answer as call() does, once per id
  // (kInvalidUsage for an id that is not pending). Answers that come first are kept.
  Result<uint64_t> post(Message request);
  Result<Reply> await(uint64_t id, std::chrono::milliseconds limit = std::chrono::seconds(10));

  // `hook` runs on the calling thread each time call() wakes while it waits (at least every
  // 100 ms): a controller of several agents reads the others there (their pump()), so that none
  // of their pipes fills while this one is slow to answer. Through srun, an agent whose output
  // is not read stops getting its input too, and loses its lease. Set before the first call().
  // The destructor's own bye() does not run it (the others may be gone by then).
  void setWhileWaiting(std::function<void()> hook) { while_waiting_ = std::move(hook); }

  // The fd to poll for the agent's frames, and the read of what is there (events relayed).
  // False once the agent is gone (then error() says why).
  int fd() const;
  bool pump();

  // Starts a role's process on the agent's host (Spawn): the handle receives its output.
  Result<std::unique_ptr<RemoteProcess>> spawn(const Spawn& m);

  // Asks the agent to clean up and exit, and reaps the launcher: OK when it did within `limit`.
  Status bye(std::chrono::milliseconds limit = std::chrono::seconds(5));

  // Samples the agent's clock `n` times (Clock) and keeps the estimate (clock()).
  Status measureClock(int n);

  const std::string& host() const { return spec_.host; }
  const HelloReply& hello() const { return hello_; }
  const ClockOffset& clock() const { return clock_; }
  // True when the agent runs on this machine's kernel (equal boot ids) and its steady clock is
  // found within the estimate's uncertainty of ours: its times are taken as they are.
  bool sameClock() const { return same_clock_; }
  // A time the agent wrote (its steady clock), on the controller's steady clock.
  int64_t toLocal(int64_t agent_ns) const {
    return same_clock_ ? agent_ns : toController(agent_ns, clock_);
  }
  bool alive() const { return alive_; }
  const std::string& error() const { return error_; }
  pid_t launcherPid() const { return proc_ ? proc_->pid() : -1; }

 private:
  friend class RemoteProcess;
  explicit Connection(LaunchSpec spec) : spec_(std::move(spec)) {}
  Status write(const Frame& f);
  void dispatch(Frame&& f);
  void lost(const std::string& why);
  std::string stderrText();
  void keepAlive();

  LaunchSpec spec_;
  std::unique_ptr<chaos::Process> proc_;
  std::string inbuf_;
  std::string err_tail_;
  HelloReply hello_;
  ClockOffset clock_;
  bool same_clock_ = false;
  bool alive_ = true;
  bool said_bye_ = false;
  std::string error_;
  std::function<void()> while_waiting_;  // setWhileWaiting
  uint64_t next_id_ = 1;
  std::map<uint64_t, Reply> replies_;
  std::map<uint64_t, std::string> pending_;  // post()ed, not await()ed: id -> request type
  bool hello_seen_ = false;
  std::map<std::string, RemoteProcess*> roles_;
  std::mutex write_mu_;  // whole frames: the keep-alive thread writes too
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread keepalive_;
};

// A role's process on an agent's host, as the orchestrator sees it. Its output arrives with the
// Connection's events; poll() is true once the agent said the process exited.
class RemoteProcess {
 public:
  RemoteProcess(Connection* c, std::string role, pid_t pid, bool telemetry);
  ~RemoteProcess();  // kills it unless it has exited, and releases it
  RemoteProcess(const RemoteProcess&) = delete;
  RemoteProcess& operator=(const RemoteProcess&) = delete;

  pid_t pid() const { return pid_; }  // on its host
  const std::string& host() const { return conn_->host(); }
  Connection& connection() { return *conn_; }
  // Sends `sig` to its process group; true when the signal ends the process (decided on its host
  // before it is sent, as chaos::Process::endedBy). False when it has exited or the agent is gone.
  bool signal(int sig);
  // One line to its stdin; closing its stdin.
  void tell(const std::string& line);
  void closeStdin();
  // True once it has exited.
  bool poll() const { return exited_; }
  bool reaped() const { return exited_; }
  // SIGKILL to its group unless it has exited; returns once the agent has reaped it.
  void killAndReap();
  // Forgets it on its host: its folder goes; the number of its group's processes still alive
  // (after a second's grace), and a folder that could not be removed (or "").
  int release(std::string* leftover_dir = nullptr);
  std::string exitText() const { return exit_text_; }
  int exitCode() const { return exit_code_; }
  int termSignal() const { return term_signal_; }
  // The exit's time on the controller's steady clock (0 before it).
  int64_t exitNs() const { return exit_ns_; }
  // What it wrote since the last call, appended; false once that stream is at its end and
  // nothing is left.
  bool readStdout(std::string* into) { return take(1, into); }
  bool readStderr(std::string* into) { return take(2, into); }
  bool readTelemetry(std::string* into) { return take(3, into); }

 private:
  friend class Connection;
  bool take(int stream, std::string* into);

  Connection* conn_;
  std::string role_;
  pid_t pid_;
  std::string data_[4];
  bool eof_[4] = {true, false, false, false};
  bool exited_ = false;
  bool released_ = false;
  std::string exit_text_ = "still running";
  int exit_code_ = -1;
  int term_signal_ = 0;
  int64_t exit_ns_ = 0;
};

}  // namespace mw::agent
