// The host agent's network faults, for real: `mwchaos agent --stdio` in a simulated host (a
// network namespace of chaos::SimNet), driven by hand-written frames, its rules and qdiscs read
// back with iptables and tc.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "agent/server.h"
#include "chaos/netsim.h"
#include "chaos/process.h"
#include "model/agent_protocol.h"
#include "tests/agent/raw_agent.h"

using namespace mw;
using namespace std::chrono_literals;
using namespace mw::agent_test;

TEST_CASE("an agent refuses to shape when no device is named and none routes to the peers",
          "[agent][net]") {
  requireSimNet();
  auto net = chaos::SimNet::create({"r1", "r2"});
  REQUIRE(net.ok());
  RawAgent a((*net)->netns("r1"));
  a.hello(5000);
  a.next<agent::HelloReply>();
  agent::Net bw;
  bw.op = "bandwidth";
  bw.rate = "10mbit";
  bw.peers = {"203.0.113.9"};  // TEST-NET-3: no route from a simulated host
  a.send(bw, 2);
  const auto r = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(r.code == Code::kInvalidArgument);
  CHECK(r.why.find("no interface to shape") != std::string::npos);
  CHECK(r.why.find("hosts.NAME.dev") != std::string::npos);
  CHECK(outputOf({chaos::whichProgram("tc"), "qdisc", "show", "dev", "eth0"}, (*net)->netns("r1"))
            .find("tbf") == std::string::npos);
  a.p->closeStdin();
  a.waitExit(5s);
}

TEST_CASE("an agent's network rules go when its lease ends", "[agent][net]") {
  requireSimNet();
  auto net = chaos::SimNet::create({"a1", "a2"});
  REQUIRE(net.ok());
  const std::string ns = (*net)->netns("a1");
  const std::string before = outputOf({chaos::whichProgram("iptables"), "-S"}, ns);
  RawAgent a(ns);
  a.hello(400, agent::buildId(), {{2222, 2222}});
  a.next<agent::HelloReply>();
  agent::Net cut;
  cut.op = "cut";
  cut.peers = {(*net)->address("a2")};
  a.send(cut, 2);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == Code::kOk);
  agent::Net bw;
  bw.op = "bandwidth";
  bw.rate = "10mbit";
  bw.peers = cut.peers;  // no device named: the one the route to the peers takes (eth0)
  a.send(bw, 3);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == Code::kOk);
  const std::string during = outputOf({chaos::whichProgram("iptables"), "-S"}, ns);
  CHECK(during.find("-d " + (*net)->address("a2") + "/32 -j DROP") != std::string::npos);
  // The exempt port is accepted ahead of the fault rule.
  CHECK(during.find("--dport 2222 -j RETURN") < during.find("-j DROP"));
  CHECK(outputOf({chaos::whichProgram("tc"), "qdisc", "show", "dev", "eth0"}, ns).find("tbf") !=
        std::string::npos);
  a.waitExit(5s);
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  CHECK(outputOf({chaos::whichProgram("iptables"), "-S"}, ns) == before);
  CHECK(outputOf({chaos::whichProgram("tc"), "qdisc", "show", "dev", "eth0"}, ns).find("tbf") ==
        std::string::npos);
}

TEST_CASE("an agent refuses to replace a root qdisc someone configured, and leaves it",
          "[agent][net]") {
  requireSimNet();
  auto net = chaos::SimNet::create({"q1", "q2"});
  REQUIRE(net.ok());
  const std::string ns = (*net)->netns("q1");
  const std::string tc = chaos::whichProgram("tc");
  auto p = chaos::Process::spawn(
      {tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"}, ns);
  REQUIRE(p.ok());
  REQUIRE((*p)->waitUntil(deadlineIn(10s)));
  REQUIRE((*p)->exitCode() == 0);
  RawAgent a(ns);
  a.hello(400);
  a.next<agent::HelloReply>();
  agent::Net bw;
  bw.op = "bandwidth";
  bw.rate = "10mbit";
  bw.peers = {(*net)->address("q2")};  // eth0, found by the route to the peer
  a.send(bw, 2);
  const auto r = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(r.code == Code::kUnavailable);
  INFO(r.why);
  CHECK(r.why.find("device eth0 has a root qdisc of its own (htb)") != std::string::npos);
  agent::Net delay;
  delay.op = "delay";
  delay.delay_ms = 5;
  delay.peers = bw.peers;
  a.send(delay, 3);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == Code::kUnavailable);
  agent::Net probe = delay;
  probe.op = "prepare";
  a.send(probe, 4);
  const auto pr = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(pr.code == Code::kUnavailable);
  CHECK(pr.why.find("device eth0 has a root qdisc of its own (htb)") != std::string::npos);
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns).find("htb") !=
        std::string::npos);
  // Refused for shaping, the host is readied for a cut or a loss all the same: its chains are made.
  const std::string iptables = chaos::whichProgram("iptables");
  CHECK(
      outputOf({iptables, "-S"}, ns).find("-A INPUT -j MWCHAOS-IN-" + std::to_string(a.p->pid())) !=
      std::string::npos);
  a.waitExit(5s);
  CHECK(a.p->exitCode() == agent::kServedLeaseLost);
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns).find("htb") !=
        std::string::npos);
  CHECK(outputOf({iptables, "-S"}, ns).find("MWCHAOS") == std::string::npos);  // its lease ended
}

TEST_CASE("an agent readies a device before the faults, and its delay probe leaves it as it was",
          "[agent][net]") {
  requireSimNet();
  auto net = chaos::SimNet::create({"p1", "p2"});
  REQUIRE(net.ok());
  const std::string ns = (*net)->netns("p1");
  const std::string tc = chaos::whichProgram("tc");
  const std::string iptables = chaos::whichProgram("iptables");
  const std::string before = outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns);
  RawAgent a(ns);
  a.hello(10000);  // ended by Bye, not by its lease
  a.next<agent::HelloReply>();
  agent::Net prepare;
  prepare.op = "prepare";
  prepare.delay_ms = 1;                     // a delay will be asked: is there netem?
  prepare.peers = {(*net)->address("p2")};  // eth0, found by the route to the peer
  a.send(prepare, 2);
  const auto pr = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  INFO(pr.why);
  // Where the kernel has netem (Ok) and where it has not (kUnavailable, saying so), nothing is
  // shaped, and the owner record lists eth0 before any fault: a fault rewrites no rule.
  CHECK((pr.code == Code::kOk || pr.why.find("no netem qdisc") != std::string::npos));
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns) == before);
  auto record = [&] {
    const std::string rules = outputOf({iptables, "-S"}, ns);
    const size_t at = rules.find("mwchaos-owner pid=");
    return at == std::string::npos ? std::string() : rules.substr(at, rules.find('\n', at) - at);
  };
  CHECK(record().find("devs=eth0") != std::string::npos);
  agent::Net delay = prepare;
  delay.op = "delay";
  delay.delay_ms = 5;
  a.send(delay, 3);
  const auto dr = std::get<agent::Reply>(a.next<agent::Reply>().msg);
  CHECK(dr.code == pr.code);  // what the probe said the delay would do
  // Preparing a device the agent shapes already changes nothing there.
  a.send(prepare, 4);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == pr.code);
  if (dr.code == Code::kOk) {
    CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns).find("netem") !=
          std::string::npos);
  }
  agent::Net bw = prepare;
  bw.op = "bandwidth";
  bw.rate = "10mbit";
  a.send(bw, 5);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == Code::kOk);
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns).find("tbf") !=
        std::string::npos);
  agent::Net heal;
  heal.op = "heal";
  a.send(heal, 6);
  CHECK(std::get<agent::Reply>(a.next<agent::Reply>().msg).code == Code::kOk);
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns) == before);
  CHECK(record().find("devs=eth0") != std::string::npos);  // listed still: costs the sweep nothing
  a.send(agent::Bye{}, 7);
  a.waitExit(10s);
  CHECK(a.p->exitCode() == 0);
  CHECK(outputOf({tc, "qdisc", "show", "dev", "eth0", "root"}, ns) == before);
  CHECK(record().empty());
}

TEST_CASE("an agent readies its chains before the faults, a cut is one transaction, a heal adds",
          "[agent][net]") {
  requireSimNet();
  auto net = chaos::SimNet::create({"c1", "c2", "c3"});
  REQUIRE(net.ok());
  const std::string ns = (*net)->netns("c1");
  const std::string iptables = chaos::whichProgram("iptables");
  const std::string before = outputOf({iptables, "-S"}, ns);
  RawAgent a(ns);
  a.hello(10000, agent::buildId(), {{2222, 2222}});  // ended by Bye, not by its lease
  a.next<agent::HelloReply>();
  auto reply = [&](agent::Net m, uint64_t id) {
    a.send(std::move(m), id);
    return std::get<agent::Reply>(a.next<agent::Reply>().msg);
  };
  agent::Net ready;
  ready.op = "ready";
  CHECK(reply(ready, 2).code == Code::kOk);
  // The chains, their owner record, their exempt rules and the jumps to them, and no fault rule.
  const std::string readied = outputOf({iptables, "-S"}, ns);
  const std::string pid = std::to_string(a.p->pid());
  CHECK(readied.find("-A INPUT -j MWCHAOS-IN-" + pid) != std::string::npos);
  CHECK(readied.find("-A OUTPUT -j MWCHAOS-OUT-" + pid) != std::string::npos);
  CHECK(readied.find("-A MWCHAOS-OUT-" + pid +
                     " -m comment --comment \"mwchaos-owner pid=" + pid) != std::string::npos);
  CHECK(readied.find("--dport 2222 -j RETURN") != std::string::npos);
  CHECK(readied.find("-j DROP") == std::string::npos);
  CHECK(reply(ready, 3).code == Code::kOk);  // again: nothing changes
  CHECK(outputOf({iptables, "-S"}, ns) == readied);
  // A cut whose second peer iptables refuses cuts neither: all of it or nothing.
  agent::Net cut;
  cut.op = "cut";
  cut.peers = {(*net)->address("c2"), "10.1.2.3/99"};
  const agent::Reply bad = reply(cut, 4);
  CHECK(bad.code != Code::kOk);
  INFO(bad.why);
  CHECK(outputOf({iptables, "-S"}, ns) == readied);
  cut.peers = {(*net)->address("c2"), (*net)->address("c3")};
  CHECK(reply(cut, 5).code == Code::kOk);
  const std::string during = outputOf({iptables, "-S"}, ns);
  for (const char* peer : {"c2", "c3"}) {
    CHECK(during.find("-d " + (*net)->address(peer) + "/32 -j DROP") != std::string::npos);
    CHECK(during.find("--dport 2222 -j RETURN") < during.find("-j DROP"));
  }
  // A heal only adds: a RETURN after the exempt rules, ahead of every fault rule, in each chain.
  agent::Net heal;
  heal.op = "heal";
  CHECK(reply(heal, 6).code == Code::kOk);
  const std::string healed_rule = " -m comment --comment mwchaos-healed -j RETURN";
  const std::string out_return = "-A MWCHAOS-OUT-" + pid + healed_rule;
  const std::string healed = outputOf({iptables, "-S"}, ns);
  INFO(healed);
  CHECK(healed.find("-A MWCHAOS-IN-" + pid + healed_rule) != std::string::npos);
  CHECK(healed.find(out_return) != std::string::npos);
  CHECK(healed.find("--sport 2222 -j RETURN") < healed.find(out_return));
  CHECK(healed.find(out_return) < healed.find("-j DROP"));
  // The next fault goes ahead of that RETURN (in force), and the next heal ahead of it again.
  cut.peers = {(*net)->address("c3")};
  CHECK(reply(cut, 7).code == Code::kOk);
  const std::string again = outputOf({iptables, "-S"}, ns);
  CHECK(again.find("-d " + (*net)->address("c3") + "/32 -j DROP") < again.find(out_return));
  CHECK(again.find("--sport 2222 -j RETURN") < again.find("-j DROP"));
  CHECK(reply(heal, 8).code == Code::kOk);
  const std::string twice = outputOf({iptables, "-S"}, ns);
  CHECK(twice.find(out_return) < twice.find("-j DROP"));
  // A loud cut: TCP reset ahead of the ICMP reject, which would answer TCP too.
  cut.loud = true;
  CHECK(reply(cut, 9).code == Code::kOk);
  const std::string loud = outputOf({iptables, "-S"}, ns);
  CHECK(loud.find("--reject-with tcp-reset") < loud.find("--reject-with icmp-port-unreachable"));
  CHECK(loud.find("--reject-with icmp-port-unreachable") < loud.find(out_return));
  a.send(agent::Bye{}, 10);
  a.waitExit(10s);
  CHECK(a.p->exitCode() == 0);
  CHECK(outputOf({iptables, "-S"}, ns) == before);
}
