// Expectations: judges a run against its scenario's expect table. Each verdict names the world
// it is about and the numbers behind it, so a failed one says what happened.
#pragma once

#include <string>
#include <vector>

#include "harness/run.h"
#include "harness/scenario.h"

namespace mw::harness {

struct Verdict {
  std::string name;        // "world w2 breaks", "w1 keeps >= 0.90 of its throughput"
  std::string world;       // the world it is about ("" for run-wide ones)
  std::string status;      // pass | fail | error | skipped
  std::string measured;    // "48 ms", "0.97", ...
  std::string threshold;   // "<= 100 ms", ">= 0.90", ...
  std::string message;     // what happened, with numbers
  std::string where;       // file:line of the expectation
};

// Throughput of `world` measured at its rank-0 role, in bytes per second, over windows whose end
// lies in (from, to]. Returns {mean, median, min, max, windows}.
struct Rate {
  double mean = 0, median = 0, min = 0, max = 0;
  int windows = 0;
};
Rate throughputBetween(const Scenario& s, const RunRecord& r, const std::string& world,
                       double from, double to);

// The time of the first fault that was delivered, or -1.
double firstFault(const RunRecord& r);

// Every verdict but the Lua check hook's (the caller adds that one).
std::vector<Verdict> evaluate(const Scenario& s, const RunRecord& r);

// "pass" when every verdict passed or was skipped, else "fail" (a failure or an error).
std::string overall(const std::vector<Verdict>& v);

}  // namespace mw::harness
