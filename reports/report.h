// Report writers: JUnit XML for CI (one testcase per expectation) and a self-contained HTML page
// with an SVG throughput timeline per world, fault markers and the verdict table. The report
// itself, and its JSON, are model/report.h's.
#pragma once

#include <string>
#include <vector>

#include "model/report.h"

namespace mw::reports {

// One <testsuite> per report, one <testcase> per expectation: <failure> for a broken expectation,
// <error> for a harness problem, <skipped> for what the machine cannot run and for an
// inconclusive expectation (its message begins "inconclusive: "). Pure.
std::string junitXml(const std::vector<harness::Report>& reports);

// The HTML page of `report`. Pure.
std::string html(const harness::Report& report);

}  // namespace mw::reports
