// expect.data_intact: what the built-in traffic's receivers got was what was sent, every element
// of every operation that completed (mw_worker's checks, chaos/traffic_check.h).
#include <algorithm>
#include <cmath>

#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {
namespace {

// "1.5 MiB", "12.0 GiB": a byte count for people.
std::string bytesText(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt("%.1f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt("%.1f MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt("%.1f KiB", b / 1024.0);
  return fmt("%.0f bytes", b);
}

std::string valueText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt("%.17g", v);
}

}  // namespace

std::vector<Verdict> dataIntact(const Scenario& s, const RunRecord& r) {
  if (!s.expect.checks_recorded) return {};  // a report from before the checks
  std::vector<std::string> worlds;  // those the built-in traffic runs in, in the scenario's order
  for (const auto& t : s.traffic) {
    for (const auto& w : t.worlds) {
      if (std::find(worlds.begin(), worlds.end(), w) == worlds.end()) worlds.push_back(w);
    }
  }
  std::vector<Verdict> out;
  for (const auto& name : worlds) {
    Verdict v{"world " + name + "'s data arrives intact",
              name,
              VerdictStatus::kPass,
              "",
              "0 violations",
              "",
              s.expect.where,
              {}};
    if (!s.expect.data_intact) {
      v.status = VerdictStatus::kSkipped;
      v.message = "turned off: " + s.expect.data_intact_off;
      out.push_back(v);
      continue;
    }
    CheckedRec sum;
    std::string per_role;
    if (auto it = r.checked.find(name); it != r.checked.end()) {
      for (const auto& [role, c] : it->second) {
        sum.ops += c.ops;
        sum.bytes += c.bytes;
        sum.violations += c.violations;
        // (A member that only sends checks nothing: its lines count zeros.)
        if (c.ops > 0 || c.violations > 0) {
          per_role += (per_role.empty() ? "" : ", ") + role + " " + fmt("%.0f", c.ops);
        }
      }
    }
    std::vector<const ViolationRec*> found;
    for (const auto& x : r.violations) {
      if (x.world == name) found.push_back(&x);
    }
    // Violations past the lines a worker writes are counted in its totals only.
    const double n = std::max(sum.violations, static_cast<double>(found.size()));
    v.evidence = {{"ops", sum.ops}, {"bytes", sum.bytes}, {"violations", n}};
    v.measured = fmt("%.0f violations", n);
    const std::string checked = fmt("%.0f operations", sum.ops) + " (" + bytesText(sum.bytes) +
                                ") received and checked" +
                                (per_role.empty() ? "" : " (" + per_role + ")");
    if (n == 0 && sum.ops == 0) {
      // A pass would say the data arrived intact where none arrived to be looked at.
      v.status = VerdictStatus::kSkipped;
      v.message =
          "nothing to judge: no operation of the built-in traffic completed at a receiver of this "
          "world (0 operations checked)";
    } else if (n == 0) {
      v.message = checked + ", every element right";
    } else {
      v.status = VerdictStatus::kFail;
      if (found.empty()) {
        v.message = fmt("%.0f operations", n) + " completed with wrong content; " + checked;
      } else {
        const ViolationRec& x = *found.front();
        v.message = "role '" + x.role + "', " + x.op + " seq " + std::to_string(x.seq) +
                    " of generation " + std::to_string(x.generation) + " at " + fmt("%.3f s", x.t) +
                    ": " + x.detail + "; element " + std::to_string(x.offset) + " is " +
                    valueText(x.found) + ", not " + valueText(x.expected) +
                    (n > 1 ? fmt(" (and %.0f more operations with wrong content)", n - 1) : "") +
                    "; " + checked + " right";
      }
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace mw::harness::checks
