// The worker line protocol (multiworld/telemetry_lines.h): every kind round-trips, and a line
// that is not the protocol is an error naming what is wrong, never a crash.
#include "multiworld/telemetry_lines.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

namespace mw::telemetry_lines {
namespace {

Line roundTrip(const Line& l) {
  auto parsed = parse(format(l));
  INFO(format(l) << " -> " << parsed.status().toString());
  REQUIRE(parsed.ok());
  CHECK(format(*parsed) == format(l));
  return *parsed;
}

TEST_CASE("every worker line kind round-trips", "[runtime][lines]") {
  CHECK(std::get<Fifo>(roundTrip(Fifo{"/tmp/x/fifo"})).path == "/tmp/x/fifo");
  CHECK(std::get<Fifo>(roundTrip(Fifo{})).path.empty());
  CHECK(std::get<Ready>(roundTrip(Ready{123456789012345})).t_ns == 123456789012345);
  auto e = std::get<Event>(roundTrip(Event{5, "w1", WorldEvent::Kind::kBroken, 3, Cause::kPeerDied,
                                           2, "connection reset\nby peer"}));
  CHECK(e.world == "w1");
  CHECK(e.generation == 3);
  CHECK(e.kind == WorldEvent::Kind::kBroken);
  CHECK(e.cause == Cause::kPeerDied);
  CHECK(e.peer == 2);
  CHECK(e.detail == "connection reset by peer");  // newlines never split a line
  auto created = std::get<Event>(
      roundTrip(Event{6, "w2", WorldEvent::Kind::kCreated, 1, Cause::kNone, -1, ""}));
  CHECK(created.cause == Cause::kNone);
  CHECK(created.peer == -1);
  auto m = std::get<Metrics>(roundTrip(Metrics{7, "w1", 2, 1 << 20, 4, 1000, 600}));
  CHECK(m.bytes == 1 << 20);
  CHECK(m.lat_max_ns == 600);
  auto c = std::get<Cpu>(roundTrip(Cpu{8, 50000000, 1200}));
  CHECK(c.cpu_ns == 50000000);
  CHECK(c.wait_ns == 1200);
  auto j = std::get<JoinFail>(roundTrip(JoinFail{9, "w3", "timeout: no answer"}));
  CHECK(j.status == "timeout: no answer");
  CHECK(std::get<Error>(roundTrip(Error{"unavailable: no GPU"})).message == "unavailable: no GPU");
  auto a = std::get<App>(roundTrip(App{10, "requests.ok", 0.1 + 0.2}));
  CHECK(a.name == "requests.ok");
  CHECK(a.value == 0.1 + 0.2);  // every bit of the double
  CHECK(std::get<App>(roundTrip(App{11, "x", -1e300})).value == -1e300);
  auto k = std::get<Check>(roundTrip(Check{11, "answer.doubled", 9, 2, "got 6\nwanted 8"}));
  CHECK(k.name == "answer.doubled");
  CHECK(k.passed == 9);
  CHECK(k.failed == 2);
  CHECK(k.detail == "got 6 wanted 8");
  CHECK(std::get<Check>(roundTrip(Check{11, "x", 1, 0, ""})).detail.empty());
  auto v = std::get<Verified>(roundTrip(Verified{12, "w1", 40, 40 << 20, 3}));
  CHECK(v.world == "w1");
  CHECK(v.ops == 40);
  CHECK(v.bytes == 40 << 20);
  CHECK(v.violations == 3);
  auto x = std::get<Violation>(
      roundTrip(Violation{13, "w2", 4, "recv", 17, 3, 1024, 0.5, 1e-30, "from rank 1\nof 2"}));
  CHECK(x.world == "w2");
  CHECK(x.generation == 4);
  CHECK(x.op == "recv");
  CHECK(x.seq == 17);
  CHECK(x.offset == 3);
  CHECK(x.wrong == 1024);
  CHECK(x.expected == 0.5);
  CHECK(x.found == 1e-30);
  CHECK(x.detail == "from rank 1 of 2");
  // A corrupted element may hold anything: nan and inf are read back.
  auto nan = std::get<Violation>(roundTrip(Violation{
      14, "w2", 1, "all_reduce", 0, 0, 1, 3, std::numeric_limits<double>::quiet_NaN(), ""}));
  CHECK(std::isnan(nan.found));
  auto inf = std::get<Violation>(roundTrip(Violation{
      15, "w2", 1, "broadcast", 0, 0, 1, 3, -std::numeric_limits<double>::infinity(), ""}));
  CHECK(inf.found == -std::numeric_limits<double>::infinity());
  auto h = std::get<History>(roundTrip(History{16, 17, "w1", 2, "recv", 3, 99, "violation"}));
  CHECK(h.start_ns == 16);
  CHECK(h.end_ns == 17);
  CHECK(h.world == "w1");
  CHECK(h.generation == 2);
  CHECK(h.op == "recv");
  CHECK(h.peer == 3);
  CHECK(h.seq == 99);
  CHECK(h.outcome == "violation");
  CHECK(std::get<History>(roundTrip(History{1, 2, "w", 1, "all_reduce", -1, 0, "ok"})).peer == -1);
  CHECK(std::get<HistoryFull>(roundTrip(HistoryFull{18})).t_ns == 18);
}

TEST_CASE("a line that is not the protocol names what is wrong", "[runtime][lines]") {
  struct Case {
    const char* line;
    const char* says;
  };
  for (const Case& c :
       {Case{"metrics 1 w1 2 3 4 5", "missing latency_max_ns"},
        Case{"metrics 1 w1 2 x 4 5 6", "bytes 'x' is not a whole number"},
        Case{"metrics 1 w1 2 3 4 5 6 7", "latency_max_ns '6 7'"},
        Case{"ready", "missing time"},
        Case{"ready soon", "time 'soon'"},
        Case{"event 1 w1 broken", "missing generation"},
        Case{"cpu 1 -", "cpu_ns '-'"},
        Case{"cpu 1 99999999999999999999 0", "cpu_ns"},
        Case{"fifo", "missing path"},
        Case{"hello world", "unknown kind 'hello'"},
        Case{"", "unknown kind ''"},
        Case{"event 1 w1 exploded 1 - -1 x", "unknown kind 'exploded'"},
        Case{"event 1 w1 broken 1 peer_exploded 2 x", "unknown cause 'peer_exploded'"},
        Case{"app 1 requests", "missing value"},
        Case{"app 1 requests many", "not a finite"},
        Case{"app 1 requests nan", "not a finite"},
        Case{"app 1 requests inf", "not a finite"},
        Case{"check 1 answers 3", "missing failed"},
        Case{"check 1 answers x 0 d", "passed 'x'"},
        Case{"verified 1 w1 2", "missing bytes"},
        Case{"verified 1 w1 2 3", "missing violations"},
        Case{"verified 1 w1 2 many 0", "bytes 'many'"},
        Case{"violation 1 w1 1 recv 2 3 4 5", "missing found"},
        Case{"violation 1 w1 1 recv -2 3 4 5 6 x", "seq '-2'"},
        Case{"violation 1 w1 1 recv 2 3 4 five 6 x", "expected 'five' is not a number"},
        Case{"history 1 2 w1 1 recv 0 5", "missing outcome"},
        Case{"history 1 2 w1 1 recv x 5 ok", "peer 'x'"},
        Case{"history 1 2 w1 1 recv 0 5 ok more", "more than 8 fields"},
        Case{"history_full", "missing time"},
        Case{"history_full later", "time 'later'"}}) {
    auto r = parse(c.line);
    CAPTURE(c.line);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(c.says));
  }
}

TEST_CASE("random bytes never crash the parser", "[runtime][lines]") {
  std::mt19937 rng(7);
  const std::string kinds[] = {"metrics ", "event ",    "cpu ",       "ready ", "joinfail ",
                               "fifo ",    "verified ", "violation ", "check ", ""};
  for (int i = 0; i < 20000; ++i) {
    std::string line = kinds[rng() % 10];
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) line += static_cast<char>(" 0123456789-w\x01\xff"[rng() % 15]);
    (void)parse(line);  // any answer, never a crash (ASan and UBSan watch this test)
  }
}

}  // namespace
}  // namespace mw::telemetry_lines
