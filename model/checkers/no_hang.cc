// expect.no_hang: no worker hung when it was told to stop at the end of the run.
#include "model/checkers/checkers.h"

namespace mw::harness::checks {

std::vector<Verdict> noHang(const Scenario& s, const RunRecord& r) {
  if (!s.expect.no_hang) return {};
  // Each role's time to exit: 5 s, unless a program role gives its own (stop_within).
  const auto within = [&](const std::string& role) {
    const auto it = s.roles.find(role);
    return it != s.roles.end() ? it->second.stop_within : RoleSpec::kDefaultStopWithin;
  };
  const auto text = [](Ms d) {
    return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s"
                                 : std::to_string(d.count()) + " ms";
  };
  bool all_default = true;
  for (const auto& [name, role] : s.roles) {
    all_default &= role.stop_within == RoleSpec::kDefaultStopWithin;
  }
  std::string hung;
  for (const auto& w : r.workers) {
    if (!w.hung) continue;
    hung += (hung.empty() ? "" : ", ") + w.role;
    if (!all_default) hung += " (" + text(within(w.role)) + ")";
  }
  const std::string bound = all_default ? "5 s" : "its role's stop_within";
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
