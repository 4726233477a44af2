// expect.no_hang: no worker hung when it was told to stop at the end of the run.
#include "model/checkers/checkers.h"

namespace mw::harness::checks {

std::vector<Verdict> noHang(const Scenario& s, const RunRecord& r) {
  if (!s.expect.no_hang) return {};
  std::string hung;
  for (const auto& w : r.workers) {
    if (w.hung) hung += (hung.empty() ? "" : ", ") + w.role;
  }
  return {{"no process hangs",
           "",
           hung.empty() ? VerdictStatus::kPass : VerdictStatus::kFail,
           hung.empty() ? "0" : hung,
           "0",
           hung.empty() ? "every worker exited within 5 s of being told to stop"
                        : "did not exit within 5 s of being told to stop (killed): " + hung,
           s.expect.where,
           {}}};
}

}  // namespace mw::harness::checks
