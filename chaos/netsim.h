// SimNet: simulated hosts for network faults. Each host is a network namespace with one interface
// (eth0, 10.201.0.N/24) joined by veth to a bridge in a switch namespace. Every namespace is held
// by a child process that dies with the harness (parent-death signal), so when the harness goes,
// however it goes, the kernel removes the namespaces, their veths, routes and firewall rules.
//
// Faults on these hosts are made by a host agent in each namespace (chaos/host_rules.h).
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
