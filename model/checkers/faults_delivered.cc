// Faults that could not be delivered make the run an error; those this machine cannot deliver
// are skipped verdicts.
#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

std::vector<Verdict> faultsDelivered(const Scenario&, const RunRecord& r) {
  std::vector<Verdict> out;
  for (const auto& f : r.faults) {
    if (f.outcome == FaultOutcome::kError) {
      out.push_back({"fault delivered: " + f.action,
                     "",
                     VerdictStatus::kError,
                     "",
                     "",
                     "at " + fmt("%.2f s", f.planned) + ": " + f.outcomeText(),
                     f.where,
                     {}});
    } else if (f.outcome == FaultOutcome::kSkipped) {
      out.push_back({"fault delivered: " + f.action,
                     "",
                     VerdictStatus::kSkipped,
                     "",
                     "",
                     f.outcomeText(),
                     f.where,
                     {}});
    }
  }
  return out;
}

}  // namespace mw::harness::checks
