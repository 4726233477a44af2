// Detection latency: from the fault that touched a world to its break at every surviving member.
#include <algorithm>
#include <cmath>
#include <set>

#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

namespace {

// The last delivered fault touching `world` sent no later than `t`, or null.
const FaultRec* causeOf(const RunRecord& r, const std::string& world, double t) {
  const FaultRec* cause = nullptr;
  for (const auto& f : r.faults) {
    if (!f.delivered() || f.sent > t) continue;
    if (std::find(f.worlds.begin(), f.worlds.end(), world) == f.worlds.end()) continue;
    if (cause == nullptr || f.sent > cause->sent) cause = &f;
  }
  return cause;
}

// Roles the scenario killed up to `t` (plus a second), or took out of `world`: their process
// ended, or they left the world (and report it removed, not broken).
std::set<std::string> goneBy(const RunRecord& r, const std::string& world, double t) {
  std::set<std::string> gone;
  for (const auto& f : r.faults) {
    if (f.sent < 0 || f.sent > t + 1) continue;
    const bool left = f.kind == FaultKind::kRemoveWorld &&
                      std::find(f.worlds.begin(), f.worlds.end(), world) != f.worlds.end();
    if (f.ends_role || left) gone.insert(f.role);
  }
  return gone;
}

// One world's verdict `v` (named, with its threshold), once its cause is known; `first` is its
// first break, `limit` its bound.
Verdict judge(const Scenario& s, const RunRecord& r, const std::string& name, const FaultRec& cause,
              const EventRec& first, Ms limit, Verdict v) {
  const std::set<std::string> gone = goneBy(r, name, first.t);
  // A process the fault ended can be seen dead only once the kernel has closed its sockets.
  // When the harness saw that happen kFaultLateS or more after the signal (a starved machine),
  // detection counts from then. Not below: the harness's own view of the close lags it by its
  // scheduling delay, which would credit the survivors with time they did not save.
  // Not for scancel_step: its `gone` is when the step's agent was seen to go, and the path from
  // scancel through slurmctld and slurmd is the fault itself (detection counts from scancel).
  const bool kernel_late = cause.ends_role && cause.kind != FaultKind::kScancelStep &&
                           cause.gone - cause.sent >= kFaultLateS;
  // Likewise a network fault is in force once its last rule is in (acked): when the harness
  // took kFaultLateS or more to put its rules in place (a starved machine; 236 ms was seen for
  // a loud partition whose rules usually take 34 ms), detection counts from then.
  const bool install_late = cause.role.empty() && cause.acked - cause.sent >= kFaultLateS;
  const double from = kernel_late ? cause.gone : install_late ? cause.acked : cause.sent;
  double worst = 0;
  std::string worst_role, missing;
  // The members' times are their hosts' clocks placed on the controller's: right to within the
  // largest uncertainty among the hosts measured (0 on one machine).
  double clock_ms = 0;
  std::string clock_host;
  for (const auto& role : s.membersOf(name)) {
    // Every member that can detect counts, the one a fault targeted included (a failpoint or a
    // network fault ends no process); not a member whose process ended, nor one paused then.
    if (gone.count(role) || (role == cause.role && cause.kind == FaultKind::kPause)) continue;
    const EventRec* ev = firstBroken(r, name, role, cause.sent);
    if (ev == nullptr) {
      missing += (missing.empty() ? "" : ", ") + role;
      continue;
    }
    const double after = std::max(0.0, ev->t - from);
    if (after >= worst) worst = after, worst_role = role;
    const std::string& host = s.roles.count(role) ? s.roles.at(role).host : std::string();
    if (r.clockUncertaintyMs(host) > clock_ms) {
      clock_ms = r.clockUncertaintyMs(host);
      clock_host = host;
    }
  }
  v.measured = ms(worst);
  const std::string at = "'" + cause.action + "' at " + fmt("%.3f s", cause.sent);
  if (!missing.empty()) {
    v.status = VerdictStatus::kFail;
    v.message = "after " + at + ", " + missing + " never reported world " + name + " broken";
  } else if (worst_role.empty()) {
    v.status = VerdictStatus::kSkipped;
    v.message = "no surviving member of world " + name + " to measure detection at";
  } else {
    v.status = worst * 1000 <= static_cast<double>(limit.count()) ? VerdictStatus::kPass
                                                                  : VerdictStatus::kFail;
    v.message = at;
    if (kernel_late) {
      v.message += "; the kernel closed the ended process's sockets " + ms(from - cause.sent) +
                   " later, and detection counts from then";
    } else if (install_late) {
      v.message += "; the harness had the fault in place " + ms(from - cause.sent) +
                   " later, and detection counts from then";
    }
    v.message += "; the last survivor to detect it was " + worst_role + " after " + ms(worst);
    const double margin = std::abs(static_cast<double>(limit.count()) - worst * 1000);
    if (margin < clock_ms) {
      v.status = VerdictStatus::kInconclusive;
      v.message += "; that is " + fmt("%.1f ms", margin) + " from the bound, within the " +
                   fmt("%.1f ms", clock_ms) + " uncertainty of host " + clock_host +
                   "'s clock: neither a pass nor a failure can be told";
    }
  }
  return v;
}

}  // namespace

std::vector<Verdict> detection(const Scenario& s, const RunRecord& r) {
  const ExpectSpec& e = s.expect;
  std::vector<Verdict> out;
  for (const auto& [name, first] : brokenWorlds(s, r)) {
    std::optional<Ms> limit = e.detected_within;
    auto wl = e.detected_within_world.find(name);
    if (wl != e.detected_within_world.end()) limit = wl->second;
    if (!limit) continue;
    if (e.has_broken && !e.broken.count(name)) continue;  // judged by brokenSet
    Verdict v;
    v.name =
        "world " + name + " is detected broken within " + std::to_string(limit->count()) + " ms";
    v.world = name;
    v.where = e.where;
    v.threshold = "<= " + std::to_string(limit->count()) + " ms";
    const FaultRec* cause = causeOf(r, name, first->t);
    if (cause == nullptr) {
      v.status = VerdictStatus::kFail;
      v.message = "world " + name + " broke at " + fmt("%.3f s", first->t) +
                  " before any fault that touches it";
      out.push_back(v);
      continue;
    }
    out.push_back(judge(s, r, name, *cause, *first, *limit, v));
  }
  return out;
}

}  // namespace mw::harness::checks
