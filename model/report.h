// A scenario run's report as a type, and its one JSON codec (schema multiworld-chaos-report/1):
// what `mwchaos run` writes and `mwchaos report` reads back and judges again. The writers of
// reports/ (JUnit, HTML, GitHub) read the typed Report, never the JSON.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/expectations.h"
#include "model/run.h"
#include "model/scenario.h"

namespace mw::harness {

inline constexpr const char* kReportSchema = "multiworld-chaos-report/1";

// `v` to 3 decimal places: times and rates as the report's JSON, JUnit and HTML give them (to the
// millisecond), so that a page drawn from a run and one drawn from its report read back agree.
// Pure.
inline double round3(double v) { return std::round(v * 1e3) / 1e3; }
// `v` to 6 decimal places: a verdict's evidence as the JSON report gives it. Pure.
inline double round6(double v) { return std::round(v * 1e6) / 1e6; }

// How a run ended. completed: it ran and was judged; interrupted: a signal stopped it;
// unavailable: this machine cannot run it (the report's `why` says what is missing);
// harness_error: the harness failed (`why` says how).
enum class Outcome : uint8_t { kCompleted, kInterrupted, kUnavailable, kHarnessError };

// "completed", "interrupted", "unavailable", "harness_error". Pure.
const char* outcomeName(Outcome o);
// The outcome outcomeName printed as `name`, or nullopt. Pure.
std::optional<Outcome> parseOutcome(std::string_view name);

// The verdict of a whole report, the one place it is decided: skipped when the machine could not
// run it, error when the run was interrupted or the harness failed, else overall(verdicts).
VerdictStatus reportVerdict(Outcome outcome, const std::vector<Verdict>& verdicts);

// A planned fault as the report states it (the scenario's timeline, described).
struct PlannedFault {
  long long at_ms = 0;
  std::string action;  // ActionSpec::describe()
  FaultKind kind = FaultKind::kKill;
  std::string role;
  std::string where;
};

// The planned timeline of `s` as a report states it. Pure.
std::vector<PlannedFault> plannedTimeline(const Scenario& s);

// An inconclusive run of the scenario that was run again (mwchaos run --rerun-inconclusive).
struct EarlierRun {
  VerdictStatus verdict = VerdictStatus::kInconclusive;
  std::vector<std::string> inconclusive;  // "<verdict name>: <message>" per inconclusive verdict
};

struct Report {
  // The scenario as far as a report carries it: a scenario read back from a report has no
  // timeline (see `timeline`), no expect.healthy, no `where`, and no hosts, environment or
  // nemesis spec beyond `nemesis.enabled`.
  Scenario scenario;
  std::vector<PlannedFault> timeline;  // the planned timeline, as the report states it
  RunRecord run;
  std::vector<Verdict> verdicts;  // the checkers' (evaluate) and the Lua check hook's
  Outcome outcome = Outcome::kCompleted;
  std::string why;  // why a run did not complete ("" when it did)
  nlohmann::json environment = nlohmann::json::object();  // the machine and build, as found
  // The inconclusive runs before this one; nullopt: the report does not say ("reruns" and
  // "earlier_runs" are written only when it does).
  std::optional<std::vector<EarlierRun>> earlier_runs;

  // reportVerdict(outcome, verdicts).
  VerdictStatus verdict() const { return reportVerdict(outcome, verdicts); }
};

// A report of a run of `s`, its timeline planned from `s`. Pure.
Report makeReport(const Scenario& s, const RunRecord& r, std::vector<Verdict> verdicts,
                  Outcome outcome, std::string why, nlohmann::json environment);

// `saved` judged again by the checkers (evaluate) on its scenario and run: a completed report's
// verdicts become evaluate()'s plus its saved Lua check hook verdict (the hook cannot run without
// its scenario file); a report of a run that did not complete keeps none. Everything else is
// kept. Pure.
Report rejudge(Report saved);

// The report as JSON: the schema's document, keys in order. Pure.
nlohmann::json toJson(const Report& report);

// Reads a report back. Throws std::runtime_error naming the field when `doc` is not a report of
// this schema. toJson(reportFromJson(doc)) == doc for any report toJson wrote.
Report reportFromJson(const nlohmann::json& doc);

// The run section alone (also what a scenario's Lua check(run) hook receives). Pure.
nlohmann::json runJson(const Scenario& s, const RunRecord& r);

// The run section read back (the record's times are rounded to the millisecond there, CPU
// seconds and the history's times to the microsecond). Throws std::runtime_error naming the
// field when it is not one.
RunRecord runFromJson(const nlohmann::json& run);

}  // namespace mw::harness
