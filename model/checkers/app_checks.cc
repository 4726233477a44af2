// expect.app_checks: no check a program role reported of its own answers (mw::reportCheck,
// multiworld_native.report_check) failed.
#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

std::vector<Verdict> appChecks(const Scenario& s, const RunRecord& r) {
  if (!s.expect.app_checks || !s.expect.checks_recorded) return {};
  Verdict v{"the programs' own checks hold",
            "",
            VerdictStatus::kPass,
            "",
            "0 failed",
            "",
            s.expect.where,
            {}};
  double passed = 0, failed = 0;
  std::string counts, failures;
  for (const auto& [role, checks] : r.app_checks) {
    for (const auto& [name, c] : checks) {
      passed += c.passed;
      failed += c.failed;
      counts += (counts.empty() ? "" : ", ") + role + " " + name + " " + fmt("%.0f", c.passed) +
                "/" + fmt("%.0f", c.passed + c.failed);
      if (c.failed > 0) {
        failures += (failures.empty() ? "" : "; ") + fmt("%.0f", c.failed) + " of role '" + role +
                    "' check '" + name + "' failed, the first at " +
                    fmt("%.3f s", c.first_failure_t) + ": " + c.first_failure;
      }
    }
  }
  v.evidence = {{"passed", passed}, {"failed", failed}};
  v.measured = fmt("%.0f failed", failed);
  if (passed + failed == 0) {
    v.status = VerdictStatus::kFail;
    v.message =
        "no program role reported a check (mw::reportCheck, "
        "multiworld_native.report_check): nothing was checked";
  } else if (failed > 0) {
    v.status = VerdictStatus::kFail;
    v.message = failures + " (passed/reported: " + counts + ")";
  } else {
    v.message = "every check held (passed/reported: " + counts + ")";
  }
  return {v};
}

}  // namespace mw::harness::checks
