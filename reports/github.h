// GitHub Actions output of a run (mwchaos run --format github): workflow commands that annotate
// the scenario file at the line of each failed expectation, and a markdown verdict table for the
// job summary ($GITHUB_STEP_SUMMARY). docs/ci.md shows the workflow.
#pragma once

#include <string>
#include <vector>

#include "model/report.h"

namespace mw::reports {

// One "::error file=F,line=L,title=T::message" line per expectation of `report` that failed or
// could not be judged (status fail or error), one "::warning ..." line per inconclusive one, and
// one error for a run that did not complete; empty when it passed. Values are escaped as the
// workflow-command syntax requires.
std::string githubAnnotations(const harness::Report& report);

// A markdown section: one row per scenario (verdict, name, file, counts) and, under it, the
// expectations that did not pass, with their measured values and thresholds.
std::string githubSummary(const std::vector<harness::Report>& reports);

// Appends githubSummary(reports) to the file $GITHUB_STEP_SUMMARY names. True when written;
// false, with `*error` saying why, when the variable is unset or the file cannot be appended to.
bool appendGithubSummary(const std::vector<harness::Report>& reports, std::string* error);

// Writes all of `text` to `fd`, through short writes and EINTR. False (errno set) on failure.
bool writeAll(int fd, const std::string& text);

}  // namespace mw::reports
