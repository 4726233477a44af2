// The report as a type (model/report.h): its outcome, its verdict, and judging it again.
#include "model/report.h"

#include "chaos/enum_names.h"

namespace mw::harness {

namespace {

constexpr const char* kOutcomeNames[] = {"completed", "interrupted", "unavailable",
                                         "harness_error"};

}  // namespace

const char* outcomeName(Outcome o) { return enumName(kOutcomeNames, o, "harness_error"); }

std::optional<Outcome> parseOutcome(std::string_view name) {
  return enumFromName<Outcome>(kOutcomeNames, name);
}

VerdictStatus reportVerdict(Outcome outcome, const std::vector<Verdict>& verdicts) {
  switch (outcome) {
    case Outcome::kUnavailable:
      return VerdictStatus::kSkipped;
    case Outcome::kInterrupted:
    case Outcome::kHarnessError:
      return VerdictStatus::kError;
    case Outcome::kCompleted:
      break;
  }
  return overall(verdicts);
}

std::vector<PlannedFault> plannedTimeline(const Scenario& s) {
  std::vector<PlannedFault> out;
  for (const auto& a : s.timeline) {
    out.push_back({a.at.count(), a.describe(), a.kind(), a.role(), a.where});
  }
  return out;
}

Report makeReport(const Scenario& s, const RunRecord& r, std::vector<Verdict> verdicts,
                  Outcome outcome, std::string why, nlohmann::json environment) {
  Report rep;
  rep.scenario = s;
  rep.timeline = plannedTimeline(s);
  rep.run = r;
  rep.verdicts = std::move(verdicts);
  rep.outcome = outcome;
  rep.why = std::move(why);
  rep.environment = std::move(environment);
  return rep;
}

Report rejudge(Report saved) {
  std::vector<Verdict> verdicts;
  if (saved.outcome == Outcome::kCompleted) {
    verdicts = evaluate(saved.scenario, saved.run);
    // A Lua hook cannot run again without its scenario: keep its saved verdict.
    for (auto& v : saved.verdicts) {
      if (v.name == kCheckHookVerdict) verdicts.push_back(std::move(v));
    }
  }
  saved.verdicts = std::move(verdicts);
  return saved;
}

}  // namespace mw::harness
