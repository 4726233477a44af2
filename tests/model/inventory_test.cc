// The inventory's pure rules (model/inventory.h): Slurm hostlists, port ranges, the problems of an
// inventory built in code, the exempt ports of each launcher and binding a scenario's hosts.
#include "model/inventory.h"

#include <catch2/catch.hpp>

namespace mw::harness {
namespace {

using Names = std::vector<std::string>;

Names expand(const std::string& text) {
  auto r = expandHostlist(text);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return r.value();
}

std::string expandError(const std::string& text) {
  auto r = expandHostlist(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("a Slurm hostlist expands in its order with its padding", "[model][inventory]") {
  CHECK(expand("gpu5") == Names{"gpu5"});
  CHECK(expand("node[01-03,07],gpu5") == Names{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(expand("n[8-10]") == Names{"n8", "n9", "n10"});
  CHECK(expand("n[08-10]") == Names{"n08", "n09", "n10"});
  CHECK(expand("r[1-2]n[1-2]") == Names{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand("a-b.c[3],x") == Names{"a-b.c3", "x"});
  CHECK(expand("[1-2]") == Names{"1", "2"});
}

TEST_CASE("a bad hostlist is refused with the text quoted and the fault named",
          "[model][inventory]") {
  CHECK(expandError("") == "hostlist \"\": empty: no host names");
  CHECK(expandError("a,,b") == "hostlist \"a,,b\": an empty name at position 3");
  CHECK(expandError("a,") == "hostlist \"a,\": an empty name at position 3");
  CHECK(expandError("node[1-3") == "hostlist \"node[1-3\": an unclosed '['");
  CHECK(expandError("node1-3]") == "hostlist \"node1-3]\": a ']' with no '[' before it");
  CHECK(expandError("node[1,[2]]") == "hostlist \"node[1,[2]]\": a '[' inside a bracket");
  CHECK(expandError("node[5-3]") == "hostlist \"node[5-3]\": the range 5-3 is reversed");
  CHECK(expandError("node[a-3]") ==
        "hostlist \"node[a-3]\": \"a-3\" in [a-3] is no number or range like 1-4");
  CHECK(expandError("node[]") == "hostlist \"node[]\": \"\" in [] is no number or range like 1-4");
  CHECK(expandError("node[1,]") ==
        "hostlist \"node[1,]\": \"\" in [1,] is no number or range like 1-4");
  CHECK(expandError("node 1") ==
        "hostlist \"node 1\": \"node 1\" is no host name (letters, "
        "digits, _ . -)");
  CHECK(expandError("n[0-999999]") == "hostlist \"n[0-999999]\": more than 65536 names");
  CHECK(expandError("a[0-999]b[0-999]") == "hostlist \"a[0-999]b[0-999]\": more than 65536 names");
}

TEST_CASE("ports and port ranges parse in 1..65535 and never reversed", "[model][inventory]") {
  std::string why;
  CHECK(parsePortRange("22", &why) == PortRange{22, 22});
  CHECK(parsePortRange("60001-63000", &why) == PortRange{60001, 63000});
  CHECK_FALSE(parsePortRange("63000-60001", &why));
  CHECK(why == "\"63000-60001\" is reversed (the first port must not be above the last)");
  CHECK_FALSE(parsePortRange("0", &why));
  CHECK(why == "\"0\" is out of range (ports are 1 to 65535)");
  CHECK_FALSE(parsePortRange("70000", &why));
  CHECK(why == "\"70000\" is out of range (ports are 1 to 65535)");
  CHECK_FALSE(parsePortRange("ssh", &why));
  CHECK(why == "\"ssh\" is no port: expected a port (22) or a range (\"60001-63000\")");
  CHECK_FALSE(parsePortRange("1-", &why));
  CHECK(portRangeText({22, 22}) == "22");
  CHECK(portRangeText({1, 9}) == "1-9");
}

TEST_CASE("launcher names round-trip", "[model][inventory]") {
  for (Launcher l : {Launcher::kLocal, Launcher::kNetns, Launcher::kSsh, Launcher::kSlurm}) {
    CHECK(parseLauncher(launcherName(l)) == l);
  }
  CHECK_FALSE(parseLauncher("kubectl"));
}

Inventory sshInventory() {
  Inventory inv;
  inv.launcher = Launcher::kSsh;
  inv.source = "cluster.lua";
  inv.hosts = {{"h1", "node7", "", ""}, {"h2", "me@10.0.0.8", "10.0.0.8", "eth1"}};
  return inv;
}

TEST_CASE("a sound inventory has no problems", "[model][inventory]") {
  CHECK(inventoryProblems(sshInventory()).empty());
  CHECK(inventoryProblems(Inventory{}).empty());  // netns, no hosts
}

TEST_CASE("each problem of an inventory names its field", "[model][inventory]") {
  Inventory inv = sshInventory();
  inv.lease_ms = 5;
  inv.agent = "mwchaos; rm -rf /";
  inv.exempt_ports = {{22, 22}, {63000, 60001}};
  inv.ssh.port = 0;
  inv.ssh.user = "-oProxyCommand";
  inv.ssh.options = {"ProxyCommand"};
  inv.hosts.push_back({"h3", "-oProxyCommand=x", "", ""});
  inv.hosts.push_back({"h4", "node7", "", "an interface name too long"});
  inv.hosts.push_back({"h1", "node9", "", ""});
  const auto p = inventoryProblems(inv);
  const std::vector<std::string> want = {
      "lease_ms: 5 is out of range (100 to 60000)",
      "agent: \"mwchaos; rm -rf /\" is no program path (letters, digits and _ . / + @ % : = , ~ - "
      "only, not starting with '-')",
      "exempt_ports[2]: 63000-60001 is reversed (the first port must not be above the last)",
      "ssh.port: 0 is out of range (ports are 1 to 65535)",
      "ssh.user: \"-oProxyCommand\" is no user name (letters, digits, _ . -; not starting with "
      "'-')",
      "ssh.options: \"ProxyCommand\" is no Key=Value (an ssh_config keyword)",
      "hosts.h2.target: \"me@10.0.0.8\" names a user and ssh.user is set too: give one of them",
      "hosts.h3.target: \"-oProxyCommand=x\" starts with '-' (ssh and srun would read it as an "
      "option)",
      "hosts.h4.target: \"node7\" is h1's too: each logical host needs a real host of its own (no "
      "partition could separate two on one)",
      "hosts.h4.dev: \"an interface name too long\" is no interface name (1 to 15 letters, digits, "
      "_ . -)",
      "hosts.h1: listed twice"};
  CHECK(p == want);
}

TEST_CASE("hosts belong to ssh and slurm only and ssh needs one", "[model][inventory]") {
  Inventory inv;
  inv.hosts = {{"h1", "node1", "", ""}};
  CHECK(inventoryProblems(inv) ==
        Names{"hosts: launcher netns makes one network namespace per scenario host itself: hosts "
              "are for launchers ssh and slurm"});
  inv.launcher = Launcher::kSsh;
  inv.hosts.clear();
  CHECK(inventoryProblems(inv) ==
        Names{"hosts: launcher ssh needs at least one host: hosts = { h1 = \"node7\" }"});
  inv.launcher = Launcher::kSlurm;
  CHECK(inventoryProblems(inv).empty());  // the allocation's nodes, in order
  inv.hosts = {{"h1", "user@node1", "", ""}};
  CHECK(inventoryProblems(inv) ==
        Names{"hosts.h1.target: \"user@node1\" is no host name or address (letters, digits and _ "
              ". : % [ ] - only; no user@ here)"});
}

TEST_CASE("the control plane's ports are exempt for each launcher", "[model][inventory]") {
  Inventory inv = sshInventory();
  inv.ssh.port = 2222;
  inv.exempt_ports = {{9000, 9010}, {9005, 9020}, {80, 80}};
  CHECK(exemptPorts(inv) == std::vector<PortRange>{{80, 80}, {2222, 2222}, {9000, 9020}});
  inv.launcher = Launcher::kSlurm;
  inv.exempt_ports.clear();
  CHECK(exemptPorts(inv) == std::vector<PortRange>{{6817, 6818}});
  inv.slurm.srun_ports = PortRange{60001, 63000};
  CHECK(exemptPorts(inv) == std::vector<PortRange>{{6817, 6818}, {60001, 63000}});
  inv.launcher = Launcher::kNetns;
  CHECK(exemptPorts(inv).empty());
}

TEST_CASE("binding names the host that the inventory lacks", "[model][inventory]") {
  Inventory inv = sshInventory();
  auto ok = bindScenario(inv, {"h2", "h1"});
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 2);
  CHECK(ok->at(0).target == "me@10.0.0.8");
  CHECK(ok->at(0).dev == "eth1");
  CHECK(ok->at(1).name == "h1");
  auto missing = bindScenario(inv, {"h1", "h3"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() ==
        "the scenario's host h3 is not in cluster.lua (it binds h1, h2)");
  auto two = bindScenario(inv, {"h0", "h1", "h3"});
  CHECK(two.status().message() ==
        "the scenario's hosts h0, h3 are not in cluster.lua (it binds h1, h2)");
  auto none = bindScenario(inv, {});
  CHECK(none.status().message() ==
        "the scenario places no role on a host, and cluster.lua has launcher ssh, which binds "
        "logical hosts (a role's host = \"h1\") to real ones");
  inv.launcher = Launcher::kNetns;
  inv.hosts.clear();
  auto netns = bindScenario(inv, {"h1", "h9"});
  REQUIRE(netns.ok());
  CHECK(netns->at(1).name == "h9");
  CHECK(netns->at(1).target.empty());
}

TEST_CASE("slurm binds the scenario's hosts to the allocation's nodes in order",
          "[model][inventory]") {
  Inventory inv;
  inv.launcher = Launcher::kSlurm;
  inv.source = "slurm.lua";
  auto outside = bindScenario(inv, {"h1"});
  CHECK(outside.status().message() ==
        "launcher slurm of slurm.lua runs inside a Slurm allocation, and $SLURM_JOB_ID is not "
        "set (for example: salloc -N2, then mwchaos run --hosts slurm.lua ...)");
  inv.slurm.allocation = {"4242", {"gpu01", "gpu02", "gpu03"}};
  auto bound = bindScenario(inv, {"h10", "h2", "h1"});
  REQUIRE(bound.ok());
  CHECK(bound->at(0).target == "gpu03");  // h1, h2, h10 in natural order
  CHECK(bound->at(1).target == "gpu02");
  CHECK(bound->at(2).target == "gpu01");
  auto many = bindScenario(inv, {"h0", "h1", "h2", "h3"});
  CHECK(many.status().message() ==
        "the scenario uses 4 hosts (h0, h1, h2, h3) and allocation 4242 has 3 nodes (gpu01, gpu02, "
        "gpu03): slurm.lua lists no hosts, so each host takes a node of its own");
  inv.hosts = {{"h1", "gpu02", "", ""}, {"h2", "gpu09", "", ""}};
  auto listed = bindScenario(inv, {"h1"});
  REQUIRE(listed.ok());
  CHECK(listed->at(0).target == "gpu02");
  auto foreign = bindScenario(inv, {"h1", "h2"});
  CHECK(foreign.status().message() ==
        "host h2 of slurm.lua is on node gpu09, which is not in allocation 4242 (gpu01, gpu02, "
        "gpu03)");
}

}  // namespace
}  // namespace mw::harness
