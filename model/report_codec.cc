// The report's JSON encoder (model/report.h): the document, its scenario section and its
// verdicts; the run section is run_codec.cc's, reading back report_decode.cc's.
#include <cmath>
#include <stdexcept>

#include "model/json_fields.h"
#include "model/report.h"

namespace mw::harness {

using json = nlohmann::json;

namespace {

json expectJson(const ExpectSpec& e) {
  json ex;
  if (e.has_broken) ex["broken"] = e.broken;
  // Only when set: a report of a scenario without it reads as it did before the field was written.
  if (!e.healthy.empty()) ex["healthy"] = e.healthy;
  if (e.detected_within) ex["detected_within_ms"] = e.detected_within->count();
  for (const auto& [w, v] : e.detected_within_world) ex["detected_within_world_ms"][w] = v.count();
  for (const auto& t : e.throughput) {
    ex["throughput"].push_back({{"world", t.world},
                                {"metric", t.metric},
                                {"role", t.role},
                                {"ratio", t.ratio},
                                {"window", t.window},
                                {"where", t.where}});
  }
  if (e.replacement_within) ex["replacement_within_ms"] = e.replacement_within->count();
  ex["no_hang"] = e.no_hang;
  ex["no_orphans"] = e.no_orphans;
  if (e.checks_recorded) {
    ex["data_intact"] = e.data_intact;
    if (!e.data_intact) ex["data_intact_off"] = e.data_intact_off;
    ex["data_intact_every_element"] = e.data_intact_every_element;
    ex["app_checks"] = e.app_checks;
  }
  ex["has_check"] = e.has_check;
  ex["where"] = e.where;
  return ex;
}

json scenarioJson(const Scenario& s, const std::vector<PlannedFault>& timeline) {
  json sc;
  sc["name"] = s.name;
  sc["file"] = s.file;
  sc["description"] = s.description;
  sc["duration_s"] = static_cast<double>(s.duration.count()) / 1000.0;
  sc["warmup_s"] = static_cast<double>(s.warmup.count()) / 1000.0;
  sc["seed"] = s.seed;
  sc["nemesis"] = s.nemesis.enabled;
  for (const auto& [name, w] : s.worlds) {
    sc["worlds"][name] = {{"backend", backendName(w.backend)},
                          {"size", w.size},
                          {"heartbeat_ms", w.heartbeat.count()},
                          {"op_timeout_ms", w.op_timeout.count()},
                          {"rejoin", w.rejoin},
                          {"start", w.start},
                          {"where", w.where}};
  }
  for (const auto& [name, role] : s.roles) {
    sc["roles"][name] = {{"worlds", role.ranks}, {"device", role.device}};
    if (role.isProgram()) sc["roles"][name]["program"] = role.program;  // as written
    if (role.stop_within != RoleSpec::kDefaultStopWithin) {
      sc["roles"][name]["stop_within_ms"] = role.stop_within.count();
    }
  }
  sc["traffic"] = json::array();
  for (const auto& t : s.traffic) {
    sc["traffic"].push_back({{"pattern", chaos::trafficPatternName(t.pattern)},
                             {"worlds", t.worlds},
                             {"bytes", t.bytes},
                             {"dtype", dtypeName(t.dtype)},
                             {"rate", t.rate},
                             {"root", t.root}});
  }
  // The planned timeline: the same seed and file give the same one.
  sc["timeline"] = json::array();
  for (const auto& a : timeline) {
    sc["timeline"].push_back({{"at_ms", a.at_ms},
                              {"action", a.action},
                              {"kind", faultKindName(a.kind)},
                              {"role", a.role},
                              {"where", a.where}});
  }
  sc["expect"] = expectJson(s.expect);
  return sc;
}

json verdictJson(const Verdict& v) {
  json x = {
      {"name", v.name},         {"world", v.world},         {"status", verdictStatusName(v.status)},
      {"measured", v.measured}, {"threshold", v.threshold}, {"message", v.message},
      {"where", v.where}};
  if (!v.evidence.empty()) {
    json ev = json::object();
    for (const auto& [k, n] : v.evidence)
      ev[k] = std::isfinite(n) ? json(round6(n)) : json(nullptr);
    x["evidence"] = ev;
  }
  return x;
}

}  // namespace

json toJson(const Report& report) {
  json doc;
  doc["schema"] = kReportSchema;
  doc["scenario"] = scenarioJson(report.scenario, report.timeline);
  doc["environment"] = report.environment;
  doc["outcome"] = outcomeName(report.outcome);
  doc["why"] = report.why;
  doc["run"] = runJson(report.scenario, report.run);
  doc["expectations"] = json::array();
  for (const auto& v : report.verdicts) doc["expectations"].push_back(verdictJson(v));
  doc["verdict"] = verdictStatusName(report.verdict());
  if (report.earlier_runs) {
    json earlier = json::array();
    for (const auto& e : *report.earlier_runs) {
      earlier.push_back(
          {{"verdict", verdictStatusName(e.verdict)}, {"inconclusive", e.inconclusive}});
    }
    doc["reruns"] = report.earlier_runs->size();
    doc["earlier_runs"] = earlier;
  }
  return doc;
}

}  // namespace mw::harness
