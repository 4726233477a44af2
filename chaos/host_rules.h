// HostRules: the network faults of one host, as firewall rules and qdiscs in the network namespace
// of the process that makes them (a host agent, on its host or inside a simulated host).
//
// Every rule goes into two chains of its own (MWCHAOS-IN-<pid>, MWCHAOS-OUT-<pid>), jumped to
// first from INPUT and OUTPUT, so healing and cleaning up touch nothing else the host has. Each
// chain starts with an owner record (a rule with no target whose comment says "mwchaos-owner
// pid=P start=S devs=D1,D2": the agent's pid, its start time in clock ticks after boot, and the
// devices it shaped), then RETURN rules for the control plane's TCP ports (ssh, slurmctld, slurmd,
// srun: the inventory's exempt ports), ahead of every fault rule: a fault never cuts the agent off
// from its controller, nor a node from its scheduler, and the host's own rules still judge that
// traffic (RETURN, not ACCEPT). Its qdiscs carry the handle 4d57: ("MW"), so that they are known
// as an agent's. Rules are written in iptables-restore transactions (--noflush, -w: it waits for
// the xtables lock): a fault's rules all take effect in the same instant, or none does, and one
// program runs per fault (an iptables program's end waited up to 3.5 s on the kernel beside busy
// CPUs: docs/testing.md, Hunts 20 to 23). The chains are made by ready() or at the first fault,
// so a run without network faults needs no iptables.
//
// An agent that dies (SIGKILL, the OOM killer, a crash) leaves its chains and qdiscs in force;
// sweepDeadAgents(), which every agent runs when it starts and `mwchaos hosts check`/`clean` run
// through one, removes them: those of every owner that is not alive (its pid gone, or now another
// process's: the start time differs), never one of a live agent.
//
// Needs root (CAP_NET_ADMIN) and the iptables and tc programs. Thread rules: one thread at a time.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "multiworld/status.h"

namespace mw::chaos {

// The handle of the root qdiscs an agent installs ("4d57:", "MW").
inline constexpr const char* kQdiscHandle = "4d57:";

class HostRules {
 public:
  // `exempt`: TCP port ranges (first, last) never cut. `default_dev`: the interface bandwidth and
  // delay shape when a fault names none. `control_peer`: the controller's address as this host
  // sees it (the ssh client, the srun host), "" when unknown. A single exempt port is exempt as
  // source or destination with any peer (22, 6817: ports no connection takes as its ephemeral
  // one); a range of ports (srun's) only with the controller when it is known, since a data-plane
  // connection may take an ephemeral port inside it.
  HostRules(std::vector<std::pair<int, int>> exempt, std::string default_dev,
            std::string control_peer = "");
  ~HostRules();  // remove()
  HostRules(const HostRules&) = delete;
  HostRules& operator=(const HostRules&) = delete;

  // Makes this agent's chains (owner record, exempt rules, jumps) now, before a run's traffic,
  // so that a cut() or loss() later runs one program that only adds its rules. Idempotent; every
  // fault, and prepare(), calls it first. On failure it is tried again by the next call.
  Status ready();
  // Drops what this host sends to `peers` (addresses), or rejects it when `loud` (TCP gets a
  // reset, anything else ICMP port unreachable): every peer in one transaction.
  Status cut(const std::vector<std::string>& peers, bool loud);
  // Drops each packet in and out (loopback excepted) with probability `p` (iptables statistic).
  Status loss(double p);
  // Caps what `dev` sends to `rate` ("10mbit"; tc tbf). kUnavailable, changing nothing, when
  // `dev` has a root qdisc someone configured (not the kernel's default): it replaces the root
  // qdisc, and heal() could only put the default back.
  Status bandwidth(const std::string& dev, const std::string& rate);
  // Delays what `dev` sends (tc netem). kUnavailable where the kernel has no netem, and as
  // bandwidth() on a device with a root qdisc of its own.
  Status delay(const std::string& dev, int ms, int jitter_ms);
  // Readies `dev` for bandwidth() and delay() before a run's traffic starts, so that at a fault
  // they run one tc program and no iptables one: `dev` is checked as they check it and written
  // into this agent's owner record now (rewriting the record replaces a rule, which took 0.9 to
  // 3.5 s beside two busy loops and a scenario's traffic: docs/testing.md, Hunt 20). With
  // `delay_too`, also whether delay() would work, found by doing it: a netem qdisc of 0 ms put
  // on `dev` and taken off at once (a device this agent shapes already is left as it is). Ok,
  // or what bandwidth() or delay() would answer (kUnavailable without netem). The chains are
  // made first (ready()), whatever `dev` answers.
  Status prepare(const std::string& dev, bool delay_too);
  // Puts every fault rule out of force (a RETURN ahead of them, comment "mwchaos-healed": only
  // added, since deleting waits on the kernel) and removes every qdisc made: the network is whole
  // again. The rules behind the RETURN stay, reached by no packet, until remove().
  // What it could not remove stays counted (faultsInPlace, unhealed) and is tried again by the
  // next heal() or remove(); the first error is returned.
  Status heal();
  // heal(), then the chains and their jumps go too. Idempotent. The first error, if any.
  Status remove();

  // How many rules and qdiscs of its own are in place (for audits and tests).
  int faultsInPlace() const { return rules_ + static_cast<int>(shaped_.size()); }
  // What the last heal() or remove() could not remove ("rules in MWCHAOS-OUT-12", "qdisc on
  // eth0"), empty when everything went.
  const std::vector<std::string>& unhealed() const { return unhealed_; }

 private:
  // One iptables-restore --noflush transaction of `lines` in the filter table; kInvalidArgument,
  // nothing run, when a line holds a line break or a NUL byte.
  static Status restore(const std::vector<std::string>& lines);
  // iptables arguments as one line of it: a word that is empty or holds a space, tab, quote or
  // backslash is quoted, its quotes and backslashes escaped. (The agent protocol refuses such
  // peers, devices and rates. A line break or NUL cannot be quoted: restore() refuses the line.)
  static std::string restoreLine(const std::vector<std::string>& args);
  // The exempt rules, each as iptables arguments after "-w" ("-A", chain, ...).
  std::vector<std::vector<std::string>> exemptRules() const;
  // The owner record's comment: "mwchaos-owner pid=P start=S devs=eth0,...".
  std::string ownerRecord() const;
  // Rewrites the owner record (first rule of each chain) with the devices in recorded_.
  Status writeOwner();
  // ready(), and `dev` in the owner record (written when it was not there yet).
  Status record(const std::string& dev);
  Status checkShapeable(const std::string& dev) const;
  std::string dev(const std::string& d) const { return d.empty() ? default_dev_ : d; }
  // Where a fault rule, or a heal's RETURN, is inserted in each chain: after the owner record
  // and the exempt rules (two per range), ahead of every rule of earlier faults; `k` places the
  // k-th rule of one transaction after the ones before it.
  std::string faultSlot(int k = 0) const { return std::to_string(2 + 2 * exempt_.size() + k); }

  std::vector<std::pair<int, int>> exempt_;
  std::string default_dev_;
  std::string control_peer_;
  std::string in_chain_, out_chain_;
  std::string owner_;  // "pid=P start=S"
  bool chains_ = false;
  int rules_ = 0;
  std::set<std::string> shaped_;    // devices with a qdisc of ours
  std::set<std::string> recorded_;  // devices the owner record lists: shaped_ and any shaped once
  std::vector<std::string> unhealed_;
};

// What sweepDeadAgents removed.
struct SweepResult {
  std::vector<std::string> owners;  // "pid 123 (gone)" per dead owner whose leftovers went
  int chains = 0;                   // chains removed (two per agent)
  int qdiscs = 0;                   // root qdiscs of ours removed
  std::vector<std::string> failed;  // what could not be removed, and why
};

// Removes, in this network namespace, the chains, jumps and qdiscs of every agent that is not
// alive: an owner record whose pid is gone or belongs to a process started at another time; a
// chain without one (an older agent, or one that died making it) whose pid runs no mwchaos agent;
// a qdisc with handle 4d57: that no live owner lists. `self` (this process's pid) is never swept.
// kUnavailable when iptables or tc is missing or this process is not root (nothing to sweep
// then: no agent could have made rules).
Result<SweepResult> sweepDeadAgents();

// This process's start time, in clock ticks after boot (/proc/self/stat field 22), as an owner
// record names it; 0 when it cannot be read.
unsigned long long processStartTime(int pid);

}  // namespace mw::chaos
