#include "model/expectations.h"

#include <iterator>

#include "chaos/enum_names.h"
#include "model/checkers/checkers.h"

namespace mw::harness {

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
  for (const checks::Checker check : checks::kCheckers) {
    std::vector<Verdict> v = check(s, r);
    out.insert(out.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
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
