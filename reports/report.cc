// JUnit XML of reports (reports/report.h).
#include "reports/report.h"

#include <cmath>
#include <sstream>

#include "reports/xml.h"

namespace mw::reports {

using harness::Outcome;
using harness::outcomeName;
using harness::Report;
using harness::round3;
using harness::VerdictStatus;

std::string junitXml(const std::vector<Report>& reports) {
  std::ostringstream o;
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  std::ostringstream suites;
  for (const auto& rep : reports) {
    const std::string& name = rep.scenario.name;
    const std::string& file = rep.scenario.file;
    int t = 0, f = 0, e = 0, s = 0;
    std::ostringstream cases;
    const double time = round3(rep.run.elapsed);  // as the JSON has it
    auto testcase = [&](const std::string& case_name, VerdictStatus status,
                        const std::string& message, const std::string& body) {
      ++t;
      cases << "    <testcase classname=\"" << xmlEscape("mwchaos." + name) << "\" name=\""
            << xmlEscape(case_name) << "\" file=\"" << xmlEscape(file) << "\">\n";
      switch (status) {
        case VerdictStatus::kFail:
          ++f;
          cases << "      <failure message=\"" << xmlEscape(message) << "\" type=\"expectation\">"
                << xmlEscape(body) << "</failure>\n";
          break;
        case VerdictStatus::kError:
          ++e;
          cases << "      <error message=\"" << xmlEscape(message) << "\" type=\"harness\">"
                << xmlEscape(body) << "</error>\n";
          break;
        case VerdictStatus::kSkipped:
          ++s;
          cases << "      <skipped message=\"" << xmlEscape(message) << "\"/>\n";
          break;
        case VerdictStatus::kInconclusive:
          // Neither passed nor failed: skipped, so that a JUnit gate does not go red on noise,
          // with the reason (mwchaos itself exits 4; docs/ci.md).
          ++s;
          cases << "      <skipped message=\"" << xmlEscape("inconclusive: " + message) << "\"/>\n";
          break;
        case VerdictStatus::kPass:
          break;
      }
      cases << "    </testcase>\n";
    };
    const std::string& why = rep.why;
    switch (rep.outcome) {
      case Outcome::kUnavailable:
        testcase("scenario can run on this machine", VerdictStatus::kSkipped, why, why);
        break;
      case Outcome::kHarnessError:
      case Outcome::kInterrupted:
        testcase("the harness ran the scenario", VerdictStatus::kError,
                 std::string(outcomeName(rep.outcome)) + ": " + why, why);
        break;
      case Outcome::kCompleted:
        break;
    }
    for (const auto& v : rep.verdicts) {
      const std::string body = v.message + "\nmeasured: " + v.measured +
                               "\nthreshold: " + v.threshold + "\nat: " + v.where;
      testcase(v.name, v.status, v.message, body);
    }
    suites << "  <testsuite name=\"" << xmlEscape(name) << "\" tests=\"" << t << "\" failures=\""
           << f << "\" errors=\"" << e << "\" skipped=\"" << s << "\" time=\"" << time << "\">\n"
           << cases.str() << "  </testsuite>\n";
    tests += t, failures += f, errors += e, skipped += s;
  }
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mwchaos\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
    << "\">\n"
    << suites.str() << "</testsuites>\n";
  return o.str();
}

}  // namespace mw::reports
