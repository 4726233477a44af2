// Small things the host agent (agent/server.cc) needs of its host: facts for hello, its role
// folders, and the sweep of what dead agents left.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "chaos/process.h"
#include "model/agent_protocol.h"

namespace mw::agent {

// What this agent says of itself and its host in answer to hello: its build, node, pid and boot,
// root, the tools network faults need, GPUs, its srun step (if any), and `swept`
// (sweepLeftovers) when not empty.
HelloReply helloReply(const std::string& swept);

// The first line of the file at `path` ("" when it cannot be read).
std::string firstLine(const char* path);

// The NVIDIA GPUs this host shows (/dev/nvidiaN).
int countGpus();

// Removes a folder of fifos and files (not recursive: the agent's folders hold no folders); true
// when it is gone.
bool removeDir(const std::string& dir);

// Whether `path` names an entry directly inside one of `folders` (no "..", no deeper folder, no
// link to follow in its name): a fifo command goes only into a role's own folder.
bool insideFolders(const std::string& path, const std::vector<std::string>& folders);

// The interface this host's route to `address` goes out of (`ip route get ADDRESS`: "... dev
// ens5 ..."); "" when there is no route or ip cannot tell.
std::string routeDevice(const std::string& address);

// The controller's address as this host sees it: the ssh client's (SSH_CONNECTION), else the
// srun host's (SLURM_SRUN_COMM_HOST); "" when the agent was started otherwise.
std::string controlPeer();

// Runs chaos::sweepDeadAgents() and says what it removed ("removed 2 chain(s) and 1 qdisc(s)
// left by dead agents (pid 123)", with what it could not remove); "" when there was nothing, or
// nothing could be looked at (not root, no iptables).
std::string sweepLeftovers();

// Blocks every signal whose default action ends a process and that a process can catch (HUP,
// INT, QUIT, ABRT, USR1, USR2, ALRM, TERM, STKFLT, XCPU, XFSZ, VTALRM, PROF, IO, PWR and the
// real-time ones) and returns a signalfd that reads them (-1 when it cannot be made): each one
// runs the agent's cleanup. SIGKILL and the agent's own faults (SIGSEGV) cannot be: what such an
// agent leaves is swept by the next one (sweepLeftovers).
int cleanupSignalFd();

// Kills role processes for good: SIGKILL to each one still running, then, until `limit`, SIGKILL
// to each one's group while any member of it lives; a leader is released (reaped) only once its
// group is empty, since until then its zombie holds the group's id, so the group's SIGKILL
// reaches no other process. What has not exited by `limit` (stuck in the kernel) is abandoned to
// it. `stall` (tests only) acts as if no process ever exited. Returns how many were running at
// the call; *left: how many were abandoned.
int killRoles(const std::vector<chaos::Process*>& procs, std::chrono::milliseconds limit,
              bool stall, int* left);

// The agent's test hooks, read from its environment (tests only; every one off when unset):
// - MW_AGENT_TEST_STALL_REAP=1: the cleanup acts as if no role ever exited after its SIGKILL, as
//   a process stuck in the kernel does (tests/hosts: a reaping that never ends).
// - MW_AGENT_TEST_NET_DELAY_MS=N (0 to 10000): each network request takes N ms more, as one held
//   up by its host would (tests/harness: a fault's note names the hosts slow to do it).
// - MW_AGENT_TEST_NET_FAIL_PEER=ADDR: a cut that names ADDR among its peers fails, as one whose
//   iptables program failed would (tests/harness: a partition done on some hosts and not on
//   others is an error naming where it is in force).
struct TestHooks {
  bool stall_reap = false;
  int net_delay_ms = 0;
  std::string net_fail_peer;
  static TestHooks fromEnv();
};

}  // namespace mw::agent
