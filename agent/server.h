// The host agent (mwchaos agent --stdio): runs one host's part of a scenario for one controller,
// driven over its standard input and output by the protocol of model/agent_protocol.h.
//
// It starts and stops the host's roles (each in a process group of its own, killed if the agent
// dies), relays what they write, delivers their faults (signals, stdin commands, libfiu fifo
// commands) and the host's network faults (chaos/host_rules.h), and answers clock samples.
//
// The lease: when no frame comes from the controller for the lease (2 s unless Hello says
// otherwise), when its input closes, or on SIGTERM, SIGINT or SIGHUP, the agent removes its
// network rules, kills its roles, removes their folders, and exits. Nothing is left on the host.
//
// Thread rules: serve() runs on the thread that calls it, alone.
#pragma once

#include <string>

namespace mw::agent {

struct ServeOptions {
  // The interface bandwidth and delay faults shape when a fault names none (--dev). Empty: the
  // one this host's route to the fault's peers (the scenario's other hosts) goes through; with
  // no route either, the fault is refused (naming hosts.NAME.dev).
  std::string default_dev;
};

// Exit codes of serve().
inline constexpr int kServedBye = 0;        // the controller said bye
inline constexpr int kServedRefused = 2;    // another protocol version or build, or a bad frame
inline constexpr int kServedLeaseLost = 3;  // input closed, lease expired, or a signal

// Serves one controller on `in_fd` (frames in) and `out_fd` (frames out) until it says bye or the
// lease ends; cleans up in every case and returns one of the codes above. Writes a line saying why
// it ended on stderr unless the controller said bye.
int serve(int in_fd, int out_fd, const ServeOptions& options = {});

}  // namespace mw::agent
