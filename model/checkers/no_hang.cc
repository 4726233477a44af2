// expect.no_hang: no worker hung when it was told to stop at the end of the run.
#include "model/checkers/checkers.h"

namespace mw::harness::checks {

std::vector<Verdict> noHang(const Scenario& s, const RunRecord& r) {
  if (!s.expect.no_hang) return {};
  // Each role's time to exit: the default, unless a program role gives its own (stop_within).
  bool all_default = true;
  for (const auto& [name, role] : s.roles) {
    all_default &= role.stop_within == RoleSpec::kDefaultStopWithin;
  }
  std::string hung;
  for (const auto& w : r.workers) {
    if (!w.hung) continue;
    hung += (hung.empty() ? "" : ", ") + w.role;
    if (!all_default) hung += " (" + timeText(s.stopWithin(w.role)) + ")";
  }
  const std::string bound =
      all_default ? timeText(RoleSpec::kDefaultStopWithin) : "its role's stop_within";
  return {{"no process hangs",
           "",
           hung.empty() ? VerdictStatus::kPass : VerdictStatus::kFail,
           hung.empty() ? "0" : hung,
           "0",
           hung.empty()
               ? "every worker exited within " + bound + " of being told to stop"
               : "did not exit within " + bound + " of being told to stop (killed): " + hung,
           s.expect.where,
           {}}};
}

}  // namespace mw::harness::checks
