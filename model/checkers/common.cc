#include "model/checkers/common.h"

#include <cstdio>

namespace mw::harness::checks {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

std::string ms(double seconds) { return fmt("%.0f ms", seconds * 1000); }

const EventRec* firstBroken(const RunRecord& r, const std::string& world, const std::string& role,
                            double after) {
  const EventRec* best = nullptr;
  for (const auto& e : r.events) {
    // Events that happened while the timeline ran (the stop at the end breaks worlds too).
    if (e.world != world || e.kind != EventKind::kBroken || !r.inRun(e.t) || e.t < after) continue;
    if (!role.empty() && e.role != role) continue;
    if (best == nullptr || e.t < best->t) best = &e;
  }
  return best;
}

std::map<std::string, const EventRec*> brokenWorlds(const Scenario& s, const RunRecord& r) {
  std::map<std::string, const EventRec*> broke;
  for (const auto& [name, w] : s.worlds) {
    if (const EventRec* ev = firstBroken(r, name, "", 0)) broke[name] = ev;
  }
  return broke;
}

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

}  // namespace mw::harness::checks
