// The scenario model's helpers (harness/scenario.h): values, descriptions, membership, and the
// scenario API's text for `mwchaos list`.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "chaos/posix_points.h"
#include "harness/scenario.h"

namespace mw::harness {

namespace {

// A non-negative finite number followed by one of `units`: the number times the unit's factor.
std::optional<double> withUnit(const std::string& text,
                               const std::map<std::string, double>& units) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (v < 0 || !std::isfinite(v)) return std::nullopt;
  auto it = units.find(text.substr(pos));
  if (it == units.end()) return std::nullopt;
  return v * it->second;
}

}  // namespace

std::optional<Ms> parseDuration(const std::string& text) {
  static const std::map<std::string, double> units = {{"ms", 1},     {"s", 1000},    {"", 1000},
                                                      {"m", 60000},  {"min", 60000}, {"us", 1e-3},
                                                      {"h", 3600000}};
  auto ms = withUnit(text, units);
  if (!ms) return std::nullopt;
  return Ms(static_cast<long long>(std::llround(*ms)));
}

std::optional<uint64_t> parseBytes(const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1},     {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},     {"kB", 1e3}};
  auto bytes = withUnit(text, units);
  if (!bytes) return std::nullopt;
  return static_cast<uint64_t>(*bytes);
}

std::string ActionSpec::describe() const {
  if (kind == "kill") return "kill " + role + " " + signal_name;
  if (kind == "failpoint") {
    const bool posix = chaos::isPosixPoint(point);
    std::string m = "failpoint " + point + " in " + role;
    if (posix) {
      m += " errno=" + std::to_string(mode.failinfo) + " (" + mode.errno_name + ")";
    } else {
      m += " failnum=" + std::to_string(mode.failnum);
      if (!mode.nccl.empty()) m += " (" + mode.nccl + ")";
      if (!mode.errno_name.empty()) m += " (" + mode.errno_name + ")";
      if (mode.failinfo) m += " async";
    }
    if (mode.probability < 1) m += " p=" + std::to_string(mode.probability).substr(0, 5);
    if (mode.once) m += " once";
    return m;
  }
  if (kind == "clear_failpoint") return "clear failpoint " + point + " in " + role;
  auto list = [](const std::vector<std::string>& v) {
    std::string o;
    for (const auto& x : v) o += (o.empty() ? "" : ",") + x;
    return "{" + o + "}";
  };
  if (kind == "partition") {
    return std::string(loud ? "loud" : "silent") + (oneway ? " one-way" : "") + " partition " +
           list(hosts_a) + (oneway ? " -> " : " | ") + list(hosts_b);
  }
  if (kind == "heal") return "heal the network";
  if (kind == "loss")
    return "loss " + std::to_string(static_cast<int>(loss * 100 + 0.5)) + "% at " + host;
  if (kind == "bandwidth") return "bandwidth " + rate + " from " + host;
  if (kind == "delay") {
    return "delay " + std::to_string(delay_ms) + "ms (jitter " + std::to_string(jitter_ms) +
           "ms) from " + host;
  }
  if (kind == "remove_world" || kind == "add_world") return kind + " " + world + " in " + role;
  return kind + " " + role;
}

std::vector<std::string> Scenario::worldsOf(const std::string& role) const {
  std::vector<std::string> out;
  auto it = roles.find(role);
  if (it == roles.end()) return out;
  for (const auto& [w, r] : it->second.ranks) out.push_back(w);
  return out;
}

std::vector<std::string> Scenario::hosts() const {
  std::set<std::string> hs;
  for (const auto& [name, r] : roles) {
    if (!r.host.empty()) hs.insert(r.host);
  }
  return {hs.begin(), hs.end()};
}

std::vector<std::string> Scenario::worldsTouchedBy(const ActionSpec& a) const {
  std::vector<std::string> out;
  for (const auto& [world, w] : worlds) {
    std::set<std::string> on;
    for (const auto& role : membersOf(world)) on.insert(roles.at(role).host);
    auto any = [&](const std::vector<std::string>& hs) {
      return std::any_of(hs.begin(), hs.end(),
                         [&](const std::string& h) { return on.count(h) > 0; });
    };
    bool touched = a.kind == "partition" ? any(a.hosts_a) && any(a.hosts_b)
                   : a.kind == "heal"    ? false
                                         : on.count(a.host) > 0;
    if (touched) out.push_back(world);
  }
  return out;
}

std::vector<std::string> Scenario::membersOf(const std::string& world) const {
  std::map<int, std::string> byRank;
  for (const auto& [name, r] : roles) {
    auto it = r.ranks.find(world);
    if (it != r.ranks.end()) byRank[it->second] = name;
  }
  std::vector<std::string> out;
  for (auto& [rank, name] : byRank) out.push_back(name);
  return out;
}

}  // namespace mw::harness
