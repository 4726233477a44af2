// Process: a worker or program the harness started, in a process group of its own, killed with
// SIGKILL when the harness dies (parent-death signal). Its stdin, stdout and stderr are pipes to
// the harness, and so, when asked for, is its file descriptor 3 (a program role's telemetry).
//
// Thread rules: one thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "multiworld/status.h"

namespace mw::chaos {

// How to start a process, beyond its argv (Process::spawn).
struct SpawnOptions {
  std::string netns;             // a /proc/<pid>/ns/net path to enter; "" for this namespace
  std::vector<std::string> env;  // "NAME=value" entries, each replacing a variable of that name
  std::string cwd;               // the working directory; "" for the harness's
  std::string executable;        // the file to execute; "" for argv[0] (which is then a path)
  bool telemetry = false;        // a pipe whose write end is the child's fd 3 (telemetryFd())
};

class Process {
 public:
  Process() = default;
  ~Process();  // kills the group and reaps it
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Starts `argv` (argv[0] a path), in network namespace `netns` (a /proc/<pid>/ns/net path) when
  // given, with this process's environment plus `env` ("NAME=value" entries, each replacing a
  // variable of that name). kIoError when fork/pipe/open fails, kInvalidArgument for an `env`
  // entry without '='; an exec failure shows as exit 127, a namespace that cannot be entered as
  // exit 126.
  static Result<std::unique_ptr<Process>> spawn(const std::vector<std::string>& argv,
                                                const std::string& netns = "",
                                                const std::vector<std::string>& env = {});
  // Starts `argv` as above, with `options`: argv[0] is passed as is and `options.executable`
  // (when given) is the file executed; the child changes to `options.cwd` (when given) before it
  // executes, a directory it cannot enter showing as exit 126; with `options.telemetry`, its fd 3
  // is the write end of a pipe whose read end the parent keeps (telemetryFd(), readTelemetry()).
  // Errors as above; kInvalidArgument for an empty argv.
  static Result<std::unique_ptr<Process>> spawn(const std::vector<std::string>& argv,
                                                const SpawnOptions& options);

  pid_t pid() const { return pid_; }
  // The write end of its stdin (non-blocking); -1 once closed.
  int stdinFd() const { return in_; }
  int stdoutFd() const { return out_; }
  int stderrFd() const { return err_; }
  // The read end of the child's fd 3 (non-blocking); -1 when spawned without options.telemetry.
  int telemetryFd() const { return tel_; }

  // Sends `sig` to the whole process group. No-op after it was reaped.
  void signal(int sig);
  // True when `sig`, sent now, ends the process: its default action terminates the process (or
  // dumps core), and the process does not ignore it (the SigIgn mask of /proc/<pid>/status: the
  // runtime ignores SIGPIPE, for one). A signal the process catches counts as ending it (the
  // worker stops on SIGTERM and SIGINT). False for stop, continue, the signals ignored by
  // default, and once the process was reaped.
  bool endedBy(int sig) const;
  // Writes one line to its stdin (dropped when the pipe is full or closed).
  void tell(const std::string& line);
  void closeStdin();

  // True once it has exited (then exitText() and the codes say how). Never blocks: it leaves the
  // process a zombie, for release() (or the destructor) to reap.
  bool poll();
  // Reaps it, waiting until it has exited (the kernel's release of a dead process can take a
  // while: call it outside time-critical loops). Idempotent.
  void release();
  // Waits until it exits or `deadline`; true once reaped.
  bool waitUntil(Deadline deadline);
  // SIGKILL to the group unless it has exited, then release() (blocks until the kernel has it).
  void killAndReap();
  // SIGKILL to its whole process group, also after it exited, as long as it is not released:
  // until then its pid, the group's id, is nobody else's (its zombie holds it), so no other
  // process can be hit. No-op once released.
  void killGroup();
  // Gives up on it: it is never signalled or waited for again, not by the destructor either
  // (for a process that does not exit after SIGKILL: stuck in the kernel). Its pipes are closed.
  void abandon();
  bool reaped() const { return reaped_; }
  // "exited 0", "killed by SIGKILL", ... once reaped.
  std::string exitText() const;
  int exitCode() const { return exit_code_; }  // -1 when killed by a signal
  int termSignal() const { return term_signal_; }

  // Reads what is available on stdout/stderr without blocking; false at end of file.
  bool readStdout(std::string* into);
  bool readStderr(std::string* into);
  // Reads what is available on the telemetry pipe (the child's fd 3) without blocking; false at
  // end of file, and always false when spawned without options.telemetry.
  bool readTelemetry(std::string* into);

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1, tel_ = -1;
  bool reaped_ = false;    // it exited, and its status is known (poll, release)
  bool released_ = false;  // the kernel has released it (no zombie is left)
  int exit_code_ = -1;
  int term_signal_ = 0;
  void noteStatus(int status);
};

// The program's path in the system directories (/usr/sbin, /usr/bin, /sbin, /bin), or "" when it
// is not installed.
std::string whichProgram(const std::string& prog);

// `prog` as a path: as given when it has a '/', else the first regular executable file of that
// name on $PATH, as execvp finds it (an empty entry is the current directory; an unset PATH is
// "/usr/bin:/bin"), made absolute: ssh, srun, scancel where the user's cluster puts them, and
// the programs of scenario roles; else whichProgram's; "" when none.
std::string onPath(const std::string& prog);

// Runs `argv` (argv[0] a program name, looked up with whichProgram, or a path) to completion, for
// at most `limit` of its own time: time the command spent runnable but waiting for a CPU (its
// run-queue wait, /proc/<pid>/schedstat), or that the calling thread was frozen for (its 0.5 ms
// polls overslept by more than 250 ms: a whole machine frozen, which the command's wait does not
// show), is the machine's, not the command's, and extends the limit by the larger of the two, up
// to 6 times `limit` in all (a host whose CPUs are taken, or a scheduler that held the agent's
// session off the CPU for seconds, must not fail a heal that would have taken milliseconds).
// OK when it exits 0; kIoError naming the command, how it ended and its stderr otherwise;
// kTimeout (after killing it) when it runs past that, saying how long it ran, how much of that it
// waited for a CPU or its caller was frozen, and the state it was in (R running, S sleeping, D in
// the kernel); kUnavailable when the program is not installed. Its standard output goes to `out`
// when given; `input`, when not empty, is written to its standard input, which is then closed
// (kIoError when it cannot all be written).
Status runProgram(const std::vector<std::string>& argv,
                  std::chrono::milliseconds limit = std::chrono::seconds(10),
                  std::string* out = nullptr, const std::string& input = {});

// The time process `pid`'s main thread has spent runnable but waiting for a CPU
// (/proc/<pid>/schedstat), and its state letter (/proc/<pid>/stat: R, S, D, ...); zero and '?'
// when the kernel does not say.
struct RunQueueWait {
  std::chrono::nanoseconds waited{0};
  char state = '?';
};
RunQueueWait runQueueWait(pid_t pid);

// The processes of process group `pgid` that are still alive (for orphan checks).
int aliveInGroup(pid_t pgid);

// Every process id listed in /proc at this moment (empty when /proc cannot be read).
std::vector<pid_t> allPids();

}  // namespace mw::chaos
