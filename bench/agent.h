// Agents: the worker processes of mw_bench.
//
// The leader (the process the user started) spawns each agent by fork+exec of /proc/self/exe in the
// hidden role `mw_bench agent --fd 3`. The agent dies with the leader (PR_SET_PDEATHSIG) and obeys
// one command per line on a Unix socket pair, answering one line per command ("ok ...", "done" or
// "err <why>"):
//   join NAME RANK SIZE PORT HB_MS      initWorld (blocking); answers "ok MS NS": the ms it took
//                                       and the steady-clock ns when it returned
//   leave NAME                          removeWorld
//   send NAME DST BYTES ITERS           ITERS blocking Communicator::send of a float32 pattern
//   allreduce NAME COUNT ITERS          ITERS in-place float32 sum all-reduces of zeros
//   allreduce-check NAME COUNT          one all-reduce of 2.0s; every element must come back 3.0
//   stream NAME DST BYTES               a thread sending BYTES messages until the world fails
//   gloo-init DIR PREFIX RANK SIZE      raw Gloo context over a FileStore in DIR
//   gloo-send DST BYTES ITERS           raw Gloo send loop (one fixed slot)
//   gloo-allreduce COUNT ITERS          raw gloo::allreduce loop
//   gloo-allreduce-check COUNT          as allreduce-check, raw Gloo
//   paired-allreduce NAME COUNT N       N all-reduces (as above) alternating runtime and raw Gloo
//                                       in the order pairedUsesGloo() gives
//   paired-send NAME DST BYTES N        N sends alternating the same way
//   tcp-connect PORT                    one loopback TCP connection to the leader
//   tcp-send BYTES ITERS                blocking send loop on it
//   quit                                remove every world and exit 0
//
// Thread rules: an Agent handle belongs to the thread that spawned it (the leader's main thread:
// the parent-death signal follows the thread that forked).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "multiworld/multiworld.h"

namespace mwb {

class Agent {
 public:
  // Spawns an agent; `label` names it in errors. With `cpu` >= 0 the agent (and every thread it
  // starts) runs on that CPU only. Throws BenchError.
  static std::unique_ptr<Agent> spawn(const std::string& label, int cpu = -1);
  // Asks a live agent to quit (3 s), then SIGKILLs it; always reaps it.
  ~Agent();

  // Sends one command line without waiting for its answer.
  void post(const std::string& line);
  // The next answer line. Throws BenchError on timeout, on EOF and on an "err" answer.
  std::string reply(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  std::string call(const std::string& line,
                   std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    post(line);
    return reply(timeout);
  }

  pid_t pid() const { return pid_; }
  const std::string& label() const { return label_; }
  // Sends `sig`; after SIGKILL the agent is reaped and counts as dead.
  void signal(int sig);

 private:
  Agent(std::string label, pid_t pid, int fd) : label_(std::move(label)), pid_(pid), fd_(fd) {}
  void reap();

  std::string label_;
  pid_t pid_;
  int fd_;
  bool dead_ = false;
  std::string buffered_;
};

// The agent role: serves commands on `fd` until "quit" or EOF. Returns the exit code.
int agentMain(int fd);

// Fills `count` floats with the pattern `send` transmits; checkPattern says whether they hold it.
void fillPattern(float* p, size_t count);
bool checkPattern(const float* p, size_t count);

// Whether operation `i` of a paired run uses raw Gloo (else the runtime): A B B A, A B B A, ...,
// so that each variant follows and precedes each variant equally often.
inline bool pairedUsesGloo(long i) { return ((i ^ (i >> 1)) & 1) != 0; }

// Throws BenchError("<what>: <status>") unless `s` is OK.
void expectOk(const mw::Status& s, const std::string& what);

// Starts joining `name` as rank 0 hosting the store on a free port, and returns once the port is
// known. `join` completes when every member has joined.
struct Hosted {
  mw::Work join;
  uint16_t port = 0;
};
Hosted hostWorld(mw::WorldManager& m, const std::string& name, int size,
                 std::chrono::milliseconds heartbeat_timeout);

// "join NAME RANK SIZE PORT HB_MS".
std::string joinCommand(const std::string& name, int rank, int size, uint16_t port,
                        std::chrono::milliseconds heartbeat_timeout);

}  // namespace mwb
