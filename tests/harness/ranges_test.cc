// The ranges of a scenario's numbers (model/scenario.h, docs/scenarios.md "Limits"): the time
// parser's bounds, and the validator at the edges of each range, in and just out. And the one rule
// of its strings: no NUL byte.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "harness/loader.h"
#include "model/nemesis.h"
#include "model/scenario.h"

namespace mw::harness {
namespace {

using std::chrono::hours;

// The errors of loading `text` (empty: it is valid).
std::vector<std::string> scenarioErrors(const std::string& text) {
  static int n = 0;
  const std::string path =
      "/tmp/mw_ranges_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".lua";
  std::ofstream(path) << text;
  auto r = loadScenario(path, LoadOptions{});
  ::unlink(path.c_str());
  return r.errors;
}

// A two-role scenario with `fields` added to its scenario { ... } table and `world` to its world's.
std::string scenarioWith(const std::string& fields, const std::string& world = "") {
  return "scenario { name = 's', worlds = { w1 = { " + world + " } },\n" +
         "  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },\n" + fields +
         " }\n";
}

// The one error of `text`, which must have exactly one.
std::string oneError(const std::string& text) {
  auto e = scenarioErrors(text);
  INFO(text);
  REQUIRE(e.size() == 1);
  return e.front();
}

TEST_CASE("the time parser keeps every time within its range", "[harness][ranges]") {
  std::string why;
  CHECK(parseDuration("24h", &why) == kMaxTime);
  CHECK(parseDuration("86400s", &why) == kMaxTime);
  CHECK(parseDuration("0", &why) == Ms(0));
  CHECK(parseDuration("250us", &why) == Ms(0));
  for (const char* bad : {"86401s", "25h", "1e300s", "1e400s", "inf", "infs", "nan", "-1s",
                          "-0.6ms", "0x1p1023s", "1e15s"}) {
    CAPTURE(bad);
    why.clear();
    CHECK_FALSE(parseDuration(bad, &why));
    CHECK(why == "\"" + std::string(bad) + "\" is out of range (0 to 24 h)");
  }
  CHECK_FALSE(parseDuration("soon", &why));
  CHECK(why == "expected a duration like \"500ms\" or \"2s\", got \"soon\"");
  CHECK_FALSE(parseDuration(std::string("1s\0x", 4), &why));  // not cut at the NUL
  CHECK_FALSE(parseDuration("49ms", &why, Ms(50), hours(1)));
  CHECK(why == "\"49ms\" is out of range (50 ms to 1 h)");
  CHECK(parseDuration("1h", &why, Ms(50), hours(1)) == hours(1));

  CHECK(secondsToTime(86400) == kMaxTime);
  CHECK(secondsToTime(2.5) == Ms(2500));
  for (double bad : {86400.001, 1e300, -1.0, std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN(), 9223372036854775808.0}) {
    CAPTURE(bad);
    why.clear();
    CHECK_FALSE(secondsToTime(bad, &why));
    CHECK(why.find(" s is out of range (0 to 24 h)") != std::string::npos);
  }
}

TEST_CASE("numbers and sizes are written and parsed without overflow", "[harness][ranges]") {
  CHECK(numberText(18446744073709551616.0) == "18446744073709551616");
  CHECK(numberText(1e300) == "1e+300");
  CHECK(numberText(0.25) == "0.25");
  CHECK(numberText(-std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(numberText(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(timeText(Ms(0)) == "0");
  CHECK(timeText(Ms(1500)) == "1500 ms");
  CHECK(timeText(kMaxTime) == "24 h");
  CHECK(parseBytes("1MiB") == (1u << 20));
  CHECK_FALSE(parseBytes("1e300GiB"));
  CHECK_FALSE(parseBytes("16EiB"));
  CHECK_FALSE(parseBytes("18446744073709551616"));
  CHECK_FALSE(parseBytes("inf"));
  CHECK_FALSE(parseBytes("-1"));
}

TEST_CASE("each range takes its edges and refuses what lies past them", "[harness][ranges]") {
  // In range, at the edges.
  CHECK(scenarioErrors(scenarioWith("duration = '24h', seed = 9007199254740991, "
                                    "timeline = { at(86400, kill('b')) }",
                                    "heartbeat = '1h', op_timeout = 86400")) ==
        std::vector<std::string>{});
  CHECK(scenarioErrors(scenarioWith("duration = 0.5, warmup = 0, seed = 0",
                                    "heartbeat = 0.05, op_timeout = '1ms'")) ==
        std::vector<std::string>{});
  // Past them, each with its range.
  CHECK_THAT(oneError(scenarioWith("duration = 86400.001")),
             Catch::Contains("duration: 86400.001 s is out of range (500 ms to 24 h)"));
  CHECK_THAT(oneError(scenarioWith("seed = 9007199254740992")),
             Catch::Contains("seed: 9007199254740992 is out of range (0 to 9007199254740991)"));
  CHECK_THAT(oneError(scenarioWith("seed = -1")), Catch::Contains("seed: -1 is out of range"));
  CHECK_THAT(oneError(scenarioWith("seed = 1.5")),
             Catch::Contains("seed: expected a whole number, got 1.5"));
  CHECK_THAT(oneError(scenarioWith("", "heartbeat = 3600.001")),
             Catch::Contains("worlds.w1.heartbeat: 3600.001 s is out of range (50 ms to 1 h)"));
  CHECK_THAT(oneError(scenarioWith("", "op_timeout = 0")),
             Catch::Contains("worlds.w1.op_timeout: 0 s is out of range (1 ms to 24 h)"));
  CHECK_THAT(oneError(scenarioWith("", "size = 1e300")),
             Catch::Contains("worlds.w1.size: 1e+300 is out of range (1 to 4096)"));
  CHECK_THAT(oneError(scenarioWith("timeline = { at(-1, kill('b')) }")),
             Catch::Contains("timeline[1] time: -1 s is out of range (0 to 24 h)"));
  CHECK_THAT(oneError(scenarioWith("timeline = { at(1, kill('b', 1e300)) }")),
             Catch::Contains("timeline[1] signal: 1e+300 is out of range (1 to "));
  CHECK_THAT(oneError(scenarioWith("expect = { detected_within = 1/0 }")),
             Catch::Contains("expect.detected_within: inf s is out of range (0 to 24 h)"));
  CHECK_THAT(oneError(scenarioWith("expect = { replacement_within = '1e300s' }")),
             Catch::Contains("expect.replacement_within: \"1e300s\" is out of range"));
}

TEST_CASE("a program role's stop_within is 100 ms to 600 s, and a program role's only",
          "[harness][ranges]") {
  const auto withStop = [](const std::string& value, bool program = true) {
    return std::string("scenario { name = 's', worlds = { w1 = {} },\n") +
           "  roles = { a = { worlds = { w1 = 0 }" +
           (program ? ", program = { '/bin/true' }" : "") + ", stop_within = " + value + " } } }\n";
  };
  CHECK(scenarioErrors(withStop("'100ms'")) == std::vector<std::string>{});
  CHECK(scenarioErrors(withStop("600")) == std::vector<std::string>{});
  CHECK_THAT(oneError(withStop("'99ms'")),
             Catch::Contains("roles.a.stop_within: \"99ms\" is out of range (100 ms to 600 s)"));
  CHECK_THAT(oneError(withStop("600.001")),
             Catch::Contains("roles.a.stop_within: 600.001 s is out of range (100 ms to 600 s)"));
  CHECK_THAT(oneError(withStop("'soon'")),
             Catch::Contains("roles.a.stop_within: expected a duration"));
  CHECK_THAT(oneError(withStop("'5s'", false)),
             Catch::Contains("roles.a.stop_within: only a program role (program = { ... }) takes "
                             "env, cwd and stop_within"));
}

TEST_CASE("a traffic rate is 0 or within kMinRate..kMaxRate", "[harness][ranges]") {
  auto traffic = [](const std::string& rate) {
    return scenarioWith("traffic = { gather_to_leader { world = 'w1', rate = " + rate + " } }");
  };
  CHECK(scenarioErrors(traffic("0")).empty());
  CHECK(scenarioErrors(traffic("1e6")).empty());
  CHECK(scenarioErrors(traffic("0.001")).empty());
  CHECK_THAT(oneError(traffic("1e6 + 1")),
             Catch::Contains("traffic[1].rate: 1000001 is out of range (0 to 1000000 operations"));
  CHECK_THAT(oneError(traffic("-1/0")), Catch::Contains("traffic[1].rate: -inf is out of range"));
  CHECK_THAT(oneError(traffic("1e-300")),
             Catch::Contains("traffic[1].rate: 1e-300 is below 0.001 operations per second"));
  CHECK_THAT(
      oneError(scenarioWith("traffic = { broadcast { world = 'w1', root = 2 } }")),
      Catch::Contains("traffic[1].root: rank 2 is not a member of world 'w1' (ranks 0 to 1)"));
  CHECK_THAT(
      oneError(scenarioWith("traffic = { gather_to_leader { world = 'w1', bytes = 1e300 } }")),
      Catch::Contains("traffic[1].bytes: expected a size from 1 byte to 2GiB"));
  CHECK_THAT(
      oneError(scenarioWith("traffic = { gather_to_leader { world = 'w1', bytes = '1e300GiB' } }")),
      Catch::Contains("traffic[1].bytes: expected a size from 1 byte to 2GiB"));
}

TEST_CASE("a nemesis's numbers have ranges, and its draw a limit", "[harness][ranges]") {
  CHECK_THAT(oneError(scenarioWith("nemesis = { faults = { 'pause' }, loss = 0/0 }")),
             Catch::Contains("nemesis.loss: nan is out of range (0 to 1)"));
  CHECK_THAT(oneError(scenarioWith("nemesis = { faults = { 'pause' }, gap = '1e300s' }")),
             Catch::Contains("nemesis.gap: \"1e300s\" is out of range (50 ms to 24 h)"));
  // 24 h of faults 50 ms apart would be 1.7 million of them.
  CHECK_THAT(oneError(scenarioWith("duration = '24h', nemesis = { faults = { 'pause' }, "
                                   "gap = '50ms', hold = '10ms' }")),
             Catch::Contains("nemesis: draws more than 100000 faults"));
  NemesisSpec n;
  n.faults = {"pause"};
  n.roles = {"a"};
  n.start = Ms(0);
  n.stop = kMaxTime;
  n.gap = Ms(50);
  n.hold = Ms(10);
  CHECK(drawNemesis(n, 1, {}, "x", 7).size() == 14);
}

TEST_CASE("a NUL byte in any string of a scenario is refused, naming the field",
          "[harness][ranges]") {
  CHECK_THAT(oneError(scenarioWith("description = 'a\\0b'")),
             Catch::Contains("description: \"a\\0b\" holds a NUL byte"));
  CHECK_THAT(
      oneError(
          "scenario { name = 's', worlds = { w1 = {} },\n"
          "  roles = { ['a\\0b'] = { worlds = { w1 = 1 } }, c = { worlds = { w1 = 0 } } } }\n"),
      Catch::Contains("roles.a\\0b: \"a\\0b\" holds a NUL byte"));
  CHECK_THAT(oneError(scenarioWith("timeline = { at(1, kill('b', 'SIGKILL\\0')) }")),
             Catch::Contains("timeline[1] signal: \"SIGKILL\\0\" holds a NUL byte"));
}

}  // namespace
}  // namespace mw::harness
