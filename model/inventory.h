// The inventory (docs/hosts.md, "Inventory"): the file given by `mwchaos run --hosts FILE`, beside
// the scenario and never inside it. It binds the scenario's logical hosts (a role's host = "h2")
// to real hosts and names the launcher that starts a host agent on each. Pure types and rules: no
// Lua (harness/inventory_loader.h reads the file), no processes, no environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "multiworld/status.h"

namespace mw::harness {

// How the host agent of each logical host is started.
//   kLocal: on this machine, every logical host the same machine (no namespaces);
//   kNetns: on this machine, one network namespace per logical host (today's simulated hosts);
//   kSsh:   `ssh [options] target AGENT agent --stdio`, one held connection per host;
//   kSlurm: `srun --overlap -N1 -n1 -u -w node AGENT agent --stdio` inside an allocation.
enum class Launcher { kLocal, kNetns, kSsh, kSlurm };

// "local", "netns", "ssh", "slurm".
const char* launcherName(Launcher l);
// The launcher launcherName() names `name`; nullopt for any other text.
std::optional<Launcher> parseLauncher(std::string_view name);

// One logical host, bound.
struct InventoryHost {
  std::string name;     // the logical host, as the scenario names it ("h1")
  std::string target;   // ssh: "node7" or "user@10.0.0.5"; slurm: the node; local/netns: ""
  std::string address;  // the address its peers reach it by (data plane); "": resolve target
  std::string dev;      // the interface tc faults shape; "": the agent finds it by route
  // Words the host's agent is started under, run there before the agent's own ("unshare",
  // "--time", "--monotonic", "2": its monotonic clock 2 s ahead; "taskset", "-c", "0"). Each word
  // is passed as it is, through the remote shell ssh runs: letters, digits and _ . / + @ % : = , ~
  // - only, and the first no option.
  std::vector<std::string> wrap;
};

// A port or an inclusive range of ports; first == last for one port.
struct PortRange {
  int first = 0;
  int last = 0;
  bool operator==(const PortRange&) const = default;
};

// "22", or "60001-63000".
std::string portRangeText(PortRange r);
// `text` as a port ("22") or a range ("60001-63000"), each port 1..65535 and first <= last.
// nullopt, with `why` set ("\"63000-60001\" is reversed (...)"), otherwise. REQUIRES: why != null.
std::optional<PortRange> parsePortRange(std::string_view text, std::string* why);

struct SshOptions {
  std::string user;                  // "": the target's user@ or ssh's own default
  int port = 22;                     // the sshd port on every host (exempt from faults)
  std::string identity;              // ssh -i, as written (ssh expands ~); "": ssh's default keys
  std::vector<std::string> options;  // "Key=Value", each passed as ssh -o Key=Value, sorted
};

// The Slurm allocation mwchaos runs inside, read from the environment by the loader.
struct SlurmAllocation {
  std::string job_id;              // $SLURM_JOB_ID; "": not inside an allocation
  std::vector<std::string> nodes;  // $SLURM_JOB_NODELIST, expanded, in its order
};

struct SlurmOptions {
  int slurmctld_port = 6817;  // SlurmctldPort
  int slurmd_port = 6818;     // SlurmdPort
  // SrunPortRange of slurm.conf: the ports srun listens on for its steps' I/O. nullopt: unknown
  // (srun then listens on ephemeral ports, which no rule can exempt; docs/hosts.md says what to
  // do).
  std::optional<PortRange> srun_ports;
  SlurmAllocation allocation;
};

// 30 s. The lease only ends an agent whose controller is silent but still connected (a cut link,
// a hung controller): a controller that dies or an ssh that drops closes the agent's input, which
// ends the lease at once. On the two-core test machine, beside two busy loops in another session,
// the kernel's session autogroups held whole sessions off the CPU for up to 13 s (docs/hosts.md,
// "The lease"); 15 s there ended 1 healthy run in 5 to 10.
constexpr int kDefaultLeaseMs = 30000;
constexpr int kMinLeaseMs = 100;
constexpr int kMaxLeaseMs = 60000;

struct Inventory {
  Launcher launcher = Launcher::kNetns;
  // ssh: every logical host a scenario may use; slurm: optional (empty: the scenario's hosts take
  // the allocation's nodes in order, bindScenario); local and netns: empty.
  std::vector<InventoryHost> hosts;
  SshOptions ssh;
  SlurmOptions slurm;
  std::string agent = "mwchaos";  // the agent program on the hosts (a path, or a name on PATH)
  // Control-plane ports added to the launcher's own (exemptPorts): never cut by any fault.
  std::vector<PortRange> exempt_ports;
  int lease_ms = kDefaultLeaseMs;  // an agent silent this long removes its rules, kills its roles
  std::string source;              // the file it was read from ("" when built in code)
};

// What is wrong with `inv`, one "field.path: what" per problem (the field paths of the file's
// format, docs/hosts.md: "hosts.h2.dev: ...", "ssh.port: ..."); empty when nothing is. Checks
// names and values (ports 1..65535, ranges not reversed, lease in [kMinLeaseMs, kMaxLeaseMs],
// targets, addresses, interfaces, the agent path and ssh fields free of characters a command
// line or remote shell would read otherwise), hosts only where the launcher takes them (ssh needs
// one at least), no logical host twice and no two on one target or one address. Pure.
std::vector<std::string> inventoryProblems(const Inventory& inv);

// The ports no fault may cut, sorted and merged: the launcher's own (ssh: ssh.port; slurm:
// slurmctld_port, slurmd_port and srun_ports when known; local and netns: none) and
// inv.exempt_ports. The agent puts a RETURN rule for each (as source or destination port) ahead
// of every fault rule. Pure.
std::vector<PortRange> exemptPorts(const Inventory& inv);

// Binds the logical hosts a scenario uses (`scenario_hosts`, each once) to real ones: the result
// holds one InventoryHost per scenario host, in the order given. local and netns bind every name
// to this machine (target ""); ssh and slurm take the inventory's entry of that name; slurm with
// no hosts listed gives the scenario's hosts, in natural order (h2 before h10), the allocation's
// nodes in order. Errors (kInvalidArgument) name the host and inv.source: a host not in the
// inventory, more hosts than nodes, slurm outside an allocation, ssh or slurm for a scenario
// that places no role on a host. REQUIRES: inventoryProblems(inv) is empty. Pure.
Result<std::vector<InventoryHost>> bindScenario(const Inventory& inv,
                                                const std::vector<std::string>& scenario_hosts);

// The names of a Slurm hostlist expression ($SLURM_JOB_NODELIST, scontrol show hostnames) in its
// order: "node[01-03,07],gpu5" is node01 node02 node03 node07 gpu5. A bracket holds numbers and
// ranges, a range keeps the zero padding of its first number, and several brackets in one name
// multiply ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2). Errors (kInvalidArgument) quote the whole text
// and say what is wrong: an empty name, an unclosed or nested bracket, a reversed range, a
// non-number, more than kMaxHostlistNames names. Pure.
constexpr size_t kMaxHostlistNames = 65536;
Result<std::vector<std::string>> expandHostlist(std::string_view text);

}  // namespace mw::harness
