#include "model/expectations.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "chaos/enum_names.h"

namespace mw::harness {

namespace {

// How late after the signal the kernel must have closed a killed process's sockets for
// detected_within to count from the close rather than the signal (seconds).
constexpr double kKernelLate = 0.020;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

std::string ms(double seconds) { return fmt("%.0f ms", seconds * 1000); }

// Events that happened while the timeline ran (the stop at the end breaks worlds too).
bool inRun(const RunRecord& r, double t) { return r.inRun(t); }

const EventRec* firstBroken(const RunRecord& r, const std::string& world, const std::string& role,
                            double after) {
  const EventRec* best = nullptr;
  for (const auto& e : r.events) {
    if (e.world != world || e.kind != EventKind::kBroken || !inRun(r, e.t) || e.t < after) continue;
    if (!role.empty() && e.role != role) continue;
    if (best == nullptr || e.t < best->t) best = &e;
  }
  return best;
}

// "world W stays healthy": passes when `first_break` is null.
Verdict staysHealthy(const std::string& name, const EventRec* first_break,
                     const std::string& where) {
  Verdict v;
  v.world = name;
  v.where = where;
  v.name = "world " + name + " stays healthy";
  v.threshold = "healthy";
  if (first_break == nullptr) {
    v.status = VerdictStatus::kPass;
    v.measured = "healthy";
    v.message = "no member reported world " + name + " broken";
  } else {
    v.status = VerdictStatus::kFail;
    v.measured = "broken at " + fmt("%.3f s", first_break->t);
    v.message = "world " + name + " broke at " + fmt("%.3f s", first_break->t) + " (" +
                causeName(first_break->cause) + " seen by " + first_break->role + ": " +
                first_break->detail + ") but was expected to stay healthy";
  }
  return v;
}

}  // namespace

namespace {
constexpr const char* kEventNames[] = {"created", "broken", "removed", "join_failed"};
}  // namespace

const char* eventKindText(EventKind k) { return enumName(kEventNames, k); }

std::optional<EventKind> parseEventKindText(std::string_view name) {
  return enumFromName<EventKind>(kEventNames, name);
}

EventKind eventKindOf(WorldEvent::Kind k) {
  static_assert(static_cast<int>(WorldEvent::Kind::kCreated) == 0 &&
                static_cast<int>(WorldEvent::Kind::kBroken) == 1 &&
                static_cast<int>(WorldEvent::Kind::kRemoved) == 2);
  return static_cast<EventKind>(k);  // the first three kinds, in the runtime's order
}

std::string FaultRec::outcomeText() const {
  switch (outcome) {
    case FaultOutcome::kPending:
      return "pending";
    case FaultOutcome::kOk:
      return "ok";
    case FaultOutcome::kError:
      return "error: " + why;
    case FaultOutcome::kSkipped:
      return "skipped: " + why;
  }
  return "pending";
}

bool FaultRec::setOutcome(const std::string& text) {
  why.clear();
  if (text == "pending" || text == "ok") {
    outcome = text == "ok" ? FaultOutcome::kOk : FaultOutcome::kPending;
    return true;
  }
  for (auto [prefix, o] : {std::pair{"error: ", FaultOutcome::kError},
                           std::pair{"skipped: ", FaultOutcome::kSkipped}}) {
    const std::string p = prefix;
    if (text.rfind(p, 0) == 0) {
      outcome = o;
      why = text.substr(p.size());
      return true;
    }
  }
  return false;
}

double firstFault(const RunRecord& r) {
  double t = -1;
  for (const auto& f : r.faults) {
    if (f.delivered() && (t < 0 || f.sent < t)) t = f.sent;
  }
  return t;
}

std::vector<Verdict> evaluate(const Scenario& s, const RunRecord& r) {
  std::vector<Verdict> out;
  const ExpectSpec& e = s.expect;

  // Faults that could not be delivered make the run inconclusive.
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
  for (const auto& h : r.harness_errors) {
    out.push_back(
        {"the harness ran the scenario", "", VerdictStatus::kError, "", "", h, s.where, {}});
  }
  // No verdict may see a window at the wrong time: a record whose series go back is the harness's
  // error, never evidence.
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

  // Which worlds broke, and when first.
  std::map<std::string, const EventRec*> broke;
  for (const auto& [name, w] : s.worlds) {
    if (const EventRec* ev = firstBroken(r, name, "", 0)) broke[name] = ev;
  }
  if (e.has_broken) {
    for (const auto& [name, w] : s.worlds) {
      const bool expected = e.broken.count(name) > 0;
      auto it = broke.find(name);
      Verdict v;
      v.world = name;
      v.where = e.where;
      if (expected) {
        v.name = "world " + name + " breaks";
        v.threshold = "broken";
        if (it != broke.end()) {
          v.status = VerdictStatus::kPass;
          v.measured = "broken at " + fmt("%.3f s", it->second->t);
          v.message = "broke at " + fmt("%.3f s", it->second->t) + " (" +
                      causeName(it->second->cause) + " seen by " + it->second->role + ": " +
                      it->second->detail + ")";
        } else {
          v.status = VerdictStatus::kFail;
          v.measured = "healthy";
          v.message = "world " + name + " was expected to break but no member reported it broken";
        }
        out.push_back(v);
      } else {
        out.push_back(staysHealthy(name, it == broke.end() ? nullptr : it->second, e.where));
      }
    }
  }

  for (const auto& name : e.healthy) {
    if (e.has_broken) continue;  // judged with the broken set
    auto it = broke.find(name);
    out.push_back(staysHealthy(name, it == broke.end() ? nullptr : it->second, e.where));
  }

  // Detection latency: from the fault that touched the world to the break at every survivor.
  for (const auto& [name, first] : broke) {
    std::optional<Ms> limit = e.detected_within;
    auto wl = e.detected_within_world.find(name);
    if (wl != e.detected_within_world.end()) limit = wl->second;
    if (!limit) continue;
    if (e.has_broken && !e.broken.count(name)) continue;  // judged above
    Verdict v;
    v.name =
        "world " + name + " is detected broken within " + std::to_string(limit->count()) + " ms";
    v.world = name;
    v.where = e.where;
    v.threshold = "<= " + std::to_string(limit->count()) + " ms";
    const FaultRec* cause = nullptr;
    for (const auto& f : r.faults) {
      if (!f.delivered() || f.sent > first->t) continue;
      if (std::find(f.worlds.begin(), f.worlds.end(), name) == f.worlds.end()) continue;
      if (cause == nullptr || f.sent > cause->sent) cause = &f;
    }
    if (cause == nullptr) {
      v.status = VerdictStatus::kFail;
      v.message = "world " + name + " broke at " + fmt("%.3f s", first->t) +
                  " before any fault that touches it";
      out.push_back(v);
      continue;
    }
    std::set<std::string> gone;  // roles the scenario killed up to then, or took out of the world,
                                 // or gone from the world
    for (const auto& f : r.faults) {
      if (f.sent < 0 || f.sent > first->t + 1) continue;
      // Its process ended, or it left this world (it reports the world removed, not broken).
      const bool left = f.kind == FaultKind::kRemoveWorld &&
                        std::find(f.worlds.begin(), f.worlds.end(), name) != f.worlds.end();
      if (f.ends_role || left) gone.insert(f.role);
    }
    // A process the fault ended can be seen dead only once the kernel has closed its sockets.
    // When the harness saw that happen kKernelLate or more after the signal (a starved machine),
    // detection counts from then. Not below: the harness's own view of the close lags it by its
    // scheduling delay, which would credit the survivors with time they did not save.
    const bool kernel_late = cause->ends_role && cause->gone - cause->sent >= kKernelLate;
    // Likewise a network fault is in force once its last rule is in (acked): when the harness
    // took kKernelLate or more to put its rules in place (a starved machine; 236 ms was seen for
    // a loud partition whose rules usually take 34 ms), detection counts from then.
    const bool install_late = cause->role.empty() && cause->acked - cause->sent >= kKernelLate;
    const double from = kernel_late ? cause->gone : install_late ? cause->acked : cause->sent;
    double worst = 0;
    std::string worst_role, missing;
    for (const auto& role : s.membersOf(name)) {
      // Every member that can detect counts, the one a fault targeted included (a failpoint or a
      // network fault ends no process); not a member whose process ended, nor one paused then.
      if (gone.count(role) || (role == cause->role && cause->kind == FaultKind::kPause)) continue;
      const EventRec* ev = firstBroken(r, name, role, cause->sent);
      if (ev == nullptr) {
        missing += (missing.empty() ? "" : ", ") + role;
        continue;
      }
      const double after = std::max(0.0, ev->t - from);
      if (after >= worst) worst = after, worst_role = role;
    }
    v.measured = ms(worst);
    if (!missing.empty()) {
      v.status = VerdictStatus::kFail;
      v.message = "after '" + cause->action + "' at " + fmt("%.3f s", cause->sent) + ", " +
                  missing + " never reported world " + name + " broken";
    } else if (worst_role.empty()) {
      v.status = VerdictStatus::kSkipped;
      v.message = "no surviving member of world " + name + " to measure detection at";
    } else {
      v.status = worst * 1000 <= static_cast<double>(limit->count()) ? VerdictStatus::kPass
                                                                     : VerdictStatus::kFail;
      v.message = "'" + cause->action + "' at " + fmt("%.3f s", cause->sent);
      if (kernel_late) {
        v.message += "; the kernel closed the ended process's sockets " + ms(from - cause->sent) +
                     " later, and detection counts from then";
      } else if (install_late) {
        v.message += "; the harness had the fault in place " + ms(from - cause->sent) +
                     " later, and detection counts from then";
      }
      v.message += "; the last survivor to detect it was " + worst_role + " after " + ms(worst);
    }
    out.push_back(v);
  }

  // Survivors' throughput before and after the first fault.
  const double ff = firstFault(r);
  double last_fault = ff;
  for (const auto& f : r.faults) {
    if (f.delivered()) last_fault = std::max(last_fault, f.sent);
  }
  const double warm = static_cast<double>(s.warmup.count()) / 1000.0;
  for (const auto& t : e.throughput) {
    // A world's bytes at its rank-0 role, or a program role's own metric.
    const bool app = !t.metric.empty();
    const std::string series = app ? appSeries(t.metric) : t.world;
    const std::string what = app ? "role " + t.role + "'s " + t.metric : "world " + t.world;
    // Bytes per second in MB/s; a program's metric per second as it is.
    const double unit = app ? 1.0 : 1e6;
    const std::string per_s = app ? t.metric + "/s" : "MB/s";
    Verdict v;
    v.world = t.world;
    v.where = t.where;
    v.name = what + " keeps >= " + fmt("%.2f", t.ratio) + " of its throughput (" + t.window +
             " the fault)";
    v.threshold = ">= " + fmt("%.2f", t.ratio);
    if (ff < 0) {
      v.status = VerdictStatus::kError;
      v.message = "no fault was delivered, so there is no before and after";
      out.push_back(v);
      continue;
    }
    double to = t.window == "during" ? std::max(last_fault, ff + 0.2) : r.elapsed;
    const ThroughputEvidence ev = measureThroughput(s, r, series, warm, ff, ff, to, t.role);
    const Rate &before = ev.before, &after = ev.after;
    if (before.windows == 0 || before.mean <= 0) {
      v.status = VerdictStatus::kError;
      v.message = (app ? "role " + t.role + " reported no " + t.metric
                       : "no traffic measured in world " + t.world) +
                  " between the warm-up (" + fmt("%.2f s", warm) + ") and the first fault (" +
                  fmt("%.2f s", ff) + ")";
      out.push_back(v);
      continue;
    }
    const ThroughputJudgement j = judgeThroughput(ev, t.ratio);
    v.measured = fmt("%.3f", ev.ratio);
    v.status = j.status;
    v.message = "before: " + fmt("%.1f", before.mean / unit) + " " + per_s + " (median " +
                fmt("%.1f", before.median / unit) + ", " + std::to_string(before.windows) +
                " windows); after: " + fmt("%.1f", after.mean / unit) + " " + per_s + " (median " +
                fmt("%.1f", after.median / unit) + ", min " + fmt("%.1f", after.min / unit) + ", " +
                std::to_string(after.windows) + " windows); ratio " + fmt("%.3f", ev.ratio) + " [" +
                fmt("%.3f", ev.lo) + ", " + fmt("%.3f", ev.hi) + "]; control " +
                fmt("%.3f", ev.control) + "; CPU share of the survivors " +
                fmt("%.2f", ev.cpu_before.share) + " -> " + fmt("%.2f", ev.cpu_after.share) +
                ", outside load " + fmt("%.2f", ev.cpu_before.outside) + " -> " +
                fmt("%.2f", ev.cpu_after.outside) + " CPUs" +
                (j.why.empty() ? "" : "; inconclusive: " + j.why);
    v.evidence = {{"ratio", ev.ratio},
                  {"ratio_lo", ev.lo},
                  {"ratio_hi", ev.hi},
                  {"control", ev.control},
                  {"control_lo", ev.control_lo},
                  {"control_hi", ev.control_hi},
                  {"before_bytes_per_s", before.mean},
                  {"after_bytes_per_s", after.mean},
                  {"cpu_share_before", ev.cpu_before.share},
                  {"cpu_share_after", ev.cpu_after.share},
                  {"outside_cpus_before", ev.cpu_before.outside},
                  {"outside_cpus_after", ev.cpu_after.outside}};
    out.push_back(v);
  }

  // Replacement worlds after restarts.
  if (e.replacement_within) {
    const double limit = static_cast<double>(e.replacement_within->count()) / 1000.0;
    bool any = false;
    for (const auto& f : r.faults) {
      if (f.kind != FaultKind::kRestart || !f.delivered()) continue;
      for (const auto& world : s.worldsOf(f.role)) {
        any = true;
        Verdict v;
        v.world = world;
        v.where = e.where;
        v.name = "world " + world + " is healthy again within " +
                 std::to_string(e.replacement_within->count()) + " ms of restarting " + f.role;
        v.threshold = "<= " + ms(limit);
        double worst = -1;
        std::string missing;
        for (const auto& role : s.membersOf(world)) {
          double t = -1;
          for (const auto& ev : r.events) {
            if (ev.world == world && ev.role == role && ev.kind == EventKind::kCreated &&
                ev.t > f.sent && inRun(r, ev.t) && (t < 0 || ev.t < t)) {
              t = ev.t;
            }
          }
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
        out.push_back(v);
      }
    }
    if (!any) {
      out.push_back({"replacement worlds are healthy in time",
                     "",
                     VerdictStatus::kError,
                     "",
                     "",
                     "expect.replacement_within is set but no restart was delivered",
                     e.where,
                     {}});
    }
  }

  // Under a nemesis: every break must follow a fault that touches its world (within the world's
  // heartbeat timeout plus 2 s, the longest a real fault takes to be detected here).
  if (s.nemesis.enabled) {
    int breaks = 0, unexplained = 0, injected = 0;
    std::string which;
    for (const auto& f : r.faults) injected += f.delivered() ? 1 : 0;
    std::map<std::string, double> last;  // world -> time of the last counted break
    for (const auto& ev : r.events) {
      if (ev.kind != EventKind::kBroken || !inRun(r, ev.t)) continue;
      auto it = last.find(ev.world);
      if (it != last.end() && ev.t - it->second < 1.0) continue;  // the same break, another member
      last[ev.world] = ev.t;
      ++breaks;
      const auto ws = s.worlds.find(ev.world);
      const double window =
          (ws != s.worlds.end() ? static_cast<double>(ws->second.heartbeat.count()) / 1000.0
                                : 1.0) +
          2.0;
      bool explained = false;
      for (const auto& f : r.faults) {
        if (!f.delivered() || f.sent > ev.t || ev.t - f.sent > window) continue;
        if (std::find(f.worlds.begin(), f.worlds.end(), ev.world) != f.worlds.end())
          explained = true;
      }
      if (!explained) {
        ++unexplained;
        which += (which.empty() ? "" : "; ") + ev.world + " at " + fmt("%.3f s", ev.t) + " (" +
                 causeName(ev.cause) + " seen by " + ev.role + ")";
      }
    }
    out.push_back({"no world breaks without a fault that touches it",
                   "",
                   unexplained == 0 ? VerdictStatus::kPass : VerdictStatus::kFail,
                   std::to_string(unexplained),
                   "0",
                   std::to_string(injected) + " faults injected, " + std::to_string(breaks) +
                       " world breaks, " + std::to_string(unexplained) + " false" +
                       (which.empty() ? "" : ": " + which),
                   e.where,
                   {}});
  }

  if (e.no_hang) {
    std::string hung;
    for (const auto& w : r.workers) {
      if (w.hung) hung += (hung.empty() ? "" : ", ") + w.role;
    }
    out.push_back({"no process hangs",
                   "",
                   hung.empty() ? VerdictStatus::kPass : VerdictStatus::kFail,
                   hung.empty() ? "0" : hung,
                   "0",
                   hung.empty() ? "every worker exited within 5 s of being told to stop"
                                : "did not exit within 5 s of being told to stop (killed): " + hung,
                   e.where,
                   {}});
  }
  if (e.no_orphans) {
    std::string left = std::to_string(r.leftover_processes) + " processes, " +
                       std::to_string(r.leftover_namespaces) + " network namespaces";
    for (const auto& f : r.leftover_files) left += ", " + f;
    bool clean =
        r.leftover_processes == 0 && r.leftover_namespaces == 0 && r.leftover_files.empty();
    out.push_back(
        {"no orphan process or file is left",
         "",
         clean ? VerdictStatus::kPass : VerdictStatus::kFail,
         clean ? "0" : left,
         "0",
         clean ? "no worker process, fifo, temporary directory or network namespace remained"
               : "left behind: " + left,
         e.where,
         {}});
  }
  return out;
}

VerdictStatus overall(const std::vector<Verdict>& v) {
  bool inconclusive = false;
  for (const auto& x : v) {
    if (x.status == VerdictStatus::kFail || x.status == VerdictStatus::kError) {
      return VerdictStatus::kFail;
    }
    inconclusive = inconclusive || x.status == VerdictStatus::kInconclusive;
  }
  return inconclusive ? VerdictStatus::kInconclusive : VerdictStatus::kPass;
}

namespace {
constexpr const char* kStatusNames[] = {"pass", "fail", "inconclusive", "error", "skipped"};
}  // namespace

const char* verdictStatusName(VerdictStatus s) { return enumName(kStatusNames, s, "error"); }

std::optional<VerdictStatus> parseVerdictStatus(std::string_view name) {
  return enumFromName<VerdictStatus>(kStatusNames, name);
}

}  // namespace mw::harness
