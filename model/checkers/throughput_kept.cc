// Survivors' throughput before and after the first fault (model/throughput.h measures and judges
// the ratio; this file names the verdict and writes its numbers).
#include <algorithm>

#include "model/checkers/checkers.h"
#include "model/checkers/common.h"

namespace mw::harness::checks {

namespace {

// The verdict's message: both rates, the ratio with its interval, the control and the CPU.
// `unit`: what one of `per_s` is in the series' values.
std::string describe(const ThroughputEvidence& ev, double unit, const std::string& per_s,
                     const std::string& why_inconclusive) {
  const Rate &before = ev.before, &after = ev.after;
  return "before: " + fmt("%.1f", before.mean / unit) + " " + per_s + " (median " +
         fmt("%.1f", before.median / unit) + ", " + std::to_string(before.windows) +
         " windows); after: " + fmt("%.1f", after.mean / unit) + " " + per_s + " (median " +
         fmt("%.1f", after.median / unit) + ", min " + fmt("%.1f", after.min / unit) + ", " +
         std::to_string(after.windows) + " windows); ratio " + fmt("%.3f", ev.ratio) + " [" +
         fmt("%.3f", ev.lo) + ", " + fmt("%.3f", ev.hi) + "]; control " + fmt("%.3f", ev.control) +
         "; CPU share of the survivors " + fmt("%.2f", ev.cpu_before.share) + " -> " +
         fmt("%.2f", ev.cpu_after.share) + ", outside load " + fmt("%.2f", ev.cpu_before.outside) +
         " -> " + fmt("%.2f", ev.cpu_after.outside) + " CPUs" +
         (why_inconclusive.empty() ? "" : "; inconclusive: " + why_inconclusive);
}

std::map<std::string, double> evidenceOf(const ThroughputEvidence& ev) {
  return {{"ratio", ev.ratio},
          {"ratio_lo", ev.lo},
          {"ratio_hi", ev.hi},
          {"control", ev.control},
          {"control_lo", ev.control_lo},
          {"control_hi", ev.control_hi},
          {"before_bytes_per_s", ev.before.mean},
          {"after_bytes_per_s", ev.after.mean},
          {"cpu_share_before", ev.cpu_before.share},
          {"cpu_share_after", ev.cpu_after.share},
          {"outside_cpus_before", ev.cpu_before.outside},
          {"outside_cpus_after", ev.cpu_after.outside}};
}

}  // namespace

std::vector<Verdict> throughputKept(const Scenario& s, const RunRecord& r) {
  const double ff = firstFault(r);
  double last_fault = ff;
  for (const auto& f : r.faults) {
    if (f.delivered()) last_fault = std::max(last_fault, f.sent);
  }
  const double warm = static_cast<double>(s.warmup.count()) / 1000.0;
  std::vector<Verdict> out;
  for (const auto& t : s.expect.throughput) {
    // A world's bytes at its rank-0 role, or a program role's own metric: bytes per second in
    // MB/s, a program's metric per second as it is.
    const bool app = !t.metric.empty();
    const std::string what = app ? "role " + t.role + "'s " + t.metric : "world " + t.world;
    Verdict v;
    v.world = t.world;
    v.where = t.where;
    v.name = what + " keeps >= " + fmt("%.2f", t.ratio) + " of its throughput (" + t.window +
             " the fault)";
    v.threshold = ">= " + fmt("%.2f", t.ratio);
    v.status = VerdictStatus::kError;
    if (ff < 0) {
      v.message = "no fault was delivered, so there is no before and after";
      out.push_back(v);
      continue;
    }
    const double to = t.window == "during" ? std::max(last_fault, ff + 0.2) : r.elapsed;
    const ThroughputEvidence ev =
        measureThroughput(s, r, app ? appSeries(t.metric) : t.world, warm, ff, ff, to, t.role);
    if (ev.before.windows == 0 || ev.before.mean <= 0) {
      v.message = (app ? "role " + t.role + " reported no " + t.metric
                       : "no traffic measured in world " + t.world) +
                  " between the warm-up (" + fmt("%.2f s", warm) + ") and the first fault (" +
                  fmt("%.2f s", ff) + ")";
      out.push_back(v);
      continue;
    }
    const ThroughputJudgement j = judgeThroughput(ev, t.ratio);
    v.measured = fmt("%.3f", ev.ratio);
    v.status = j.status;
    v.message = describe(ev, app ? 1.0 : 1e6, app ? t.metric + "/s" : "MB/s", j.why);
    v.evidence = evidenceOf(ev);
    out.push_back(v);
  }
  return out;
}

}  // namespace mw::harness::checks
