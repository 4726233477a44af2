// Inventory files (harness/inventory_loader.h): good files of each launcher, and each bad input
// refused with the file, the line, the field and what is wrong, never a crash.
#include "harness/inventory_loader.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

namespace mw::harness {
namespace {

// `text` written to a file of its own; removed with the object.
struct TempFile {
  explicit TempFile(const std::string& text) {
    static int n = 0;
    path =
        "/tmp/mw_inventory_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".lua";
    std::ofstream(path) << text;
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::string path;
};

LuaLimits testLimits() {
  LuaLimits l;
  l.time_budget = std::chrono::milliseconds(2000);
  l.memory_bytes = 32 << 20;
  return l;
}

Inventory load(const std::string& text, const InventoryEnv& env = {}) {
  TempFile f(text);
  InventoryLoad r = loadInventory(f.path, testLimits(), env);
  INFO((r.errors.empty() ? std::string() : r.errors.front()));
  REQUIRE(r.inventory);
  CHECK(r.errors.empty());
  CHECK(r.inventory->source == f.path);
  return *r.inventory;
}

// The errors of `text`, with the file's path written as "F".
std::vector<std::string> inventoryErrors(const std::string& text, const InventoryEnv& env = {}) {
  TempFile f(text);
  InventoryLoad r = loadInventory(f.path, testLimits(), env);
  CHECK_FALSE(r.inventory);
  for (auto& e : r.errors) {
    for (size_t p; (p = e.find(f.path)) != std::string::npos;) e.replace(p, f.path.size(), "F");
  }
  return r.errors;
}

using Errors = std::vector<std::string>;

TEST_CASE("an ssh inventory gives every field", "[harness][inventory]") {
  Inventory inv = load(R"(return {
    launcher = "ssh",
    hosts = { h1 = "node7", h2 = { target = "node8", address = "10.0.0.8", dev = "eth1",
                                   wrap = { "unshare", "--time", "--monotonic", "2" } } },
    ssh = { user = "me", port = 2222, identity = "~/.ssh/id_ed25519",
            options = { StrictHostKeyChecking = "no", ConnectTimeout = 5 } },
    agent = "/opt/multiworld/bin/mwchaos",
    exempt_ports = { 80, "60001-63000" },
    lease_ms = 3000,
  })");
  CHECK(inv.launcher == Launcher::kSsh);
  REQUIRE(inv.hosts.size() == 2);
  CHECK(inv.hosts[0].name == "h1");
  CHECK(inv.hosts[0].target == "node7");
  CHECK(inv.hosts[0].address.empty());
  CHECK(inv.hosts[1].target == "node8");
  CHECK(inv.hosts[1].address == "10.0.0.8");
  CHECK(inv.hosts[1].dev == "eth1");
  CHECK(inv.hosts[0].wrap.empty());
  CHECK(inv.hosts[1].wrap == std::vector<std::string>{"unshare", "--time", "--monotonic", "2"});
  CHECK(inv.ssh.user == "me");
  CHECK(inv.ssh.port == 2222);
  CHECK(inv.ssh.identity == "~/.ssh/id_ed25519");
  CHECK(inv.ssh.options ==
        std::vector<std::string>{"ConnectTimeout=5", "StrictHostKeyChecking=no"});
  CHECK(inv.agent == "/opt/multiworld/bin/mwchaos");
  CHECK(inv.exempt_ports == std::vector<PortRange>{{80, 80}, {60001, 63000}});
  CHECK(inv.lease_ms == 3000);
  CHECK(exemptPorts(inv) == std::vector<PortRange>{{80, 80}, {2222, 2222}, {60001, 63000}});
}

TEST_CASE("defaults fill what an inventory leaves out", "[harness][inventory]") {
  Inventory inv = load("return { launcher = 'netns' }");
  CHECK(inv.launcher == Launcher::kNetns);
  CHECK(inv.hosts.empty());
  CHECK(inv.agent == "mwchaos");
  CHECK(inv.lease_ms == kDefaultLeaseMs);
  CHECK(kDefaultLeaseMs == 30000);
  CHECK(inv.ssh.port == 22);
  CHECK(inv.exempt_ports.empty());
  CHECK(load("return { launcher = 'local' }").launcher == Launcher::kLocal);
}

TEST_CASE("a slurm inventory takes its allocation from the environment", "[harness][inventory]") {
  InventoryEnv env{"4242", "gpu[01-02]"};
  Inventory inv = load(R"(return { launcher = "slurm",
    slurm = { srun_port_range = "60001-63000", slurmd_port = 7818 } })",
                       env);
  CHECK(inv.slurm.allocation.job_id == "4242");
  CHECK(inv.slurm.allocation.nodes == std::vector<std::string>{"gpu01", "gpu02"});
  CHECK(inv.slurm.slurmctld_port == 6817);
  CHECK(inv.slurm.slurmd_port == 7818);
  REQUIRE(inv.slurm.srun_ports);
  CHECK(*inv.slurm.srun_ports == PortRange{60001, 63000});
  auto bound = bindScenario(inv, {"h1", "h0"});
  REQUIRE(bound.ok());
  CHECK(bound->at(0).target == "gpu02");
  CHECK(inventoryErrors("return { launcher = 'slurm' }", InventoryEnv{"1", "gpu[02-01]"}) ==
        Errors{"F: $SLURM_JOB_NODELIST: hostlist \"gpu[02-01]\": the range 02-01 is reversed"});
}

TEST_CASE("a bad field is named with its line and what is wrong", "[harness][inventory]") {
  CHECK(inventoryErrors(
            "return {\n  launcher = 'ssh',\n  hosts = { h1 = 'n1' },\n  lease_ms = 5,\n}") ==
        Errors{"F:4: lease_ms: 5 is out of range (100 to 60000)"});
  CHECK(inventoryErrors("return { launcher = 'sssh' }") ==
        Errors{"F:1: launcher: unknown launcher \"sssh\"; did you mean 'ssh'? (expected one of: "
               "local, netns, ssh, slurm)"});
  CHECK(inventoryErrors("return { launcher = 'kubectl' }") ==
        Errors{"F:1: launcher: unknown launcher \"kubectl\" (expected one of: local, netns, "
               "ssh, slurm)"});
  CHECK(inventoryErrors("return {}") ==
        Errors{"F:1: launcher: every inventory names its launcher: \"local\", \"netns\", \"ssh\" "
               "or \"slurm\""});
  CHECK(inventoryErrors("return { launcher = 3 }") ==
        Errors{"F:1: launcher: expected a string, got 3"});
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = { h1 = 'n1' },\n lease = 5 }") ==
        Errors{"F:4: lease: unknown field; did you mean 'lease_ms'? (expected one of: launcher, "
               "hosts, ssh, slurm, agent, exempt_ports, lease_ms)"});
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = { h1 = 'n1' },\n ssh = {\n"
                        "  usr = 'me' } }") ==
        Errors{"F:5: ssh.usr: unknown field; did you mean 'user'? (expected one of: user, port, "
               "identity, options)"});
  CHECK(inventoryErrors("return { launcher = 'ssh', hosts = {} }") ==
        Errors{"F:1: hosts: launcher ssh needs at least one host: hosts = { h1 = \"node7\" }"});
  CHECK(inventoryErrors("return { launcher = 'ssh' }") ==
        Errors{"F:1: hosts: launcher ssh needs at least one host: hosts = { h1 = \"node7\" }"});
}

TEST_CASE("ports out of range and reversed ranges are refused", "[harness][inventory]") {
  const std::string head = "return {\n launcher = 'ssh',\n hosts = { h1 = 'n1' },\n";
  CHECK(inventoryErrors(head + " ssh = {\n  port = 70000 } }") ==
        Errors{"F:5: ssh.port: 70000 is out of range (1 to 65535)"});
  CHECK(inventoryErrors(head + " ssh = { port = 22.5 } }") ==
        Errors{"F:4: ssh.port: expected a whole number, got 22.5"});
  CHECK(inventoryErrors(head + " exempt_ports = { 22, '63000-60001', 0, true } }") ==
        Errors{"F:4: exempt_ports[2]: \"63000-60001\" is reversed (the first port must not be "
               "above the last)",
               "F:4: exempt_ports[3]: 0 is out of range (1 to 65535)",
               "F:4: exempt_ports[4]: expected a port (22) or a range (\"60001-63000\"), got "
               "true"});
  CHECK(inventoryErrors(head + " exempt_ports = 22 }") ==
        Errors{"F:4: exempt_ports: expected a list of ports and ranges like { 22, "
               "\"60001-63000\" }, got 22"});
}

TEST_CASE("hosts of the wrong shape are refused at their line", "[harness][inventory]") {
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = {\n  h1 = 'node7',\n"
                        "  h2 = { target = 'node7' } } }") ==
        Errors{"F:5: hosts.h2.target: \"node7\" is h1's too: each logical host needs a real host "
               "of its own (no partition could separate two on one)"});
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = {\n  h1 = { target = 'a' },\n"
                        "  h2 = { adress = 'x', target = 'b' } } }") ==
        Errors{"F:5: hosts.h2.adress: unknown field; did you mean 'address'? (expected one of: "
               "target, address, dev, wrap)"});
  CHECK(inventoryErrors(
            "return {\n launcher = 'ssh',\n hosts = {\n  h1 = { target = 'a', wrap = 'nice' },\n"
            "  h2 = { target = 'b', wrap = { 'nice', 5 } } } }") ==
        Errors{"F:4: hosts.h1.wrap: expected a list of words like { \"unshare\", \"--time\" }, got "
               "\"nice\"",
               "F:5: hosts.h2.wrap[2]: expected a string, got 5"});
  CHECK(inventoryErrors("return { launcher = 'ssh', hosts = { 'node1', 'node2' } }") ==
        Errors{"F:1: hosts: expected named hosts like { h1 = \"node7\", h2 = { target = "
               "\"node8\" } }, not a list"});
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = {\n  h1 = 7 } }") ==
        Errors{"F:4: hosts.h1: expected a target like \"node7\" or a table { target = "
               "\"node7\", address = \"10.0.0.7\", dev = \"eth1\" }, got 7"});
  CHECK(
      inventoryErrors("return {\n launcher = 'ssh',\n hosts = {\n  h1 = '-oProxyCommand=x' } }") ==
      Errors{"F:4: hosts.h1.target: \"-oProxyCommand=x\" starts with '-' (ssh and srun would "
             "read it as an option)"});
  CHECK(inventoryErrors(
            "return {\n launcher = 'ssh',\n hosts = {\n  h1 = { address = '10.0.0.1' } } }") ==
        Errors{"F:4: hosts.h1.target: every host needs a target (what ssh connects to: \"node7\" "
               "or \"user@10.0.0.5\")"});
  CHECK(inventoryErrors("return {\n launcher = 'netns',\n hosts = { h1 = 'n1' } }") ==
        Errors{"F:3: hosts: launcher netns makes one network namespace per scenario host itself: "
               "hosts are for launchers ssh and slurm"});
}

TEST_CASE("an IPv6 data-plane address is refused, an IPv6 ssh target is not",
          "[harness][inventory]") {
  // Network faults are IPv4 firewall rules: a partition between IPv6 addresses would cut nothing.
  CHECK(
      inventoryErrors("return {\n launcher = 'ssh',\n hosts = {\n  h1 = { target = 'n1', address = "
                      "'fd00::1' },\n  h2 = 'root@[fd00::2]' } }") ==
      Errors{"F:4: hosts.h1.address: \"fd00::1\" is an IPv6 address: network faults are IPv4 "
             "firewall rules, and a partition between IPv6 addresses would cut nothing; give "
             "hosts.h1.address the host's IPv4 address on the data plane",
             "F:5: hosts.h2.target: \"fd00::2\" is an IPv6 address: network faults are IPv4 "
             "firewall rules, and a partition between IPv6 addresses would cut nothing; give "
             "hosts.h2.address the host's IPv4 address on the data plane"});
  const Inventory inv = load(
      "return { launcher = 'ssh', hosts = { h1 = { target = 'root@[fd00::1]', address = "
      "'10.0.0.1' } } }");
  CHECK(inv.hosts.at(0).address == "10.0.0.1");
}

TEST_CASE("a launcher's section given to another launcher is refused", "[harness][inventory]") {
  CHECK(inventoryErrors("return {\n launcher = 'slurm',\n ssh = { user = 'me' } }") ==
        Errors{"F:3: ssh: this section is for launcher ssh, and the launcher is slurm"});
  CHECK(inventoryErrors("return { launcher = 'ssh', hosts = { h1 = 'a' }, slurm = 5 }") ==
        Errors{"F:1: slurm: expected a table { ... }, got 5"});
  CHECK(inventoryErrors("return { launcher = 'slurm', slurm = { srun_port_range = '9-1' } }") ==
        Errors{"F:1: slurm.srun_port_range: \"9-1\" is reversed (the first port must not be "
               "above the last)"});
}

TEST_CASE("a file that is no inventory is refused and never crashes", "[harness][inventory]") {
  CHECK(inventoryErrors("return 5") ==
        Errors{"F:1: an inventory file returns its table: return { launcher = \"ssh\", hosts = { "
               "h1 = \"node7\" } } (it returned number)"});
  CHECK(inventoryErrors("launcher = 'ssh'") ==
        Errors{"F:1: an inventory file returns its table: return { launcher = \"ssh\", hosts = { "
               "h1 = \"node7\" } } (it returned nil)"});
  CHECK(inventoryErrors("return {\n launcher = 'ssh',\n hosts = {") ==
        Errors{"F:3: unexpected symbol near <eof>"});
  CHECK(inventoryErrors("error('no')") == Errors{"F:1: no"});
  CHECK(inventoryErrors("return { launcher = os.getenv('X') }") ==
        Errors{"F:1: attempt to index a nil value (global 'os')"});
  CHECK(inventoryErrors("while true do end") ==
        Errors{"F:1: scenario code exceeded its time budget of 2000 ms (mwchaos "
               "--lua-time-budget-ms N changes it)"});
  const auto cycle = inventoryErrors("local t = { launcher = 'ssh' }; t.self = t; return t");
  REQUIRE(cycle.size() == 1);
  CHECK(cycle[0].find("a table contains itself") != std::string::npos);
  TempFile none("");
  const std::string gone = none.path + ".missing";
  auto r = loadInventory(gone, testLimits(), {});
  CHECK_FALSE(r.inventory);
  CHECK(r.errors == Errors{gone + ": cannot open the inventory: No such file or directory"});
}

}  // namespace
}  // namespace mw::harness
