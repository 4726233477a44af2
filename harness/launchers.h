// Launchers (docs/hosts.md, "Launchers"): how the controller starts the host agent of each of a
// scenario's hosts. A launcher only starts `mwchaos agent --stdio` there and keeps its pipe open;
// every fault then travels on that pipe (never a process per fault).
//
//   local: this machine, the agent as a child (every role without a host);
//   netns: a simulated host, the agent started inside its network namespace;
//   ssh:   ssh [options] TARGET AGENT agent --stdio;
//   slurm: srun --overlap -N1 -n1 -u -w NODE AGENT agent --stdio, inside the allocation.
//
// Thread rules: pure functions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "agent/client.h"
#include "model/inventory.h"
#include "model/scenario.h"

namespace mw::harness {

// One host's agent: how to start it, the address its peers reach it by (the data plane: stores
// and partitions), and the mw_worker program there.
struct HostLaunch {
  std::string host;  // the scenario's name; "" for this machine
  agent::LaunchSpec spec;
  std::string address;  // "" on this machine's loopback
  std::string worker_path;
};

// The data-plane address of host `host` (the inventory's `address`, else `target`'s host part),
// resolved to a numeric IPv4 address, so that peers' firewall rules name it. kInvalidArgument
// naming the field for an IPv6 address (network faults are IPv4 rules: a partition would cut
// nothing) and for a name this machine cannot resolve (an ssh_config alias).
Result<std::string> dataPlaneAddress(const std::string& host, const std::string& address,
                                     const std::string& target);

// The ssh command that starts the agent on `h` (user, port, identity and -o options from the
// inventory; BatchMode, so a missing key fails instead of asking), the agent under h.wrap.
std::vector<std::string> sshArgv(const Inventory& inv, const InventoryHost& h);
// The srun step that starts the agent on node `h.target` of the allocation, under h.wrap.
std::vector<std::string> srunArgv(const Inventory& inv, const InventoryHost& h);

// How to start the agent of inventory host `h` with an ssh or slurm inventory: its command
// (sshArgv or srunArgv), the inventory's lease and the control plane's exempt ports.
agent::LaunchSpec launchSpecFor(const Inventory& inv, const InventoryHost& h);

// The mw_worker program beside `agent` (a path), or "mw_worker" on PATH when `agent` is a name.
std::string workerBeside(const std::string& agent);

// Whether the scenario's faults can run under inventory `inv` (null: none given): scancel_step
// needs the slurm launcher. kInvalidArgument naming the fault's file:line and the launcher.
Status launcherFits(const Scenario& s, const Inventory* inv);

// The agents scenario `s` needs under inventory `inv` (null: none given). Without an inventory, or
// with a local or netns one, every host of the scenario is simulated: `netns(host)` and
// `address(host)` give its namespace and address. Roles without a host get this machine's agent
// (`agent_path`, `worker_path`). Errors (kInvalidArgument) are launcherFits' and bindScenario's.
Result<std::vector<HostLaunch>> planLaunches(
    const Scenario& s, const Inventory* inv, const std::string& agent_path,
    const std::string& worker_path, const std::function<std::string(const std::string&)>& netns,
    const std::function<std::string(const std::string&)>& address);

// Whether the scenario's hosts are simulated here (no inventory, or a local or netns one).
inline bool simulatedHosts(const Inventory* inv) {
  return inv == nullptr || inv->launcher == Launcher::kLocal || inv->launcher == Launcher::kNetns;
}

}  // namespace mw::harness
