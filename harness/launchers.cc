#include "harness/launchers.h"

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
      l.spec.argv = {agent_path, "agent", "--stdio"};
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
      // The data plane's address: given, or the target's host part (user@ dropped).
      l.address = !b.address.empty() ? b.address : b.target.substr(b.target.find('@') + 1);
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
