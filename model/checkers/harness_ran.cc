// The harness's own trouble: its errors, and a record whose series go back in time (no verdict may
// see a window at the wrong time, so such a record is the harness's error, never evidence).
#include "model/checkers/checkers.h"

namespace mw::harness::checks {

std::vector<Verdict> harnessRan(const Scenario& s, const RunRecord& r) {
  std::vector<Verdict> out;
  for (const auto& h : r.harness_errors) {
    out.push_back(
        {"the harness ran the scenario", "", VerdictStatus::kError, "", "", h, s.where, {}});
  }
  if (std::string back = timeOrderError(r); !back.empty()) {
    out.push_back({"the harness ran the scenario",
                   "",
                   VerdictStatus::kError,
                   "",
                   "",
                   "the record goes back in time: " + back,
                   s.where,
                   {}});
  }
  return out;
}

}  // namespace mw::harness::checks
