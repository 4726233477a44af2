// Which worlds break: with expect.broken every world of the scenario is judged (exactly that set
// breaks); without it only the worlds expect.healthy names.
#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

namespace {

Verdict breaks(const std::string& name, const EventRec* first, const std::string& where) {
  Verdict v;
  v.world = name;
  v.where = where;
  v.name = "world " + name + " breaks";
  v.threshold = "broken";
  if (first != nullptr) {
    v.status = VerdictStatus::kPass;
    v.measured = "broken at " + fmt("%.3f s", first->t);
    v.message = "broke at " + fmt("%.3f s", first->t) + " (" + causeName(first->cause) +
                " seen by " + first->role + ": " + first->detail + ")";
  } else {
    v.status = VerdictStatus::kFail;
    v.measured = "healthy";
    v.message = "world " + name + " was expected to break but no member reported it broken";
  }
  return v;
}

}  // namespace

std::vector<Verdict> brokenSet(const Scenario& s, const RunRecord& r) {
  const ExpectSpec& e = s.expect;
  const auto broke = brokenWorlds(s, r);
  auto firstOf = [&](const std::string& name) {
    auto it = broke.find(name);
    return it == broke.end() ? nullptr : it->second;
  };
  std::vector<Verdict> out;
  if (e.has_broken) {
    for (const auto& [name, w] : s.worlds) {
      out.push_back(e.broken.count(name) > 0 ? breaks(name, firstOf(name), e.where)
                                             : staysHealthy(name, firstOf(name), e.where));
    }
    return out;  // expect.healthy is judged with the broken set
  }
  for (const auto& name : e.healthy) out.push_back(staysHealthy(name, firstOf(name), e.where));
  return out;
}

}  // namespace mw::harness::checks
