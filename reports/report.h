// Reports of a scenario run: a versioned JSON document (the source of truth; `mwchaos report`
// reads it back), JUnit XML for CI (one testcase per expectation) and a self-contained HTML page
// with an SVG throughput timeline per world, fault markers and the verdict table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/expectations.h"
#include "model/run.h"
#include "model/scenario.h"

namespace mw::reports {

inline constexpr const char* kSchema = "multiworld-chaos-report/1";

// The run section alone (also what a scenario's Lua check(run) hook receives).
nlohmann::json runJson(const harness::Scenario& s, const harness::RunRecord& r);

// The whole report. `outcome`: completed | interrupted | unavailable | harness_error.
nlohmann::json reportJson(const harness::Scenario& s, const harness::RunRecord& r,
                          const std::vector<harness::Verdict>& verdicts, const std::string& outcome,
                          const std::string& why, const nlohmann::json& environment);

// Reading a report back. Throws std::runtime_error naming the field when it is not a report of
// this schema.
harness::Scenario scenarioFromJson(const nlohmann::json& report);
harness::RunRecord runFromJson(const nlohmann::json& report);
std::vector<harness::Verdict> verdictsFromJson(const nlohmann::json& report);

// The report's verdict: pass | fail | inconclusive (a throughput verdict could not tell, see
// model/throughput.h) | skipped (the machine could not run it) | error.
std::string verdictOf(const nlohmann::json& report);

// One <testsuite> per report, one <testcase> per expectation: <failure> for a broken expectation,
// <error> for a harness problem, <skipped> for what the machine cannot run and for an
// inconclusive expectation (its message begins "inconclusive: ").
std::string junitXml(const std::vector<nlohmann::json>& reports);

std::string html(const nlohmann::json& report);

}  // namespace mw::reports
