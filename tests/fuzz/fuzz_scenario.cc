// libFuzzer target: the scenario loader (model/scenario.h) on untrusted Lua text, as a CI system
// running scenarios from pull requests meets it. Loading must end with a scenario or with errors
// naming file:line; never a crash, a sanitizer report, a hang past the Lua time budget or memory
// past the Lua cap. A scenario that loads must hold every number within the ranges of
// model/scenario.h (docs/scenarios.md, "Limits") and no string with a NUL byte: validation
// refuses the rest. The input is written to a file of this process, loaded with small limits.
//
// Two kinds of input. Lua text, mutated with tests/fuzz/fuzz_scenario.dict's extreme numbers. And,
// for inputs that begin with 0xff (a byte no Lua text starts with), a choice of numbers: each
// following pair of bytes puts the extreme value kValues[second] into the field kFields[first] of
// a scenario that is valid as it stands (kTemplate), so that every field meets every value without
// the luck of a mutation that keeps the rest of the file valid.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <variant>

#include "harness/loader.h"
#include "multiworld/world_manager.h"

namespace {

using mw::harness::kMaxTime;
using mw::harness::Ms;

// Every number of the scenario API, by its placeholder in kTemplate and its valid default.
const std::pair<const char*, const char*> kFields[] = {
    {"duration", "10"},
    {"warmup", "'1s'"},
    {"startup", "'60s'"},
    {"seed", "7"},
    {"heartbeat", "'500ms'"},
    {"op_timeout", "'10s'"},
    {"size", "2"},
    {"rank", "0"},
    {"rate", "100"},
    {"bytes", "'1KiB'"},
    {"root", "0"},
    {"at", "3"},
    {"signal", "'SIGKILL'"},
    {"at2", "4"},
    {"delay", "'50ms'"},
    {"jitter", "'5ms'"},
    {"at3", "5"},
    {"p", "0.2"},
    {"at4", "6"},
    {"failnum", "5"},
    {"probability", "0.5"},
    {"nstart", "'2s'"},
    {"nstop", "'8s'"},
    {"gap", "'1s'"},
    {"hold", "'300ms'"},
    {"nloss", "0.1"},
    {"detected", "'1s'"},
    {"detected_w1", "'2s'"},
    {"replacement", "'3s'"},
    {"ratio", "0.9"},
    {"name", "'extreme numbers'"},
};

// Lua expressions at and past the edges of every range, and the malformed.
const char* const kValues[] = {
    "0",
    "-0.0",
    "1",
    "-1",
    "0.5",
    "2.5",
    "1e-300",
    "5e-324",
    "1e300",
    "-1e300",
    "math.huge",
    "-math.huge",
    "0/0",
    "2^53",
    "2^53-1",
    "2^63",
    "2^64",
    "math.maxinteger",
    "math.mininteger",
    "1e6",
    "1e6+1",
    "1e-3",
    "1e-4",
    "86400",
    "86400.001",
    "3600",
    "3600.001",
    "4095",
    "4096",
    "1e15",
    "65",
    "'1e300s'",
    "'1e15s'",
    "'-1s'",
    "'nan'",
    "'infs'",
    "'0x1p1023s'",
    "'24h'",
    "'25h'",
    "'86400.0004s'",
    "'500ms'",
    "'50ms'",
    "'49ms'",
    "'1ms'",
    "'0.4ms'",
    "'1e300GiB'",
    "'16EiB'",
    "'2GiB'",
    "'SIGKILL'",
    "'a\\0b'",
    "'9'",
    "'1e300'",
    "''",
    "{}",
};

constexpr const char* kTemplate = R"(scenario {
  name = @name@,
  duration = @duration@, warmup = @warmup@, startup = @startup@, seed = @seed@,
  worlds = { w1 = { heartbeat = @heartbeat@, op_timeout = @op_timeout@, size = @size@ }, w2 = {} },
  roles = {
    a = { host = "h1", worlds = { w1 = @rank@, w2 = 0 } },
    b = { host = "h2", worlds = { w1 = 1, w2 = 1 } },
  },
  traffic = { gather_to_leader { world = "w1", rate = @rate@, bytes = @bytes@ },
              broadcast { world = "w2", root = @root@ } },
  timeline = {
    at(@at@, kill("b", @signal@)),
    at(@at2@, delay("h1", @delay@, @jitter@)),
    at(@at3@, loss("h2", @p@)),
    at(@at4@, failpoint("a", "mw/{backend}/send/w1",
                        { failnum = @failnum@, probability = @probability@ })),
  },
  nemesis = { faults = { "pause", "kill" }, start = @nstart@, stop = @nstop@, gap = @gap@,
              hold = @hold@, loss = @nloss@ },
  expect = { detected_within = { default = @detected@, w1 = @detected_w1@ },
             replacement_within = @replacement@,
             throughput = { throughput_kept { world = "w1", ratio = @ratio@ } } },
}
)";

// kTemplate with the values the input chooses.
std::string structured(const uint8_t* data, size_t size) {
  constexpr size_t kFieldCount = std::size(kFields);
  std::map<std::string, std::string> value;
  for (const auto& [name, def] : kFields) value[name] = def;
  for (size_t i = 1; i + 1 < size; i += 2) {
    value[kFields[data[i] % kFieldCount].first] = kValues[data[i + 1] % std::size(kValues)];
  }
  std::string text = kTemplate;
  for (size_t p; (p = text.find('@')) != std::string::npos;) {
    const size_t end = text.find('@', p + 1);
    text.replace(p, end - p + 1, value.at(text.substr(p + 1, end - p - 1)));
  }
  return text;
}

[[noreturn]] void outOfRange(const std::string& what) {
  std::fprintf(stderr, "a validated scenario holds %s\n", what.c_str());
  std::abort();
}

void checkTime(Ms t, Ms lo, Ms hi, const std::string& what) {
  if (t < lo || t > hi) outOfRange(what + " " + std::to_string(t.count()) + " ms");
}

void checkText(const std::string& s, const std::string& what) {
  if (s.find('\0') != std::string::npos) outOfRange(what + " with a NUL byte");
}

// Every number of `s` within the ranges of model/scenario.h, no string with a NUL byte.
void checkRanges(const mw::harness::Scenario& s) {
  using namespace mw::harness;
  checkTime(s.duration, Ms(500), kMaxTime, "duration");
  checkTime(s.warmup, Ms(0), s.duration - Ms(1), "warmup");
  checkTime(s.startup, Ms(100), Ms(3600 * 1000), "startup");
  if (s.seed > kMaxSeed) outOfRange("seed " + std::to_string(s.seed));
  checkText(s.name, "name");
  checkText(s.description, "description");
  for (const auto& [name, w] : s.worlds) {
    checkText(name, "a world's name");
    checkTime(w.heartbeat, Ms(50), Ms(3600 * 1000), "heartbeat");
    checkTime(w.op_timeout, Ms(1), kMaxTime, "op_timeout");
    if (w.size < 1 || w.size > mw::kMaxWorldSize) outOfRange("world size");
  }
  for (const auto& [name, r] : s.roles) {
    checkText(name, "a role's name");
    for (const auto& [w, rank] : r.ranks) {
      if (rank < 0 || rank >= mw::kMaxWorldSize) outOfRange("rank");
    }
    for (const auto& a : r.program) checkText(a, "a program argument");
    for (const auto& [k, v] : r.env) checkText(k + v, "an environment variable");
    checkText(r.cwd + r.host + r.device, "a cwd, host or device");
  }
  for (const auto& t : s.traffic) {
    if (!(t.rate == 0 || (t.rate >= kMinRate && t.rate <= kMaxRate))) outOfRange("rate");
    if (t.bytes < 1 || t.bytes > (1ULL << 31)) outOfRange("bytes");
    for (const auto& w : t.worlds) {
      if (t.root < 0 || t.root >= s.worlds.at(w).size) outOfRange("root");
    }
  }
  if (s.timeline.size() > 2 * kMaxNemesisFaults + 64) outOfRange("an endless timeline");
  for (const auto& a : s.timeline) {
    checkTime(a.at, Ms(0), s.duration, "a fault's time");
    if (const auto* d = std::get_if<Delay>(&a.fault)) {
      checkTime(Ms(d->delay_ms), Ms(1), kMaxTime, "delay");
      checkTime(Ms(d->jitter_ms), Ms(0), kMaxTime, "jitter");
    }
    if (const auto* l = std::get_if<Loss>(&a.fault); l && !(l->p > 0 && l->p < 1)) {
      outOfRange("a loss probability");
    }
    if (const auto* f = std::get_if<Failpoint>(&a.fault)) {
      if (!(f->mode.probability > 0 && f->mode.probability <= 1)) outOfRange("a probability");
      checkText(f->point, "a failpoint");
    }
  }
  const NemesisSpec& n = s.nemesis;
  checkTime(n.start, Ms(0), kMaxTime, "nemesis.start");
  checkTime(n.stop, Ms(0), kMaxTime, "nemesis.stop");
  checkTime(n.gap, Ms(0), kMaxTime, "nemesis.gap");
  checkTime(n.hold, Ms(0), kMaxTime, "nemesis.hold");
  if (n.enabled && !(n.loss > 0 && n.loss < 1)) outOfRange("nemesis.loss");
  if (s.expect.detected_within) {
    checkTime(*s.expect.detected_within, Ms(0), kMaxTime, "detected_within");
  }
  for (const auto& [w, d] : s.expect.detected_within_world) {
    checkTime(d, Ms(0), kMaxTime, "detected_within");
  }
  if (s.expect.replacement_within) {
    checkTime(*s.expect.replacement_within, Ms(0), kMaxTime, "replacement_within");
  }
  for (const auto& t : s.expect.throughput) {
    if (!(t.ratio > 0 && t.ratio <= 10)) outOfRange("a throughput ratio");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/mw_fuzz_scenario_" + std::to_string(::getpid()) + ".lua";
  const std::string text = size > 0 && data[0] == 0xff
                               ? structured(data, size)
                               : std::string(reinterpret_cast<const char*>(data), size);
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  } else {
    std::abort();
  }
  mw::harness::LoadOptions options;
  options.lua.time_budget = std::chrono::milliseconds(200);
  options.lua.memory_bytes = 64u << 20;
  auto result = mw::harness::loadScenario(path, options);
  // Either a scenario or at least one error, each naming the file.
  if (!result.loaded && result.errors.empty()) std::abort();
  for (const auto& e : result.errors) {
    if (e.find(path) == std::string::npos && e.find("mw_fuzz_scenario_") == std::string::npos) {
      std::fprintf(stderr, "error without its file: %s\n", e.c_str());
      std::abort();
    }
  }
  if (result.loaded) checkRanges(result.loaded->scenario);
  return 0;
}
