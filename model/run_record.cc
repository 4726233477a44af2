// RunRecord's time base (run.h).
#include <cstdio>
#include <string>

#include "model/run.h"

namespace mw::harness {

void RunRecord::shiftTimes(double seconds) {
  for (auto& e : events) e.t -= seconds;
  for (auto& v : violations) v.t -= seconds;
  for (auto& [role, h] : history) {
    for (auto& op : h.ops) op.start -= seconds, op.end -= seconds;
    if (h.full_at) *h.full_at -= seconds;
  }
  for (auto& [role, checks] : app_checks) {
    for (auto& [name, c] : checks) {
      if (c.first_failure_t >= 0) c.first_failure_t -= seconds;
    }
  }
  for (auto& [series, roles] : windows) {
    for (auto& [role, ws] : roles) {
      for (auto& w : ws) w.t -= seconds;
    }
  }
  for (auto& [role, cs] : cpu) {
    for (auto& c : cs) c.t -= seconds;
  }
  for (auto& m : machine) m.t -= seconds;
  for (auto& f : faults) {
    // Faults are planned from the new zero; only what already happened moves.
    if (f.sent >= 0) f.sent -= seconds;
    if (f.acked >= 0) f.acked -= seconds;
    if (f.gone >= 0) f.gone -= seconds;
  }
}

namespace {

// "" when the times of `items` (by `time`) never decrease; else where they first do.
template <typename Items, typename Time>
std::string firstBackwards(const Items& items, Time time, const std::string& what) {
  for (size_t i = 1; i < items.size(); ++i) {
    const double a = time(items[i - 1]), b = time(items[i]);
    if (b < a) {
      char text[160];
      std::snprintf(text, sizeof(text), ": sample %zu at t=%.3f s comes after t=%.3f s", i, b, a);
      return what + text;
    }
  }
  return "";
}

}  // namespace

std::string timeOrderError(const RunRecord& r) {
  const auto t = [](const auto& x) { return x.t; };
  for (const auto& [series, roles] : r.windows) {
    for (const auto& [role, ws] : roles) {
      std::string e = firstBackwards(ws, t, "series '" + series + "' of role '" + role + "'");
      if (!e.empty()) return e;
    }
  }
  for (const auto& [role, cs] : r.cpu) {
    std::string e = firstBackwards(cs, t, "CPU samples of role '" + role + "'");
    if (!e.empty()) return e;
  }
  return firstBackwards(r.machine, t, "machine samples");
}

double RunRecord::clockUncertaintyMs(const std::string& host) const {
  const std::string name = host.empty() ? "local" : host;
  for (const auto& h : hosts) {
    if (h.name == name) return h.same_clock ? 0 : h.uncertainty_ms;
  }
  return 0;
}

}  // namespace mw::harness
