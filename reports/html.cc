// The HTML report: a self-contained page with the verdict table and an SVG throughput timeline per
// world, with fault and break markers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "reports/report.h"
#include "reports/xml.h"

namespace mw::reports {

using json = nlohmann::json;

namespace {

// One world's throughput timeline, measured at its rank-0 member, with fault and break markers.
std::string worldSvg(const json& doc, const std::string& world) {
  const json& run = doc.at("run");
  const json& sc = doc.at("scenario");
  const double duration = std::max(0.5, run.value("elapsed_s", sc.value("duration_s", 1.0)));
  const auto members = sc.at("roles");
  std::string rank0;
  for (auto it = members.begin(); it != members.end(); ++it) {
    const json& ws = it.value().at("worlds");
    if (ws.contains(world) && ws.at(world).get<int>() == 0) rank0 = it.key();
  }
  std::vector<std::pair<double, double>> pts;
  const json series = run.value("series", json::object());
  if (series.contains(world) && series.at(world).contains(rank0)) {
    const json& c = series.at(world).at(rank0);
    for (size_t i = 0; i < c.at("t_s").size(); ++i) {
      double t = c["t_s"][i].get<double>();
      if (t < 0 || t > duration) continue;
      pts.emplace_back(t, c["bytes"][i].get<double>() / 0.1 / 1e6);
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
  for (const auto& f : run.value("faults", json::array())) {
    double t = f.value("sent_s", -1.0);
    if (t < 0) continue;
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                  "stroke-dasharray=\"4 3\"><title>",
                  x(t), x(t), T, H - B);
    o << buf << xmlEscape(f.value("action", std::string()) + " at " + std::to_string(t) + " s")
      << "</title></line>\n";
  }
  for (const auto& e : run.value("events", json::array())) {
    if (e.value("world", std::string()) != world || e.value("kind", std::string()) != "broken")
      continue;
    double t = e.value("t_s", -1.0);
    if (t < 0 || t > duration) continue;
    std::snprintf(buf, sizeof(buf),
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#ff7f0e\"><title>", x(t),
                  T + 8.0);
    o << buf
      << xmlEscape("broken at " + e.value("role", std::string()) + " (" +
                   e.value("cause", std::string()) + "): " + e.value("detail", std::string()))
      << "</title></circle>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::string html(const harness::Report& report) {
  // The timelines and tables draw the numbers as the JSON report has them (times in ms).
  const json doc = harness::toJson(report);
  const json& sc = doc.at("scenario");
  const json& run = doc.at("run");
  const std::string verdict = harness::verdictStatusName(report.verdict());
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    << xmlEscape(sc.value("name", std::string())) << " - mwchaos</title>\n"
    << "<style>body{font-family:sans-serif;margin:2em;max-width:960px}"
       "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:4px 6px;"
       "font-size:13px;text-align:left;vertical-align:top}"
       ".pass{color:#2ca02c}.fail{color:#d62728}.error{color:#9467bd}.skipped{color:#7f7f7f}."
       "inconclusive{color:#ff7f0e}"
       "h2{margin-top:1.5em}code{background:#f3f3f3}</style></head><body>\n";
  o << "<h1>" << xmlEscape(sc.value("name", std::string())) << " <span class=\"" << verdict << "\">"
    << verdict << "</span></h1>\n";
  o << "<p>" << xmlEscape(sc.value("description", std::string())) << "</p>\n";
  o << "<p><code>" << xmlEscape(sc.value("file", std::string())) << "</code>, seed "
    << sc.value("seed", 0ULL) << ", duration " << sc.value("duration_s", 0.0) << " s, outcome "
    << xmlEscape(harness::outcomeName(report.outcome));
  if (!report.why.empty()) o << ": " << xmlEscape(report.why);
  o << "</p>\n<h2>Expectations</h2>\n<table><tr><th>expectation</th><th>verdict</th>"
       "<th>measured</th><th>threshold</th><th>detail</th></tr>\n";
  for (const auto& v : report.verdicts) {
    const char* st = harness::verdictStatusName(v.status);
    o << "<tr><td>" << xmlEscape(v.name) << "</td><td class=\"" << st << "\">" << st << "</td><td>"
      << xmlEscape(v.measured) << "</td><td>" << xmlEscape(v.threshold) << "</td><td>"
      << xmlEscape(v.message) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Throughput per world</h2>\n<p>Each line is the world's throughput at its "
       "rank-0 member per 100 ms window; dashed red lines are faults, orange dots breaks (hover "
       "for details).</p>\n";
  for (auto it = sc.at("worlds").begin(); it != sc.at("worlds").end(); ++it) {
    o << "<h3>" << xmlEscape(it.key()) << " <small>("
      << xmlEscape(it.value().value("backend", std::string())) << ", "
      << it.value().value("size", 0) << " members)</small></h3>\n"
      << worldSvg(doc, it.key());
  }
  o << "<h2>Timeline</h2>\n<table><tr><th>planned</th><th>sent</th><th>acknowledged</th>"
       "<th>fault</th><th>outcome</th><th>scenario line</th></tr>\n";
  for (const auto& f : run.value("faults", json::array())) {
    char times[128];
    std::snprintf(times, sizeof(times), "<td>%.3f s</td><td>%.3f s</td><td>%.3f s</td>",
                  f.value("planned_s", 0.0), f.value("sent_s", -1.0), f.value("acked_s", -1.0));
    std::string outcome = f.value("outcome", std::string());
    if (!f.value("note", std::string()).empty())
      outcome += " (" + f.value("note", std::string()) + ")";
    o << "<tr>" << times << "<td>" << xmlEscape(f.value("action", std::string())) << "</td><td>"
      << xmlEscape(outcome) << "</td><td>" << xmlEscape(f.value("where", std::string()))
      << "</td></tr>\n";
  }
  o << "</table>\n<h2>World events</h2>\n<table><tr><th>time</th><th>role</th><th>world</th>"
       "<th>event</th><th>cause</th><th>detail</th></tr>\n";
  for (const auto& e : run.value("events", json::array())) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.3f s", e.value("t_s", 0.0));
    o << "<tr><td>" << t << "</td><td>" << xmlEscape(e.value("role", std::string())) << "</td><td>"
      << xmlEscape(e.value("world", std::string())) << " (gen " << e.value("generation", 0ULL)
      << ")</td><td>" << xmlEscape(e.value("kind", std::string())) << "</td><td>"
      << xmlEscape(e.value("cause", std::string())) << "</td><td>"
      << xmlEscape(e.value("detail", std::string())) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Workers</h2>\n<table><tr><th>role</th><th>pid</th><th>starts</th>"
       "<th>exit</th></tr>\n";
  for (const auto& w : run.value("workers", json::array())) {
    o << "<tr><td>" << xmlEscape(w.value("role", std::string())) << "</td><td>" << w.value("pid", 0)
      << "</td><td>" << w.value("starts", 0) << "</td><td>"
      << xmlEscape(w.value("exit", std::string())) << (w.value("hung", false) ? " (hung)" : "")
      << "</td></tr>\n";
  }
  o << "</table>\n<p>harness CPU " << run.value("harness_cpu_s", 0.0) << " s, workers CPU "
    << run.value("workers_cpu_s", 0.0) << " s, startup " << run.value("startup_s", 0.0)
    << " s.</p>\n</body></html>\n";
  return o.str();
}

}  // namespace mw::reports
