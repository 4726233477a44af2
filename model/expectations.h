// Expectations: judges a run against its scenario's expect table. Each verdict names the world
// it is about and the numbers behind it, so a failed one says what happened.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/run.h"
#include "model/scenario.h"
#include "model/throughput.h"

namespace mw::harness {

struct Verdict {
  std::string name;   // "world w2 breaks", "w1 keeps >= 0.90 of its throughput"
  std::string world;  // the world it is about ("" for run-wide ones)
  VerdictStatus status = VerdictStatus::kPass;
  std::string measured;   // "48 ms", "0.97", ...
  std::string threshold;  // "<= 100 ms", ">= 0.90", ...
  std::string message;    // what happened, with numbers
  std::string where;      // file:line of the expectation
  // The numbers a verdict was judged on, by name (throughput: ratio, interval, control, CPU
  // share and outside load before and after; see model/throughput.h). NaN: not measured.
  std::map<std::string, double> evidence;
};

// The name of the verdict of a scenario's Lua check(run) hook (expect.check).
inline constexpr const char* kCheckHookVerdict = "expect.check hook";

// The time of the first fault that was delivered, or -1.
double firstFault(const RunRecord& r);

// Every verdict but the Lua check hook's (the caller adds that one): the checkers of
// model/checkers/checkers.h in their table's order. Pure.
std::vector<Verdict> evaluate(const Scenario& s, const RunRecord& r);

// kFail when a verdict failed or is an error; else kInconclusive when one is; else kPass (every
// verdict passed or was skipped).
VerdictStatus overall(const std::vector<Verdict>& v);

}  // namespace mw::harness
