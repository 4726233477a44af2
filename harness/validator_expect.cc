// The scenario's `expect` table: what the run must show (Validator::expect).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>

#include "harness/fault_names.h"
#include "harness/validator.h"
#include "model/nemesis.h"
#include "multiworld/telemetry.h"

namespace mw::harness::loader {

void Validator::expect(const LV* v, const std::string& w, Scenario& s) {
  ExpectSpec& e = s.expect;
  e.where = refine(w, "expect: ");  // the line of "expect =", where its verdicts point
  if (v == nullptr) return;
  if (v->t != LV::T::kTable) {
    error(w, "expect: expected a table");
    return;
  }
  onlyFields(*v, w, "expect",
             {"broken", "healthy", "detected_within", "throughput", "replacement_within", "no_hang",
              "no_orphans", "data_intact", "app_checks", "check"});
  for (const auto& name : strList(v->get("healthy"), w, "expect.healthy")) {
    if (!s.worlds.count(name)) error(w, "expect.healthy: no world '" + name + "' in worlds");
    e.healthy.insert(name);
  }
  if (const LV* b = v->get("broken")) {
    e.has_broken = true;
    for (const auto& name : strList(b, w, "expect.broken")) {
      if (!s.worlds.count(name)) error(w, "expect.broken: no world '" + name + "' in worlds");
      e.broken.insert(name);
    }
  }
  if (const LV* d = v->get("detected_within")) {
    if (d->t == LV::T::kTable) {
      for (const auto& [world, dv] : d->fields) {
        if (!noNul(world, w, "expect.detected_within")) continue;
        auto ms = duration(&dv, w, "expect.detected_within." + world);
        if (!ms) continue;
        if (world == "default") {
          e.detected_within = ms;
        } else if (!s.worlds.count(world)) {
          error(w, "expect.detected_within." + world + ": no world '" + world + "' in worlds");
        } else {
          e.detected_within_world[world] = *ms;
        }
      }
    } else {
      e.detected_within = duration(d, w, "expect.detected_within");
    }
  }
  if (const LV* t = v->get("throughput")) {
    std::vector<const LV*> items;
    if (t->t == LV::T::kTable && t->kindTag() == "throughput_kept") {
      items.push_back(t);
    } else if (t->t == LV::T::kTable && t->fields.empty()) {
      for (const auto& it : t->items) items.push_back(&it);
    } else {
      error(w, "expect.throughput: expected { throughput_kept { world = \"w1\", ratio = 0.9 } }");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const LV& it = *items[i];
      const std::string p = "expect.throughput[" + std::to_string(i + 1) + "]";
      const std::string tw = it.whereTag(w);
      if (it.t != LV::T::kTable) {
        error(tw, p + ": expected throughput_kept { world = ..., ratio = ... }");
        continue;
      }
      onlyFields(it, tw, p, {"world", "metric", "role", "ratio", "window"});
      ThroughputSpec ts;
      ts.where = tw;
      ts.ratio = number(it.get("ratio"), tw, p + ".ratio", 0, 10).value_or(0.9);
      if (ts.ratio == 0) error(tw, p + ".ratio: must be in (0, 10]");
      ts.window = str(it.get("window"), tw, p + ".window").value_or("after");
      if (ts.window != "after" && ts.window != "during") {
        error(tw, p + ".window: expected \"after\" (first fault to the end) or \"during\" "
                      "(first fault to the last)");
      }
      if (it.get("metric") != nullptr || it.get("role") != nullptr) {
        // A program role's own metric (multiworld/telemetry.h).
        ts.metric = str(it.get("metric"), tw, p + ".metric").value_or("");
        ts.role = str(it.get("role"), tw, p + ".role").value_or("");
        if (it.get("world") != nullptr) {
          error(tw, p + ": give world (its bytes) or metric and role (a program's own metric), "
                        "not both");
        }
        if (!mw::checkMetricName(ts.metric).ok()) {
          error(tw, p +
                        ".metric: expected the name a program reports (1 to 64 characters of "
                        "A-Z a-z 0-9 _ . -), got \"" +
                        ts.metric + "\"");
        }
        if (!s.roles.count(ts.role)) {
          error(tw, p + ".role: no role '" + ts.role + "' in roles");
        } else if (!s.roles.at(ts.role).isProgram()) {
          error(tw, p + ".role: role '" + ts.role +
                        "' runs mw_worker; only a program role reports its own metrics");
        }
        e.throughput.push_back(ts);
        continue;
      }
      ts.world = str(it.get("world"), tw, p + ".world").value_or("");
      if (!s.worlds.count(ts.world)) error(tw, p + ".world: no world '" + ts.world + "' in worlds");
      // A program member makes its own traffic (the runtime in it reports the world's bytes).
      const auto members = s.membersOf(ts.world);
      bool has_traffic = std::any_of(s.traffic.begin(), s.traffic.end(),
                                     [&](const TrafficSpec& t) {
                                       return std::find(t.worlds.begin(), t.worlds.end(),
                                                        ts.world) != t.worlds.end();
                                     }) ||
                         std::any_of(members.begin(), members.end(), [&](const std::string& m) {
                           return s.roles.at(m).isProgram();
                         });
      if (s.worlds.count(ts.world) && !has_traffic) {
        error(tw, p + ": world '" + ts.world + "' carries no traffic to measure");
      }
      e.throughput.push_back(ts);
    }
    if (s.timeline.empty() && !e.throughput.empty()) {
      error(w,
            "expect.throughput: compares before and after the first fault, but the timeline "
            "has none");
    }
  }
  e.replacement_within = duration(v->get("replacement_within"), w, "expect.replacement_within");
  e.no_hang = boolean(v->get("no_hang"), w, "expect.no_hang").value_or(true);
  e.no_orphans = boolean(v->get("no_orphans"), w, "expect.no_orphans").value_or(true);
  dataIntact(v->get("data_intact"), w, e);
  e.app_checks = boolean(v->get("app_checks"), w, "expect.app_checks").value_or(false);
  if (e.app_checks && std::none_of(s.roles.begin(), s.roles.end(),
                                   [](const auto& r) { return r.second.isProgram(); })) {
    error(w,
          "expect.app_checks: no role runs a program (program = { ... }): only a program "
          "reports its own checks (mw::reportCheck)");
  }
  if (const LV* c = v->get("check")) {
    if (c->t != LV::T::kFunc) {
      error(w, "expect.check: expected a function(run) returning ok, message");
    } else {
      e.has_check = true;
      check_ref = c->func_ref;
    }
  }
}

void Validator::dataIntact(const LV* v, const std::string& w, ExpectSpec& e) {
  if (v == nullptr) return;
  constexpr const char* kForm =
      "expect.data_intact: expected true, { every_element = true } or { off = \"why it cannot "
      "hold here\" }";
  if (v->t == LV::T::kBool) {
    if (!v->b) {
      error(w, std::string(kForm) + ": turning it off takes a reason, not false");
    }
    return;
  }
  if (v->t != LV::T::kTable) {
    error(w, kForm);
    return;
  }
  onlyFields(*v, w, "expect.data_intact", {"off", "every_element"});
  e.data_intact_every_element =
      boolean(v->get("every_element"), w, "expect.data_intact.every_element").value_or(false);
  if (v->get("off") == nullptr) return;
  if (v->get("every_element") != nullptr) {
    error(w, std::string(kForm) + ": give off or every_element, not both");
    return;
  }
  const auto why = str(v->get("off"), w, "expect.data_intact.off");
  if (!why || why->find_first_not_of(" \t") == std::string::npos) {
    error(w, std::string(kForm) + ": off must say why (a non-empty string)");
    return;
  }
  e.data_intact = false;
  e.data_intact_off = *why;
}

}  // namespace mw::harness::loader
