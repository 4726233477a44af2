// The agents a run starts (harness/launchers.h): the command of each launcher, word for word,
// each host's wrap before the agent, and the plan of one agent per scenario host.
#include "harness/launchers.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace mw::harness {
namespace {

using Words = std::vector<std::string>;

Inventory sshInventory() {
  Inventory inv;
  inv.launcher = Launcher::kSsh;
  inv.ssh.port = 2222;
  inv.ssh.user = "root";
  inv.ssh.identity = "/k/id";
  inv.ssh.options = {"ConnectTimeout=5"};
  inv.agent = "/opt/mw/bin/mwchaos";
  inv.hosts = {{"h1", "node7", "", "", {}}, {"h2", "node8", "10.0.0.8", "eth1", {}}};
  inv.hosts[1].wrap = {"unshare", "--time", "--monotonic", "2"};
  return inv;
}

TEST_CASE("the ssh command starts the agent under the host's wrap", "[harness][launchers]") {
  const Inventory inv = sshInventory();
  CHECK(sshArgv(inv, inv.hosts[0]) == Words{"ssh", "-T", "-o", "BatchMode=yes", "-p", "2222", "-i",
                                            "/k/id", "-l", "root", "-o", "ConnectTimeout=5",
                                            "node7", "/opt/mw/bin/mwchaos", "agent", "--stdio"});
  CHECK(sshArgv(inv, inv.hosts[1]) ==
        Words{"ssh",   "-T",      "-o",     "BatchMode=yes", "-p", "2222",
              "-i",    "/k/id",   "-l",     "root",          "-o", "ConnectTimeout=5",
              "node8", "unshare", "--time", "--monotonic",   "2",  "/opt/mw/bin/mwchaos",
              "agent", "--stdio", "--dev",  "eth1"});
}

TEST_CASE("the srun step starts the agent under the host's wrap", "[harness][launchers]") {
  Inventory inv;
  inv.launcher = Launcher::kSlurm;
  inv.slurm.allocation.job_id = "42";
  inv.hosts = {{"h1", "gpu5", "", "", {}}};
  inv.hosts[0].wrap = {"taskset", "-c", "0"};
  CHECK(srunArgv(inv, inv.hosts[0]) == Words{"srun", "--overlap", "-N1", "-n1", "-u", "-w", "gpu5",
                                             "--jobid=42", "taskset", "-c", "0", "mwchaos", "agent",
                                             "--stdio"});
}

TEST_CASE("scancel_step runs only with the slurm launcher, and says where it is written",
          "[harness][launchers]") {
  Scenario s;
  s.roles["b"].host = "h1";
  ActionSpec a;
  a.fault = ScancelStep{"b"};
  a.where = "cancel.lua:7";
  s.timeline.push_back(a);
  const auto none = launcherFits(s, nullptr);
  CHECK(none.code() == Code::kInvalidArgument);
  CHECK(none.message() ==
        "cancel.lua:7: scancel_step needs the slurm launcher (a Slurm step per host): run it with "
        "--hosts and an inventory of launcher = \"slurm\" (docs/hosts.md)");
  const Inventory ssh = sshInventory();
  CHECK(launcherFits(s, &ssh).message() ==
        "cancel.lua:7: scancel_step needs the slurm launcher (a Slurm step per host): the "
        "inventory's launcher is \"ssh\"");
  // planLaunches refuses the same way, before any agent is planned.
  auto plan = planLaunches(s, &ssh, "mwchaos", "mw_worker", nullptr, nullptr);
  CHECK(plan.status().message() == launcherFits(s, &ssh).message());
  Inventory slurm;
  slurm.launcher = Launcher::kSlurm;
  CHECK(launcherFits(s, &slurm).ok());
  s.timeline[0].fault = Kill{"b"};  // any other fault runs anywhere
  CHECK(launcherFits(s, nullptr).ok());
}

TEST_CASE("a wrap word a remote shell would read as more is refused, naming it",
          "[harness][launchers]") {
  Inventory inv = sshInventory();
  inv.hosts[0].wrap = {"--time"};
  inv.hosts[1].wrap = {"unshare", "a;b", ""};
  CHECK(inventoryProblems(inv) ==
        std::vector<std::string>{
            "hosts.h1.wrap[1]: \"--time\" is no plain word (letters, digits and _ . / + @ % : = , "
            "~ - only; the first a program, not an option)",
            "hosts.h2.wrap[2]: \"a;b\" is no plain word (letters, digits and _ . / + @ % : = , ~ "
            "- only; the first a program, not an option)",
            "hosts.h2.wrap[3]: \"\" is no plain word (letters, digits and _ . / + @ % : = , ~ - "
            "only; the first a program, not an option)"});
}

TEST_CASE("a plan has one agent per scenario host, over ssh with the inventory's fields",
          "[harness][launchers]") {
  Inventory inv = sshInventory();
  inv.lease_ms = 3000;
  inv.hosts[0].target = "me@localhost";  // a name: resolved, as a number, for the peers
  Scenario s;
  s.roles["a"].host = "h1";
  s.roles["b"].host = "h2";
  s.roles["leader"].host = "";  // on this machine: a local agent too
  auto none = [](const std::string&) { return std::string(); };
  auto plan = planLaunches(s, &inv, "/here/mwchaos", "/here/mw_worker", none, none);
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 3);
  const HostLaunch& h2 = plan->at(1);
  CHECK(h2.host == "h2");
  CHECK(h2.spec.launcher == "ssh");
  CHECK(h2.spec.lease_ms == 3000);
  CHECK(h2.address == "10.0.0.8");
  CHECK(h2.worker_path == "/opt/mw/bin/mw_worker");
  CHECK(h2.spec.argv == sshArgv(inv, inv.hosts[1]));
  CHECK(plan->at(0).address == "127.0.0.1");  // no address given: the target's host, resolved
  const HostLaunch& local = plan->at(2);
  CHECK(local.spec.launcher == "local");
  CHECK(local.spec.argv == Words{"/here/mwchaos", "agent", "--stdio"});
  CHECK(local.worker_path == "/here/mw_worker");
}

TEST_CASE("a data-plane address is one IPv4 number, and what cannot be one is refused by name",
          "[harness][launchers]") {
  auto resolved = [](const std::string& address, const std::string& target) {
    auto r = dataPlaneAddress("h1", address, target);
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(resolved("10.1.2.3", "node7") == "10.1.2.3");
  CHECK(resolved("", "me@127.0.0.1") == "127.0.0.1");
  CHECK(resolved("", "localhost") == "127.0.0.1");
  // An IPv6 target is fine when the data plane's address is IPv4.
  CHECK(resolved("10.1.2.3", "[fe80::1]") == "10.1.2.3");
  const auto v6 = dataPlaneAddress("h2", "fd00::8", "node8");
  REQUIRE(!v6.ok());
  CHECK(v6.status().code() == Code::kInvalidArgument);
  CHECK(v6.status().message().rfind("hosts.h2.address: \"fd00::8\" is an IPv6 address", 0) == 0);
  const auto v6_target = dataPlaneAddress("h3", "", "root@[fd00::9]");
  REQUIRE(!v6_target.ok());
  CHECK(v6_target.status().message().rfind("hosts.h3.target: \"fd00::9\" is an IPv6", 0) == 0);
  // An ssh_config alias the peers cannot know: refused, naming the field to give.
  const auto alias = dataPlaneAddress("h4", "", "gpu-box.invalid");
  REQUIRE(!alias.ok());
  CHECK(alias.status().message().find("hosts.h4.target: \"gpu-box.invalid\" resolves to no IPv4 "
                                      "address") == 0);
  CHECK(alias.status().message().find("give hosts.h4.address") != std::string::npos);
}

}  // namespace
}  // namespace mw::harness
