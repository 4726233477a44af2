// The host agent's protocol (docs/hosts.md, "The agent's protocol"): what the controller (mwchaos
// run) and a host agent (mwchaos agent --stdio) say to each other over the agent's standard input
// and output, for the whole run.
//
// Each frame is one JSON object on one line, at most kMaxFrameBytes long with its newline: {"t":
// <type>, "id": <number>, ...fields}. The controller sends requests, each with an id of its own;
// the agent answers each with exactly one frame of the same id (a Reply, or a HelloReply to a
// Hello) and, unasked, sends Output, Eof and Exit frames (id 0) about the processes it runs. The
// first frame each way is a Hello: an agent of another protocol version or build refuses the
// controller, and the controller the agent, naming both.
//
// Any frame the controller sends renews the agent's lease (Ping only does that): when no frame
// comes for lease_ms, or the agent's input closes, the agent removes its network rules and kills
// its processes.
//
// Thread rules: the functions are pure; call them from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/inventory.h"
#include "multiworld/status.h"

namespace mw::agent {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxFrameBytes = 1 << 20;
// The most bytes of a process's output one Output frame carries (with JSON's escapes it stays
// under kMaxFrameBytes).
inline constexpr size_t kMaxOutputChunk = 64 * 1024;

// This build's identity ("0.1.0+<commit>"): an agent of another build is refused.
std::string buildId();

// A TCP port range of the control plane, never cut by a fault (first <= last): the inventory's.
using PortRange = harness::PortRange;

// ---- Requests (controller -> agent) ----

struct Hello {
  int version = kProtocolVersion;
  std::string build;
  int lease_ms = harness::kDefaultLeaseMs;  // 50..600000
  std::vector<PortRange> exempt;  // control-plane ports: RETURN rules ahead of every fault rule
};
// Renews the lease; never answered.
struct Ping {};
// Starts a process for `role` (one process per role at a time): its own process group, stdin,
// stdout and stderr pipes to the agent, fd 3 a telemetry pipe when `telemetry`. Answered with the
// pid.
struct Spawn {
  std::string role;
  std::vector<std::string> argv;  // argv[0] a path unless `executable` is given
  std::vector<std::string> env;   // "NAME=value", each replacing that variable
  std::string cwd;
  std::string executable;
  bool telemetry = false;
  bool meter = false;  // meter its CPU from outside (Sample)
};
// Sends `sig` to the role's process group. Reply.ends says whether the signal, sent then, ends the
// process (decided before it is sent).
struct Signal {
  std::string role;
  int sig = 0;
};
// One line to the role's stdin (no newline); dropped when its pipe is full or closed.
struct Tell {
  std::string role;
  std::string line;
};
struct CloseStdin {
  std::string role;
};
// SIGKILL to the role's group unless it has exited; answered once it is reaped (its Exit first).
struct Kill {
  std::string role;
};
// Forgets a role that has exited: its temporary folder and fifo are removed. Reply.count: how many
// processes of its group are still alive (0 unless something escaped).
struct Release {
  std::string role;
};
// A fresh folder for the role's files (libfiu's fifos), removed with the role. Reply.path.
struct MakeDir {
  std::string role;
};
// Opens the role's libfiu control fifo whose ".in" path is `path` (chaos/fifo_control.h).
struct FifoOpen {
  std::string role;
  std::string path;
  int timeout_ms = 5000;
};
// One libfiu command through the role's fifo. kUnavailable when none is open.
struct FifoCommand {
  std::string role;
  std::string command;
  int timeout_ms = 1000;
};
// A network fault on this host, as firewall rules and qdiscs the agent owns:
//   "cut": traffic to `peers` (addresses) dropped, or rejected when `loud`, all in one instant;
//   "loss": each packet in and out (not loopback) dropped with probability `p`;
//   "bandwidth": what `dev` sends capped to `rate` (tc tbf);
//   "delay": what `dev` sends delayed by delay_ms (tc netem; kUnavailable without netem);
//   "prepare": before a run's traffic, `dev` (or the one the route to `peers` takes) readied
//     for "bandwidth" and "delay" faults later (chaos::HostRules::prepare): checked and written
//     into the agent's owner record; with delay_ms > 0, also whether "delay" would work there.
//     Ok, or kUnavailable saying why; no traffic is shaped;
//   "ready": before a run's traffic, the agent's chains made (chaos::HostRules::ready), so
//     that a "cut" or "loss" later is one program adding its rules; nothing is cut;
//   "heal": every rule and qdisc the agent made removed.
struct Net {
  std::string op;
  std::vector<std::string> peers;
  bool loud = false;
  double p = 0;
  std::string rate;
  int delay_ms = 0;
  int jitter_ms = 0;
  std::string dev;  // "": the agent's --dev, else the interface of its route to `peers`
};
// Answered with the agent's CLOCK_MONOTONIC (Reply.t_ns).
struct ClockRead {};
// Answered with the CPU each metered role used since the last Sample (Reply.cpu).
struct Sample {};
// Ends everything: rules removed, processes killed, folders removed; answered, then the agent
// exits 0.
struct Bye {};

// ---- Answers and events (agent -> controller) ----

struct HelloReply {
  int version = kProtocolVersion;
  std::string build;
  std::string host;  // uname's nodename
  int64_t pid = 0;
  std::string boot_id;  // /proc/sys/kernel/random/boot_id: equal means one kernel, one clock
  // "root", "iptables", "tc", "nsenter", "ip", "gpus"; in an srun step also "slurm_job" and
  // "slurm_step" (scancel_step cancels that step); "swept" when the agent removed what dead
  // agents left on its host as it started (what, and what it could not).
  std::map<std::string, std::string> facts;
};
struct CpuUse {
  std::string role;
  int64_t cpu_ns = 0;
  int64_t wait_ns = 0;
};
struct Reply {
  Code code = Code::kOk;
  std::string why;          // when code is not kOk
  int64_t pid = 0;          // Spawn
  bool ends = false;        // Signal
  int64_t t_ns = 0;         // Clock, Sample; Net: when it was done (its rules in force)
  int64_t count = 0;        // Release
  std::string path;         // MakeDir
  std::vector<CpuUse> cpu;  // Sample
  int64_t took_ns = 0;      // Net: how long the agent took to do it (iptables, tc)
};
// Bytes a role wrote on `stream` (1 stdout, 2 stderr, 3 telemetry).
struct Output {
  std::string role;
  int stream = 1;
  std::string data;
};
// The role's `stream` reached end of file.
struct Eof {
  std::string role;
  int stream = 1;
};
// The role's process exited ("exited 0", "killed by SIGKILL"), at t_ns on the agent's clock.
struct Exit {
  std::string role;
  std::string text;
  int code = -1;
  int signal = 0;
  int64_t t_ns = 0;
};

using Message =
    std::variant<Hello, Ping, Spawn, Signal, Tell, CloseStdin, Kill, Release, MakeDir, FifoOpen,
                 FifoCommand, Net, ClockRead, Sample, Bye, HelloReply, Reply, Output, Eof, Exit>;

struct Frame {
  uint64_t id = 0;
  Message msg;
};

// The frame as one line, newline included. Bytes of Output::data that are not UTF-8 are replaced
// (U+FFFD): output is relayed for logs and protocol lines, which are ASCII.
std::string encode(const Frame& f);

// One line (without its newline). kInvalidArgument naming the frame type and field on anything
// malformed: not JSON, no "t" or "id", an unknown type, a field missing or of the wrong type, a
// value out of its range. Never throws.
Result<Frame> decode(std::string_view line);

// The frame type's name as it is written ("spawn", "reply", ...).
const char* typeName(const Message& m);

// Splits complete lines off `buf` (a stream's bytes so far), leaving a partial line in it. A line
// longer than kMaxFrameBytes is an error (kInvalidArgument), and the stream cannot be read on.
Status takeLines(std::string& buf, std::vector<std::string>& lines);

// Hello's check, on either side: OK when `version` and `build` equal ours, else kInvalidUsage
// naming both versions and builds ("agent protocol 2 (build X), controller protocol 1 (build Y)").
Status checkPeer(int version, const std::string& build, const char* peer_name);

}  // namespace mw::agent
