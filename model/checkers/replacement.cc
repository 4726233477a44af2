// Replacement worlds after restarts: every member of each world of a restarted role joins the
// world's new generation within expect.replacement_within.
#include <algorithm>

#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

namespace {

// When `role` first reported `world` created after `since` during the run, or -1.
double joinedAt(const RunRecord& r, const std::string& world, const std::string& role,
                double since) {
  double t = -1;
  for (const auto& ev : r.events) {
    if (ev.world == world && ev.role == role && ev.kind == EventKind::kCreated && ev.t > since &&
        r.inRun(ev.t) && (t < 0 || ev.t < t)) {
      t = ev.t;
    }
  }
  return t;
}

Verdict judgeWorld(const Scenario& s, const RunRecord& r, const FaultRec& f,
                   const std::string& world) {
  const ExpectSpec& e = s.expect;
  const double limit = static_cast<double>(e.replacement_within->count()) / 1000.0;
  Verdict v;
  v.world = world;
  v.where = e.where;
  v.name = "world " + world + " is healthy again within " +
           std::to_string(e.replacement_within->count()) + " ms of restarting " + f.role;
  v.threshold = "<= " + ms(limit);
  double worst = -1;
  std::string missing;
  for (const auto& role : s.membersOf(world)) {
    const double t = joinedAt(r, world, role, f.sent);
    if (t < 0) {
      missing += (missing.empty() ? "" : ", ") + role;
    } else {
      worst = std::max(worst, t - f.sent);
    }
  }
  if (!missing.empty()) {
    v.status = VerdictStatus::kFail;
    v.measured = "never";
    v.message = missing + " never re-joined world " + world + " after the restart at " +
                fmt("%.3f s", f.sent);
  } else {
    v.measured = ms(worst);
    v.status = worst <= limit ? VerdictStatus::kPass : VerdictStatus::kFail;
    v.message = "every member of " + world + " joined its new generation " + ms(worst) +
                " after the restart";
  }
  return v;
}

}  // namespace

std::vector<Verdict> replacement(const Scenario& s, const RunRecord& r) {
  std::vector<Verdict> out;
  if (!s.expect.replacement_within) return out;
  for (const auto& f : r.faults) {
    if (f.kind != FaultKind::kRestart || !f.delivered()) continue;
    for (const auto& world : s.worldsOf(f.role)) out.push_back(judgeWorld(s, r, f, world));
  }
  if (out.empty()) {
    out.push_back({"replacement worlds are healthy in time",
                   "",
                   VerdictStatus::kError,
                   "",
                   "",
                   "expect.replacement_within is set but no restart was delivered",
                   s.expect.where,
                   {}});
  }
  return out;
}

}  // namespace mw::harness::checks
