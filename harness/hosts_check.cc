#include "harness/hosts_check.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "agent/client.h"
#include "harness/launchers.h"

namespace mw::harness {

namespace {

using namespace std::chrono_literals;

// The hosts to check: the inventory's, or the allocation's nodes for slurm without a list.
std::vector<InventoryHost> hostsOf(const Inventory& inv) {
  std::vector<InventoryHost> out = inv.hosts;
  if (out.empty() && inv.launcher == Launcher::kSlurm) {
    for (const auto& node : inv.slurm.allocation.nodes) out.push_back({node, node, "", ""});
  }
  return out;
}

std::string yes(const std::map<std::string, std::string>& facts, const std::string& key) {
  auto it = facts.find(key);
  return it == facts.end() ? "unknown" : it->second;
}

}  // namespace

namespace {

// The agent of every host `inv` names (local and netns: this machine's).
std::vector<agent::LaunchSpec> agentSpecs(const Inventory& inv, const std::string& agent_path) {
  std::vector<agent::LaunchSpec> specs;
  if (simulatedHosts(&inv)) {
    agent::LaunchSpec s;
    s.host = "local";
    s.launcher = launcherName(inv.launcher);
    s.argv = {agent_path, "agent", "--stdio"};
    s.lease_ms = inv.lease_ms;
    s.exempt = exemptPorts(inv);
    specs.push_back(s);
  } else {
    for (const auto& h : hostsOf(inv)) specs.push_back(launchSpecFor(inv, h));
  }
  return specs;
}

}  // namespace

int cleanHosts(const Inventory& inv, const std::string& agent_path, FILE* out) {
  const std::vector<agent::LaunchSpec> specs = agentSpecs(inv, agent_path);
  auto started = agent::Connection::startAll(specs, 30s);
  int rc = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& c = started[i];
    std::fprintf(out, "%s (%s): ", specs[i].host.c_str(), specs[i].launcher.c_str());
    if (!c.ok()) {
      std::fprintf(out, "unreachable: %s\n", c.status().message().c_str());
      rc = 1;
      continue;
    }
    const std::string swept = yes((*c)->hello().facts, "swept");
    if (swept == "unknown") {
      std::fprintf(out, "clean (nothing left by dead agents)\n");
    } else {
      std::fprintf(out, "%s\n", swept.c_str());
      if (swept.find("could not remove") != std::string::npos) rc = 1;
    }
    Status bye = (*c)->bye();
    if (!bye.ok()) std::fprintf(out, "  leaving: %s\n", bye.message().c_str());
  }
  return rc;
}

int checkHosts(const Inventory& inv, const std::string& agent_path, FILE* out) {
  const std::vector<agent::LaunchSpec> specs = agentSpecs(inv, agent_path);
  // All at once: a cluster's check waits for its slowest host, not for the sum of them.
  auto started = agent::Connection::startAll(specs, 30s);
  int rc = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const agent::LaunchSpec& spec = specs[i];
    auto& c = started[i];
    std::fprintf(out, "%s (%s):\n", spec.host.c_str(), spec.launcher.c_str());
    if (!c.ok()) {
      std::fprintf(out, "  unreachable: %s\n", c.status().message().c_str());
      rc = 1;
      continue;
    }
    const agent::HelloReply& h = (*c)->hello();
    const agent::ClockOffset& clock = (*c)->clock();
    std::fprintf(out, "  reachable: node %s, agent pid %lld, protocol %d, build %s\n",
                 h.host.c_str(), static_cast<long long>(h.pid), h.version, h.build.c_str());
    const bool root = yes(h.facts, "root") == "yes";
    std::string tools;
    for (const char* t : {"iptables", "iptables-restore", "tc", "nsenter"}) {
      const std::string where = yes(h.facts, t);
      tools += std::string(tools.empty() ? "" : ", ") + t + " " +
               (where == "missing" || where == "unknown" ? "MISSING" : where);
    }
    std::fprintf(out, "  root: %s; %s%s\n", root ? "yes" : "no", tools.c_str(),
                 root ? "" : " (network faults need root)");
    std::fprintf(out, "  gpus: %s\n", yes(h.facts, "gpus").c_str());
    if (const std::string swept = yes(h.facts, "swept"); swept != "unknown") {
      std::fprintf(out, "  dead agents: %s\n", swept.c_str());
    }
    std::fprintf(out, "  clock: offset %.3f ms, uncertainty %.3f ms, round trip %.3f ms%s\n",
                 static_cast<double>(clock.offset_ns) / 1e6,
                 static_cast<double>(clock.uncertainty_ns) / 1e6,
                 static_cast<double>(clock.rtt_ns) / 1e6,
                 (*c)->sameClock() ? " (this machine's clock)" : "");
    // One fault's time: a signal that ends nothing, to a role that sleeps.
    agent::Spawn sleeper;
    sleeper.role = "hosts-check";
    sleeper.argv = {"/bin/sleep", "60"};
    auto role = (*c)->spawn(sleeper);
    if (!role.ok()) {
      std::fprintf(out, "  fault: cannot start a role there: %s\n",
                   role.status().message().c_str());
      rc = 1;
    } else {
      std::vector<double> ms;
      for (int i = 0; i < 20; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = (*c)->call(agent::Signal{sleeper.role, SIGCONT});
        if (!r.ok()) break;
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      if (ms.size() == 20) {
        std::fprintf(out, "  one fault: median %.3f ms, max %.3f ms (20 signals, acknowledged)\n",
                     ms[10], ms.back());
      } else {
        std::fprintf(out, "  one fault: failed after %zu signals\n", ms.size());
        rc = 1;
      }
      role->reset();
    }
    Status bye = (*c)->bye();
    if (!bye.ok()) std::fprintf(out, "  leaving: %s\n", bye.message().c_str());
  }
  return rc;
}

}  // namespace mw::harness
