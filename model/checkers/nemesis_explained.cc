// Under a nemesis: every break must follow a fault that touches its world (within the world's
// heartbeat timeout plus 2 s, the longest a real fault takes to be detected here).
#include <algorithm>

#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

namespace {

// Whether a delivered fault touching the broken world of `ev` came at most `window` before it.
bool explained(const RunRecord& r, const EventRec& ev, double window) {
  for (const auto& f : r.faults) {
    if (!f.delivered() || f.sent > ev.t || ev.t - f.sent > window) continue;
    if (std::find(f.worlds.begin(), f.worlds.end(), ev.world) != f.worlds.end()) return true;
  }
  return false;
}

}  // namespace

std::vector<Verdict> nemesisExplained(const Scenario& s, const RunRecord& r) {
  if (!s.nemesis.enabled) return {};
  int breaks = 0, unexplained = 0, injected = 0;
  std::string which;
  for (const auto& f : r.faults) injected += f.delivered() ? 1 : 0;
  std::map<std::string, double> last;  // world -> time of the last counted break
  for (const auto& ev : r.events) {
    if (ev.kind != EventKind::kBroken || !r.inRun(ev.t)) continue;
    auto it = last.find(ev.world);
    if (it != last.end() && ev.t - it->second < 1.0) continue;  // the same break, another member
    last[ev.world] = ev.t;
    ++breaks;
    const auto ws = s.worlds.find(ev.world);
    const double window =
        (ws != s.worlds.end() ? static_cast<double>(ws->second.heartbeat.count()) / 1000.0 : 1.0) +
        2.0;
    if (!explained(r, ev, window)) {
      ++unexplained;
      which += (which.empty() ? "" : "; ") + ev.world + " at " + fmt("%.3f s", ev.t) + " (" +
               causeName(ev.cause) + " seen by " + ev.role + ")";
    }
  }
  return {{"no world breaks without a fault that touches it",
           "",
           unexplained == 0 ? VerdictStatus::kPass : VerdictStatus::kFail,
           std::to_string(unexplained),
           "0",
           std::to_string(injected) + " faults injected, " + std::to_string(breaks) +
               " world breaks, " + std::to_string(unexplained) + " false" +
               (which.empty() ? "" : ": " + which),
           s.expect.where,
           {}}};
}

}  // namespace mw::harness::checks
