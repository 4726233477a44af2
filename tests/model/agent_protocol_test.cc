// The host agent's protocol (model/agent_protocol.h) and the clock estimate (model/clock_offset.h).
#include "model/agent_protocol.h"

#include <catch2/catch.hpp>
#include <random>

#include "model/clock_offset.h"
#include "model/net_words.h"

using namespace mw;
using namespace mw::agent;

namespace {

// One of every message, each field away from its default.
std::vector<Message> everyMessage() {
  Spawn sp{"r1", {"/bin/prog", "a b", "\"quoted\"\n"}, {"A=1", "B="}, "/tmp", "/bin/x", true, true};
  Net net{"cut", {"10.0.0.2", "10.0.0.3"}, true, 0.25, "10mbit", 40, 5, "eth1"};
  Reply r{Code::kTimeout, "why\tso", 4242, true, -17, 3, "/tmp/d", {{"r1", 5, 6}, {"r2", 7, 8}}};
  HelloReply hr{
      kProtocolVersion, "0.1.0+abc", "node7", 99, "boot", {{"root", "yes"}, {"gpus", "8"}}};
  return {Hello{kProtocolVersion, "0.1.0+abc", 1500, {{22, 22}, {60001, 63000}}},
          Ping{},
          sp,
          Signal{"r1", 9},
          Tell{"r1", "remove w1"},
          CloseStdin{"r1"},
          Kill{"r1"},
          Release{"r1"},
          MakeDir{"r1"},
          FifoOpen{"r1", "/tmp/d/fiu-1.in", 5000},
          FifoCommand{"r1", "enable name=x", 1000},
          net,
          ClockRead{},
          Sample{},
          Bye{},
          hr,
          r,
          Output{"r1", 3, "event 1 w1 created\n"},
          Eof{"r1", 2},
          Exit{"r1", "killed by SIGKILL", -1, 9, 123456789}};
}

}  // namespace

TEST_CASE("every agent frame reads back as it was written", "[agent]") {
  uint64_t id = 1;
  for (const auto& m : everyMessage()) {
    const Frame f{id++, m};
    const std::string line = encode(f);
    INFO(line);
    REQUIRE(line.back() == '\n');
    REQUIRE(line.find('\n') == line.size() - 1);  // one line, whatever the strings hold
    auto back = decode(std::string_view(line).substr(0, line.size() - 1));
    REQUIRE(back.ok());
    CHECK(back->id == f.id);
    CHECK(back->msg.index() == f.msg.index());
    CHECK(encode(*back) == line);
  }
}

TEST_CASE("a malformed agent frame is refused naming what is wrong", "[agent]") {
  auto why = [](std::string_view line) {
    auto f = decode(line);
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == Code::kInvalidArgument);
    return f.status().message();
  };
  CHECK(why("not json") == "agent frame: not a JSON object: 'not json'");
  CHECK(why("[1,2]") == "agent frame: not a JSON object: '[1,2]'");
  CHECK(why(R"({"id":1})") == "agent frame: no type (field 't')");
  CHECK(why(R"({"t":"launch","id":1})") == "agent frame: unknown type 'launch'");
  CHECK(why(R"({"t":"kill"})") == "agent frame: kill: field 'id' is missing");
  CHECK(why(R"({"t":"kill","id":-1,"role":"r"})") ==
        "agent frame: kill: field 'id' is out of range");
  CHECK(why(R"({"t":"kill","id":1})") == "agent frame: kill: field 'role' is missing");
  CHECK(why(R"({"t":"kill","id":1,"role":7})") ==
        "agent frame: kill: field 'role' is not a string");
  CHECK(why(R"({"t":"signal","id":1,"role":"r","sig":1.5})") ==
        "agent frame: signal: field 'sig' is not an integer");
  CHECK(why(R"({"t":"signal","id":1,"role":"r","sig":99})") ==
        "agent frame: signal: sig is not a signal number (0..64)");
  CHECK(why(R"({"t":"signal","id":1,"role":"r","sig":4294967296})") ==
        "agent frame: signal: field 'sig' is out of range");
  CHECK(why(R"({"t":"hello","id":1,"version":1,"build":"b","lease_ms":10,"exempt":[]})") ==
        "agent frame: hello: lease_ms is not in 50..600000");
  CHECK(why(R"({"t":"hello","id":1,"version":1,"build":"b","lease_ms":100,)"
            R"("exempt":[{"first":9,"last":3}]})") ==
        "agent frame: hello: exempt range 9-3 is not within 1..65535 in order");
  CHECK(
      why(R"({"t":"hello","id":1,"version":1,"build":"b","lease_ms":100,"exempt":[{"first":9}]})") ==
      "agent frame: hello.exempt[0]: field 'last' is missing");
  CHECK(why(R"({"t":"output","id":0,"role":"r","stream":4,"data":""})") ==
        "agent frame: output: stream is not 1, 2 or 3");
  CHECK(why(R"({"t":"net","id":1,"op":"melt","peers":[],"loud":false,"p":0,"rate":"",)"
            R"("delay_ms":0,"jitter_ms":0,"dev":""})") ==
        "agent frame: net: op 'melt' is none of cut, loss, bandwidth, delay, prepare, ready, "
        "heal");
  CHECK(why(R"({"t":"net","id":1,"op":"loss","peers":[1],"loud":false,"p":0,"rate":"",)"
            R"("delay_ms":0,"jitter_ms":0,"dev":""})") ==
        "agent frame: net: field 'peers' is not an array of strings");
  // Peers, devices and rates become iptables and tc arguments: plain words only.
  CHECK(why(R"({"t":"net","id":1,"op":"cut","peers":["10.0.0.1\" -j ACCEPT"],"loud":false,)"
            R"("p":0,"rate":"","delay_ms":0,"jitter_ms":0,"dev":""})") ==
        "agent frame: net: peer '10.0.0.1\" -j ACCEPT' is no host name or address (letters, "
        "digits, _ . : % [ ] - /)");
  CHECK(why(R"({"t":"net","id":1,"op":"cut","peers":[""],"loud":false,)"
            R"("p":0,"rate":"","delay_ms":0,"jitter_ms":0,"dev":""})")
            .find("peer '' is no host name") != std::string::npos);
  CHECK(why(R"({"t":"net","id":1,"op":"bandwidth","peers":[],"loud":false,"p":0,)"
            R"("rate":"10mbit","delay_ms":0,"jitter_ms":0,"dev":"-eth0"})") ==
        "agent frame: net: dev '-eth0' is no interface name (1 to 15 letters, digits, _ . -)");
  CHECK(why(R"({"t":"net","id":1,"op":"bandwidth","peers":[],"loud":false,"p":0,)"
            R"("rate":"10mbit burst 1","delay_ms":0,"jitter_ms":0,"dev":""})") ==
        "agent frame: net: rate '10mbit burst 1' is not a tc rate (a number and a unit, like "
        "10mbit)");
  CHECK(why(R"({"t":"reply","id":1,"code":"melted","why":"","pid":0,"ends":false,"t_ns":0,)"
            R"("count":0,"path":"","cpu":[]})") ==
        "agent frame: reply: field 'code' names no status code: 'melted'");
  CHECK(why(R"({"t":"spawn","id":1,"role":"r","argv":[],"env":[],"cwd":"","executable":"",)"
            R"("telemetry":false,"meter":false})") == "agent frame: spawn: argv is empty");
  CHECK(why(std::string(kMaxFrameBytes, ' ')).find("longer than") != std::string::npos);
}

TEST_CASE("output that is not UTF-8 is relayed with its bad bytes replaced", "[agent]") {
  const std::string line = encode(Frame{0, Output{"r", 2, "ok \xff\xfe end\n"}});
  auto back = decode(std::string_view(line).substr(0, line.size() - 1));
  REQUIRE(back.ok());
  CHECK(std::get<Output>(back->msg).data == "ok \xEF\xBF\xBD\xEF\xBF\xBD end\n");
}

TEST_CASE("frames are split into lines and a partial line waits", "[agent]") {
  std::string buf = "a\nbb\ncc";
  std::vector<std::string> lines;
  REQUIRE(takeLines(buf, lines).ok());
  CHECK(lines == std::vector<std::string>{"a", "bb"});
  CHECK(buf == "cc");
  std::string big(kMaxFrameBytes, 'x');
  lines.clear();
  CHECK(takeLines(big, lines).code() == Code::kInvalidArgument);
}

TEST_CASE("a peer of another version or build is refused with both named", "[agent]") {
  CHECK(checkPeer(kProtocolVersion, buildId(), "the agent").ok());
  Status s = checkPeer(kProtocolVersion + 1, "9.9.9+other", "the agent of host 'h2'");
  CHECK(s.code() == Code::kInvalidUsage);
  CHECK(s.message() ==
        "the agent of host 'h2' speaks agent protocol " + std::to_string(kProtocolVersion + 1) +
            " (build 9.9.9+other), this program protocol " + std::to_string(kProtocolVersion) +
            " (build " + buildId() + "): run the same build of mwchaos on every host");
  CHECK_FALSE(checkPeer(kProtocolVersion, buildId() + "x", "the agent").ok());
}

TEST_CASE("the clock estimate finds a fixed offset within half the best round trip", "[agent]") {
  // The agent's clock runs 2 s ahead; each leg of each round trip takes 50..2000 us, drawn
  // independently (so the legs differ: the case the estimate cannot know).
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> leg(50'000, 2'000'000);
  const int64_t offset = 2'000'000'000;
  std::vector<ClockSample> samples;
  int64_t t = 1'000'000'000;
  int64_t best_rtt = INT64_MAX;
  for (int i = 0; i < 32; ++i) {
    const int64_t out = leg(rng), back = leg(rng);
    samples.push_back({t, t + out + offset, t + out + back});
    best_rtt = std::min(best_rtt, out + back);
    t += 10'000'000;
  }
  const ClockOffset o = estimateOffset(samples);
  CHECK(o.samples == 32);
  CHECK(o.rtt_ns == best_rtt);
  CHECK(o.uncertainty_ns == (best_rtt + 1) / 2);
  CHECK(std::llabs(o.offset_ns - offset) <= o.uncertainty_ns);
  CHECK(std::llabs(toController(5'000'000'000 + offset, o) - 5'000'000'000) <= o.uncertainty_ns);
}

TEST_CASE("the clock estimate of a symmetric delay is exact", "[agent]") {
  // 300 us each way, a -1.5 s offset: the middle of the round trip is the agent's moment.
  std::vector<ClockSample> s = {
      {1'000, 1'000 + 300'000 - 1'500'000'000, 1'000 + 600'000},
      {5'000'000, 5'000'000 + 900'000 - 1'500'000'000, 5'000'000 + 1'800'000}};
  const ClockOffset o = estimateOffset(s);
  CHECK(o.offset_ns == -1'500'000'000);
  CHECK(o.rtt_ns == 600'000);
  CHECK(o.uncertainty_ns == 300'000);
}

TEST_CASE("the clock estimate without a usable sample says so", "[agent]") {
  CHECK(estimateOffset({}).samples == 0);
  CHECK(estimateOffset({{100, 50, 90}}).samples == 0);  // answered before it was asked
}

TEST_CASE("the words of a network fault are checked alike everywhere", "[agent][model]") {
  using harness::isInterfaceName;
  using harness::isPeerWord;
  using harness::isTcRate;
  for (const char* rate : {"10mbit", "1gbit", "1.5gbit", "800kbps", "50%", "100"}) {
    INFO(rate);
    CHECK(isTcRate(rate));
  }
  for (const char* rate : {"", "mbit", ".5mbit", "1.mbit", "10 mbit", "10mbit burst 1", "5%%",
                           "10mbit\"", "1e3mbit", "-1mbit"}) {
    INFO(rate);
    CHECK_FALSE(isTcRate(rate));
  }
  for (const char* dev : {"eth0", "ens5", "veth-h1.2", "a_b", "x23456789012345"}) {
    INFO(dev);
    CHECK(isInterfaceName(dev));
  }
  for (const char* dev : {"", ".", "..", "-eth0", "eth0:1", "a/b", "e\"0", "x234567890123456"}) {
    INFO(dev);
    CHECK_FALSE(isInterfaceName(dev));
  }
  for (const char* peer : {"10.0.0.2", "10.0.0.0/24", "node-1.example", "fe80::1%eth0", "[::1]"}) {
    INFO(peer);
    CHECK(isPeerWord(peer));
  }
  for (const char* peer : {"", "10.0.0.2 -j ACCEPT", "a\"b", "a\\b", "a\nb"}) {
    INFO(peer);
    CHECK_FALSE(isPeerWord(peer));
  }
}
