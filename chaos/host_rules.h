// HostRules: the network faults of one host, as firewall rules and qdiscs in the network namespace
// of the process that makes them (a host agent, on its host or inside a simulated host).
//
// Every rule goes into two chains of its own (MWCHAOS-IN-<pid>, MWCHAOS-OUT-<pid>), jumped to
// first from INPUT and OUTPUT, so healing and cleaning up touch nothing else the host has. Each
// chain starts with RETURN rules for the control plane's TCP ports (ssh, slurmctld, slurmd, srun:
// the inventory's exempt ports), ahead of every fault rule: a fault never cuts the agent off from
// its controller, nor a node from its scheduler, and the host's own rules still judge that
// traffic (RETURN, not ACCEPT). iptables runs with -w (it waits for the xtables lock). The chains
// are made at the first fault, so a run without network faults needs no iptables.
//
// Needs root (CAP_NET_ADMIN) and the iptables and tc programs. Thread rules: one thread at a time.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "multiworld/status.h"

namespace mw::chaos {

class HostRules {
 public:
  // `exempt`: TCP port ranges (first, last) never cut. `default_dev`: the interface bandwidth and
  // delay shape when a fault names none.
  HostRules(std::vector<std::pair<int, int>> exempt, std::string default_dev);
  ~HostRules();  // remove()
  HostRules(const HostRules&) = delete;
  HostRules& operator=(const HostRules&) = delete;

  // Drops what this host sends to `peers` (addresses), or rejects it when `loud` (TCP gets a
  // reset, anything else ICMP port unreachable).
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
  // Removes every fault rule and qdisc made (the exempt rules stay): the network is whole again.
  Status heal();
  // heal(), then the chains and their jumps go too. Idempotent. The first error, if any.
  Status remove();

  // How many rules and qdiscs of its own are in place (for audits and tests).
  int faultsInPlace() const { return rules_ + static_cast<int>(shaped_.size()); }

 private:
  Status ensureChains();
  Status addExempt();
  Status checkShapeable(const std::string& dev) const;
  std::string dev(const std::string& d) const { return d.empty() ? default_dev_ : d; }

  std::vector<std::pair<int, int>> exempt_;
  std::string default_dev_;
  std::string in_chain_, out_chain_;
  bool chains_ = false;
  int rules_ = 0;
  std::set<std::string> shaped_;  // devices with a qdisc of ours
};

}  // namespace mw::chaos
