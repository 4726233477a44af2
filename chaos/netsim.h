// SimNet: simulated hosts for network faults. Each host is a network namespace with one interface
// (eth0, 10.201.0.N/24) joined by veth to a bridge in a switch namespace. Every namespace is held
// by a child process that dies with the harness (parent-death signal), so when the harness goes,
// however it goes, the kernel removes the namespaces, their veths, routes and firewall rules.
//
// Faults are firewall rules (iptables) and qdiscs (tc) inside the hosts' namespaces. The kernel of
// these machines has no netem: delay and netem-based loss are reported unavailable, never ignored.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), network namespaces, and the ip, iptables, tc and
// nsenter programs. Thread rules: one thread at a time.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "multiworld/status.h"

namespace mw::chaos {

class SimNet {
 public:
  // OK when this machine can build a SimNet; kUnavailable saying what is missing otherwise.
  static Status available();
  // Builds the switch and one namespace per host (names as given). kUnavailable / kIoError.
  static Result<std::unique_ptr<SimNet>> create(const std::vector<std::string>& hosts);
  ~SimNet();  // kills the holders: the kernel removes everything
  SimNet(const SimNet&) = delete;
  SimNet& operator=(const SimNet&) = delete;

  // The host's address ("10.201.0.2") and its namespace ("/proc/<pid>/ns/net").
  std::string address(const std::string& host) const;
  std::string netns(const std::string& host) const;

  // Cuts traffic from hosts `a` to hosts `b` and, unless `oneway`, from `b` to `a`. Silent: the
  // packets are dropped (peers see nothing until their own timeouts); loud: TCP gets a reset at
  // once (ECONNRESET), other packets an ICMP reject.
  Status partition(const std::vector<std::string>& a, const std::vector<std::string>& b, bool loud,
                   bool oneway);
  // Drops each packet to and from `host` with probability `p` (iptables statistic).
  Status loss(const std::string& host, double p);
  // Caps what `host` sends to `rate` ("10mbit", "1gbit"; tc tbf).
  Status bandwidth(const std::string& host, const std::string& rate);
  // Delays what `host` sends by `ms` (tc netem). kUnavailable where the kernel has no netem.
  Status delay(const std::string& host, int ms, int jitter_ms);
  // Removes every rule and qdisc: the network is whole again.
  Status heal();

  // The inode numbers of its network namespaces (the switch's and every host's), for
  // namespacesAlive() once it is gone.
  std::vector<ino_t> namespaceInodes() const;

 private:
  SimNet() = default;
  struct Holder {
    pid_t pid = -1;
  };
  static Result<Holder> hold();
  // Runs argv in the namespace of `holder` (nsenter); kIoError with its stderr on failure.
  Status in(const Holder& h, const std::vector<std::string>& argv) const;
  Status forHost(const std::string& host, const Holder** h, std::string* addr) const;

  Holder switch_;
  std::vector<std::string> order_;
  std::map<std::string, Holder> hosts_;
  std::map<std::string, std::string> addrs_;
};

// How many of the network namespaces `inodes` some process still holds (by /proc/*/ns/net): zero
// once a SimNet is destroyed and no worker of it is left, since the kernel then removes each
// namespace with its veths, bridge and firewall rules.
int namespacesAlive(const std::vector<ino_t>& inodes);

}  // namespace mw::chaos
