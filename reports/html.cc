// The HTML report: a self-contained page with the verdict table and an SVG throughput timeline per
// world, with fault and break markers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "reports/report.h"
#include "reports/xml.h"

namespace mw::reports {

using harness::EventKind;
using harness::Report;
using harness::round3;
using harness::RunRecord;
using harness::Scenario;
using harness::verdictStatusName;

namespace {

std::string causeText(Cause c) { return c == Cause::kNone ? "" : causeName(c); }

// One world's throughput timeline, measured at its rank-0 member, with fault and break markers.
std::string worldSvg(const Report& rep, const std::string& world) {
  const RunRecord& run = rep.run;
  const double duration = std::max(0.5, round3(run.elapsed));
  std::string rank0;
  for (const auto& [name, role] : rep.scenario.roles) {
    auto it = role.ranks.find(world);
    if (it != role.ranks.end() && it->second == 0) rank0 = name;
  }
  std::vector<std::pair<double, double>> pts;
  auto series = run.windows.find(world);
  if (series != run.windows.end() && series->second.count(rank0)) {
    for (const auto& w : series->second.at(rank0)) {
      const double t = round3(w.t);
      if (t < 0 || t > duration) continue;
      pts.emplace_back(t, w.bytes / 0.1 / 1e6);
    }
  }
  double ymax = 1;
  for (const auto& p : pts) ymax = std::max(ymax, p.second);
  ymax *= 1.1;
  const double W = 900, H = 180, L = 60, R = 10, T = 10, B = 30;
  auto x = [&](double t) { return L + (W - L - R) * t / duration; };
  auto y = [&](double v) { return T + (H - T - B) * (1 - v / ymax); };
  std::ostringstream o;
  char buf[256];
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << " " << H << "\" width=\""
    << W << "\" height=\"" << H << "\" role=\"img\" aria-label=\"throughput of " << xmlEscape(world)
    << "\">\n";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << (W - L - R) << "\" height=\""
    << (H - T - B) << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = ymax * i / 4;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n",
                  L - 4, y(v) + 3, v);
    o << buf;
  }
  for (int i = 0; i <= 10; ++i) {
    double t = duration * i / 10;
    std::snprintf(
        buf, sizeof(buf),
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.1fs</text>\n", x(t),
        H - B + 14, t);
    o << buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<text x=\"12\" y=\"%.1f\" font-size=\"10\" transform=\"rotate(-90 12 %.1f)\" "
                "text-anchor=\"middle\">MB/s at %s</text>\n",
                H / 2, H / 2, xmlEscape(rank0).c_str());
  o << buf;
  if (!pts.empty()) {
    o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (const auto& p : pts) {
      std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", x(p.first), y(p.second));
      o << buf;
    }
    o << "\"/>\n";
  }
  for (const auto& f : run.faults) {
    const double t = round3(f.sent);
    if (t < 0) continue;
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                  "stroke-dasharray=\"4 3\"><title>",
                  x(t), x(t), T, H - B);
    o << buf << xmlEscape(f.action + " at " + std::to_string(t) + " s") << "</title></line>\n";
  }
  for (const auto& e : run.events) {
    if (e.world != world || e.kind != EventKind::kBroken) continue;
    const double t = round3(e.t);
    if (t < 0 || t > duration) continue;
    std::snprintf(buf, sizeof(buf),
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#ff7f0e\"><title>", x(t),
                  T + 8.0);
    o << buf << xmlEscape("broken at " + e.role + " (" + causeText(e.cause) + "): " + e.detail)
      << "</title></circle>\n";
  }
  for (const auto& v : run.violations) {
    if (v.world != world) continue;
    const double t = round3(v.t);
    if (t < 0 || t > duration) continue;
    std::snprintf(buf, sizeof(buf),
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"#d62728\"><title>",
                  x(t) - 3.5, T + 16.0);
    o << buf
      << xmlEscape("wrong data at " + v.role + " (" + v.op + " seq " + std::to_string(v.seq) +
                   "): " + v.detail)
      << "</title></rect>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::string html(const Report& report) {
  const Scenario& sc = report.scenario;
  const RunRecord& run = report.run;
  const std::string verdict = verdictStatusName(report.verdict());
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    << xmlEscape(sc.name) << " - mwchaos</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:960px}"
       "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:4px 6px;"
       "font-size:13px;text-align:left;vertical-align:top}"
       ".pass{color:#2ca02c}.fail{color:#d62728}.error{color:#9467bd}.skipped{color:#7f7f7f}."
       "inconclusive{color:#ff7f0e}"
       "h2{margin-top:1.5em}code{background:#f3f3f3}</style></head><body>\n";
  o << "<h1>" << xmlEscape(sc.name) << " <span class=\"" << verdict << "\">" << verdict
    << "</span></h1>\n";
  o << "<p>" << xmlEscape(sc.description) << "</p>\n";
  o << "<p><code>" << xmlEscape(sc.file) << "</code>, seed " << sc.seed << ", duration "
    << static_cast<double>(sc.duration.count()) / 1000.0 << " s, outcome "
    << xmlEscape(harness::outcomeName(report.outcome));
  if (!report.why.empty()) o << ": " << xmlEscape(report.why);
  o << "</p>\n<h2>Expectations</h2>\n<table><tr><th>expectation</th><th>verdict</th>"
       "<th>measured</th><th>threshold</th><th>detail</th></tr>\n";
  for (const auto& v : report.verdicts) {
    const char* st = verdictStatusName(v.status);
    o << "<tr><td>" << xmlEscape(v.name) << "</td><td class=\"" << st << "\">" << st << "</td><td>"
      << xmlEscape(v.measured) << "</td><td>" << xmlEscape(v.threshold) << "</td><td>"
      << xmlEscape(v.message) << "</td></tr>\n";
  }
  // (A report from before the data checks, read back, is rendered as it was.)
  const bool checks = sc.expect.checks_recorded;
  o << "</table>\n<h2>Throughput per world</h2>\n<p>Each line is the world's throughput at its "
       "rank-0 member per 100 ms window; dashed red lines are faults, orange dots breaks"
    << (checks ? ", red squares operations that received wrong data" : "")
    << " (hover for details).</p>\n";
  for (const auto& [name, w] : sc.worlds) {
    o << "<h3>" << xmlEscape(name) << " <small>(" << xmlEscape(backendName(w.backend)) << ", "
      << w.size << " members)</small></h3>\n"
      << worldSvg(report, name);
  }
  o << "<h2>Timeline</h2>\n<table><tr><th>planned</th><th>sent</th><th>acknowledged</th>"
       "<th>fault</th><th>outcome</th><th>scenario line</th></tr>\n";
  for (const auto& f : run.faults) {
    char times[128];
    std::snprintf(times, sizeof(times), "<td>%.3f s</td><td>%.3f s</td><td>%.3f s</td>",
                  round3(f.planned), round3(f.sent), round3(f.acked));
    std::string outcome = f.outcomeText();
    if (!f.note.empty()) outcome += " (" + f.note + ")";
    o << "<tr>" << times << "<td>" << xmlEscape(f.action) << "</td><td>" << xmlEscape(outcome)
      << "</td><td>" << xmlEscape(f.where) << "</td></tr>\n";
  }
  o << "</table>\n<h2>World events</h2>\n<table><tr><th>time</th><th>role</th><th>world</th>"
       "<th>event</th><th>cause</th><th>detail</th></tr>\n";
  for (const auto& e : run.events) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.3f s", round3(e.t));
    o << "<tr><td>" << t << "</td><td>" << xmlEscape(e.role) << "</td><td>" << xmlEscape(e.world)
      << " (gen " << e.generation << ")</td><td>" << xmlEscape(eventKindText(e.kind)) << "</td><td>"
      << xmlEscape(causeText(e.cause)) << "</td><td>" << xmlEscape(e.detail) << "</td></tr>\n";
  }
  if (checks) {  // each table below is closed by the next one's "</table>"
    o << "</table>\n<h2>Data checked</h2>\n<p>What each role received of the built-in traffic "
         "and checked, every element (<code>data_intact</code>); each operation that completed "
         "with wrong content is listed below (up to 100 per traffic loop).</p>\n<table><tr>"
         "<th>world</th><th>role</th><th>operations right</th><th>bytes right</th>"
         "<th>violations</th></tr>\n";
    for (const auto& [world, roles] : run.checked) {
      for (const auto& [role, c] : roles) {
        char nums[160];
        std::snprintf(nums, sizeof(nums), "<td>%.0f</td><td>%.0f</td><td>%.0f</td>", c.ops, c.bytes,
                      c.violations);
        o << "<tr><td>" << xmlEscape(world) << "</td><td>" << xmlEscape(role) << "</td>" << nums
          << "</tr>\n";
      }
    }
    if (!run.violations.empty()) {
      o << "</table>\n<h3>Violations</h3>\n<table><tr><th>time</th><th>role</th><th>world</th>"
           "<th>operation</th><th>first wrong element</th><th>detail</th></tr>\n";
      for (const auto& v : run.violations) {
        char t[32];
        std::snprintf(t, sizeof(t), "%.3f s", round3(v.t));
        char el[160];
        std::snprintf(el, sizeof(el), "%llu: %.17g, not %.17g (%llu wrong)",
                      static_cast<unsigned long long>(v.offset), v.found, v.expected,
                      static_cast<unsigned long long>(v.wrong));
        o << "<tr><td>" << t << "</td><td>" << xmlEscape(v.role) << "</td><td>"
          << xmlEscape(v.world) << " (gen " << v.generation << ")</td><td>" << xmlEscape(v.op)
          << " seq " << v.seq << "</td><td>" << el << "</td><td>" << xmlEscape(v.detail)
          << "</td></tr>\n";
      }
    }
  }
  o << "</table>\n<h2>Workers</h2>\n<table><tr><th>role</th><th>pid</th><th>starts</th>"
       "<th>exit</th></tr>\n";
  for (const auto& w : run.workers) {
    o << "<tr><td>" << xmlEscape(w.role) << "</td><td>" << w.pid << "</td><td>" << w.starts
      << "</td><td>" << xmlEscape(w.exit) << (w.hung ? " (hung)" : "") << "</td></tr>\n";
  }
  o << "</table>\n<p>harness CPU " << round3(run.harness_cpu) << " s, workers CPU "
    << round3(run.workers_cpu) << " s, startup " << round3(run.startup)
    << " s.</p>\n</body></html>\n";
  return o.str();
}

}  // namespace mw::reports
