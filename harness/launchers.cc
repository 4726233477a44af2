#include "harness/launchers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>

namespace mw::harness {

std::vector<std::string> sshArgv(const Inventory& inv, const InventoryHost& h) {
  std::vector<std::string> argv = {"ssh", "-T", "-o", "BatchMode=yes"};
  if (inv.ssh.port != 22) argv.insert(argv.end(), {"-p", std::to_string(inv.ssh.port)});
  if (!inv.ssh.identity.empty()) argv.insert(argv.end(), {"-i", inv.ssh.identity});
  if (!inv.ssh.user.empty()) argv.insert(argv.end(), {"-l", inv.ssh.user});
  for (const auto& o : inv.ssh.options) argv.insert(argv.end(), {"-o", o});
  argv.push_back(h.target);
  argv.insert(argv.end(), h.wrap.begin(), h.wrap.end());
  argv.insert(argv.end(), {inv.agent, "agent", "--stdio"});
  if (!h.dev.empty()) argv.insert(argv.end(), {"--dev", h.dev});
  return argv;
}

std::vector<std::string> srunArgv(const Inventory& inv, const InventoryHost& h) {
  std::vector<std::string> argv = {"srun", "--overlap", "-N1", "-n1", "-u", "-w", h.target};
  if (!inv.slurm.allocation.job_id.empty()) {
    argv.push_back("--jobid=" + inv.slurm.allocation.job_id);
  }
  argv.insert(argv.end(), h.wrap.begin(), h.wrap.end());
  argv.insert(argv.end(), {inv.agent, "agent", "--stdio"});
  if (!h.dev.empty()) argv.insert(argv.end(), {"--dev", h.dev});
  return argv;
}

agent::LaunchSpec launchSpecFor(const Inventory& inv, const InventoryHost& h) {
  agent::LaunchSpec spec;
  spec.host = h.name;
  spec.launcher = launcherName(inv.launcher);
  spec.argv = inv.launcher == Launcher::kSsh ? sshArgv(inv, h) : srunArgv(inv, h);
  spec.lease_ms = inv.lease_ms;
  spec.exempt = exemptPorts(inv);
  return spec;
}

Result<std::string> dataPlaneAddress(const std::string& host, const std::string& address,
                                     const std::string& target) {
  const bool given = !address.empty();
  std::string name = given ? address : target.substr(target.find('@') + 1);
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  const std::string what = "hosts." + host + (given ? ".address" : ".target");
  in6_addr v6{};
  if (::inet_pton(AF_INET6, name.substr(0, name.find('%')).c_str(), &v6) == 1) {
    return Status(Code::kInvalidArgument,
                  what + ": \"" + name +
                      "\" is an IPv6 address: network faults are IPv4 firewall rules, and a "
                      "partition between IPv6 addresses would cut nothing. Give hosts." +
                      host + ".address the host's IPv4 address on the data plane");
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status(Code::kInvalidArgument,
                  what + ": \"" + name + "\" resolves to no IPv4 address on this machine (" +
                      ::gai_strerror(rc) + ")" +
                      (given ? ""
                             : "; an ssh_config alias means nothing to the peers: give hosts." +
                                   host + ".address"));
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
  ::freeaddrinfo(found);
  return std::string(text);
}

std::string workerBeside(const std::string& agent) {
  const size_t slash = agent.rfind('/');
  return slash == std::string::npos ? "mw_worker" : agent.substr(0, slash + 1) + "mw_worker";
}

Status launcherFits(const Scenario& s, const Inventory* inv) {
  for (const auto& a : s.timeline) {
    if (a.kind() != FaultKind::kScancelStep) continue;
    if (inv == nullptr || inv->launcher != Launcher::kSlurm) {
      return Status(Code::kInvalidArgument,
                    a.where + ": scancel_step needs the slurm launcher (a Slurm step per host): " +
                        (inv == nullptr ? std::string("run it with --hosts and an inventory of "
                                                      "launcher = \"slurm\" (docs/hosts.md)")
                                        : "the inventory's launcher is \"" +
                                              std::string(launcherName(inv->launcher)) + "\""));
    }
  }
  return Status::Ok();
}

Result<std::vector<HostLaunch>> planLaunches(
    const Scenario& s, const Inventory* inv, const std::string& agent_path,
    const std::string& worker_path, const std::function<std::string(const std::string&)>& netns,
    const std::function<std::string(const std::string&)>& address) {
  std::vector<HostLaunch> out;
  if (Status fits = launcherFits(s, inv); !fits.ok()) return fits;
  const std::vector<std::string> hosts = s.hosts();
  const int lease = inv ? inv->lease_ms : kDefaultLeaseMs;
  const std::vector<PortRange> exempt = inv ? exemptPorts(*inv) : std::vector<PortRange>();
  auto base = [&](const std::string& host, const std::string& launcher) {
    HostLaunch l;
    l.host = host;
    l.spec.host = host.empty() ? "local" : host;
    l.spec.launcher = launcher;
    l.spec.lease_ms = lease;
    l.spec.exempt = exempt;
    return l;
  };
  if (simulatedHosts(inv)) {
    for (const auto& h : hosts) {
      HostLaunch l = base(h, "netns");
      // A simulated host's one interface is eth0 (chaos::NetSim), with or without peers.
      l.spec.argv = {agent_path, "agent", "--stdio", "--dev", "eth0"};
      l.spec.netns = netns(h);
      l.address = address(h);
      l.worker_path = worker_path;
      out.push_back(std::move(l));
    }
  } else {
    auto bound = bindScenario(*inv, hosts);
    if (!bound.ok()) return bound.status();
    for (const auto& b : *bound) {
      HostLaunch l;
      l.host = b.name;
      l.spec = launchSpecFor(*inv, b);
      // The data plane's address: given, or the target's host part (user@ dropped), as a
      // number: a name (an ssh_config alias, say) means nothing to the peers' firewall rules.
      auto address = dataPlaneAddress(b.name, b.address, b.target);
      if (!address.ok()) return address.status();
      l.address = *address;
      l.worker_path = workerBeside(inv->agent);
      out.push_back(std::move(l));
    }
  }
  const bool any_here =
      hosts.empty() || std::any_of(s.roles.begin(), s.roles.end(),
                                   [](const auto& r) { return r.second.host.empty(); });
  if (any_here) {
    HostLaunch l = base("", "local");
    l.spec.argv = {agent_path, "agent", "--stdio"};
    l.worker_path = worker_path;
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace mw::harness
