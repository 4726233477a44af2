// The scenario model's helpers (model/scenario.h): values, descriptions, membership, and the
// scenario API's text for `mwchaos list`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "chaos/enum_names.h"
#include "chaos/overload.h"
#include "chaos/posix_points.h"
#include "model/scenario.h"
#include "multiworld/telemetry_lines.h"

namespace mw::harness {

namespace {

// The number that `text` begins with, and the rest: nullopt when it begins with none. A number
// past a double's range reads as an infinity, a NaN as "nan" reads as one: callers judge them.
std::optional<std::pair<double, std::string>> numberAndUnit(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return std::make_pair(v, text.substr(static_cast<size_t>(end - begin)));
}

std::string outOfRange(const std::string& shown, Ms lo, Ms hi) {
  return shown + " is out of range (" + timeText(lo) + " to " + timeText(hi) + ")";
}

// The one range check of every time: `ms` (NaN, infinite, negative included) rounded into [lo, hi].
std::optional<Ms> checkedTime(double ms, const std::string& shown, std::string* why, Ms lo, Ms hi) {
  // Compared as doubles first: rounding a NaN or 1e300 to an integer is undefined behaviour.
  const double rounded = std::isfinite(ms) ? std::round(ms) : ms;
  if (!(rounded >= static_cast<double>(lo.count()) && rounded <= static_cast<double>(hi.count()))) {
    if (why != nullptr) *why = outOfRange(shown, lo, hi);
    return std::nullopt;
  }
  return Ms(static_cast<long long>(rounded));
}

}  // namespace

std::optional<Ms> parseDuration(const std::string& text, std::string* why, Ms lo, Ms hi) {
  static const std::map<std::string, double> units = {{"ms", 1},     {"s", 1000},    {"", 1000},
                                                      {"m", 60000},  {"min", 60000}, {"us", 1e-3},
                                                      {"h", 3600000}};
  auto parsed = numberAndUnit(text);
  auto unit = parsed ? units.find(parsed->second) : units.end();
  if (unit == units.end()) {
    if (why != nullptr) {
      *why = "expected a duration like \"500ms\" or \"2s\", got \"" + text + "\"";
    }
    return std::nullopt;
  }
  return checkedTime(parsed->first * unit->second, "\"" + text + "\"", why, lo, hi);
}

std::optional<Ms> secondsToTime(double seconds, std::string* why, Ms lo, Ms hi) {
  return checkedTime(seconds * 1000, numberText(seconds) + " s", why, lo, hi);
}

std::string timeText(Ms t) {
  const long long ms = t.count();
  if (ms == 0) return "0";
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + " h";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

std::string numberText(double n) {
  if (std::isnan(n)) return "nan";  // printf writes 0 / 0, a negative NaN on x86, as "-nan"
  char buf[64];
  if (std::isfinite(n) && n == std::floor(n) && std::fabs(n) < 1e21) {
    std::snprintf(buf, sizeof buf, "%.0f", n);
  } else {
    // The fewest digits that read back as `n`: 86400.001 is not "86400".
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, n);
      if (std::strtod(buf, nullptr) == n) break;
    }
  }
  return buf;
}

std::optional<uint64_t> parseBytes(const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1},     {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},     {"kB", 1e3}};
  auto parsed = numberAndUnit(text);
  auto unit = parsed ? units.find(parsed->second) : units.end();
  if (unit == units.end()) return std::nullopt;
  const double bytes = parsed->first * unit->second;
  // 2^64: the first value a uint64_t cannot hold (the cast of a larger one is undefined).
  if (!(bytes >= 0 && bytes < 18446744073709551616.0)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

namespace {

constexpr const char* kFaultNames[] = {
    "kill",         "pause",     "resume",       "restart",   "failpoint", "clear_failpoint",
    "remove_world", "add_world", "scancel_step", "partition", "heal",      "loss",
    "bandwidth",    "delay"};
static_assert(std::size(kFaultNames) == kFaultKinds, "a name for every Fault alternative");

std::string hostList(const std::vector<std::string>& v) {
  std::string o;
  for (const auto& x : v) o += (o.empty() ? "" : ",") + x;
  return "{" + o + "}";
}

std::string describeFailpoint(const Failpoint& f) {
  const FailMode& mode = f.mode;
  std::string m = "failpoint " + f.point + " in " + f.role;
  if (chaos::isPosixPoint(f.point)) {
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

}  // namespace

const char* faultKindName(FaultKind k) { return enumName(kFaultNames, k); }

std::optional<FaultKind> parseFaultKind(std::string_view name) {
  return enumFromName<FaultKind>(kFaultNames, name);
}

const std::string& ActionSpec::role() const {
  static const std::string kNone;
  return std::visit(
      [](const auto& f) -> const std::string& {
        if constexpr (requires { f.role; }) {
          return f.role;
        } else {
          return kNone;
        }
      },
      fault);
}

std::string ActionSpec::describe() const {
  return std::visit(
      Overload{
          [](const Kill& f) { return "kill " + f.role + " " + f.signal_name; },
          [](const Pause& f) { return "pause " + f.role; },
          [](const Resume& f) { return "resume " + f.role; },
          [](const Restart& f) { return "restart " + f.role; },
          [](const Failpoint& f) { return describeFailpoint(f); },
          [](const ClearFailpoint& f) { return "clear failpoint " + f.point + " in " + f.role; },
          [](const RemoveWorld& f) { return "remove_world " + f.world + " in " + f.role; },
          [](const AddWorld& f) { return "add_world " + f.world + " in " + f.role; },
          [](const ScancelStep& f) {
            return "scancel_step " + f.role + (f.signal ? " " + f.signal_name : "");
          },
          [](const Partition& f) {
            return std::string(f.loud ? "loud" : "silent") + (f.oneway ? " one-way" : "") +
                   " partition " + hostList(f.a) + (f.oneway ? " -> " : " | ") + hostList(f.b);
          },
          [](const Heal&) { return std::string("heal the network"); },
          [](const Loss& f) {
            return "loss " + std::to_string(static_cast<int>(f.p * 100 + 0.5)) + "% at " + f.host;
          },
          [](const Bandwidth& f) { return "bandwidth " + f.rate + " from " + f.host; },
          [](const Delay& f) {
            return "delay " + std::to_string(f.delay_ms) + "ms (jitter " +
                   std::to_string(f.jitter_ms) + "ms) from " + f.host;
          },
      },
      fault);
}

std::vector<std::string> Scenario::worldsOf(const std::string& role) const {
  std::vector<std::string> out;
  auto it = roles.find(role);
  if (it == roles.end()) return out;
  for (const auto& [w, r] : it->second.ranks) out.push_back(w);
  return out;
}

Ms Scenario::stopWithin(const std::string& role) const {
  const auto it = roles.find(role);
  return it != roles.end() ? it->second.stop_within : RoleSpec::kDefaultStopWithin;
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
    const bool touched = std::visit(
        [&](const auto& f) {
          if constexpr (std::is_same_v<std::decay_t<decltype(f)>, Partition>) {
            return any(f.a) && any(f.b);
          } else if constexpr (requires { f.host; }) {
            return on.count(f.host) > 0;
          } else {
            return false;  // heal, and faults on roles
          }
        },
        a.fault);
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

namespace mw::harness {

std::optional<std::string> expandPlaceholders(const std::string& text, const Scenario& s,
                                              const RoleSpec& r,
                                              const std::map<std::string, StoreAddress>& stores,
                                              const std::string& token, std::string* error) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find("${", pos);
    out += text.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) return out;
    const size_t close = text.find('}', open);
    if (close == std::string::npos) {
      *error = "'${' without its closing '}' in \"" + text + "\"";
      return std::nullopt;
    }
    const std::string name = text.substr(open + 2, close - open - 2);
    pos = close + 1;
    if (name == "token") {
      out += token;
      continue;
    }
    if (name == "role") {
      out += r.name;
      continue;
    }
    // world.NAME.field: a world name may hold dots, so the field is after the last one.
    const size_t dot = name.rfind('.');
    const std::string field = dot == std::string::npos ? "" : name.substr(dot + 1);
    const bool world_form = name.rfind("world.", 0) == 0 && dot > 6;
    static const std::set<std::string> kFields = {
        "addr", "port", "rank", "size", "backend", "device", "heartbeat_ms", "op_timeout_ms"};
    if (!world_form || kFields.count(field) == 0) {
      *error = "unknown placeholder ${" + name +
               "} (expected ${world.NAME.FIELD} with FIELD one of addr, port, rank, size, backend, "
               "device, heartbeat_ms, op_timeout_ms; or ${token} or ${role})";
      return std::nullopt;
    }
    const std::string world = name.substr(6, dot - 6);
    auto rank = r.ranks.find(world);
    if (rank == r.ranks.end()) {
      *error = "placeholder ${" + name + "}: role '" + r.name + "' is not a member of world '" +
               world + "'";
      return std::nullopt;
    }
    auto store = stores.find(world);
    const StoreAddress where = store == stores.end() ? StoreAddress{} : store->second;
    if (field == "addr") out += where.addr;
    if (field == "port") out += std::to_string(where.port);
    if (field == "rank") out += std::to_string(rank->second);
    const WorldSpec& ws = s.worlds.at(world);
    if (field == "size") out += std::to_string(ws.size);
    if (field == "backend") out += backendName(ws.backend);
    if (field == "device") out += where.device;
    if (field == "heartbeat_ms") out += std::to_string(ws.heartbeat.count());
    if (field == "op_timeout_ms") out += std::to_string(ws.op_timeout.count());
  }
}

std::string worldOptionsText(const WorldSpec& w, const std::string& device) {
  WorldOptions o;
  o.backend = w.backend;
  if (auto d = parseDevice(device); d.ok()) o.device = *d;
  o.heartbeat_timeout = w.heartbeat;
  o.op_timeout = w.op_timeout;
  return telemetry_lines::optionsText(o);
}

std::vector<std::string> optionMismatches(const WorldSpec& w, const std::string& device,
                                          const std::string& detail) {
  const auto words = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string word; in >> word;) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
    }
    return out;
  };
  const auto declared = words(worldOptionsText(w, device));
  std::vector<std::string> out;
  for (const auto& [key, joined] : words(detail)) {
    auto it = declared.find(key);
    if (it == declared.end() || it->second == joined) continue;
    if ((key == "heartbeat_ms" && !w.heartbeat_declared) ||
        (key == "op_timeout_ms" && !w.op_timeout_declared)) {
      continue;  // not written in the scenario: the harness's default binds no program
    }
    // A GPU's index is the program's own view (CUDA_VISIBLE_DEVICES): only cpu against cuda counts.
    if (key == "device" && joined.rfind("cuda:", 0) == 0 && it->second.rfind("cuda:", 0) == 0) {
      continue;
    }
    out.push_back(key + ": joined with " + joined + ", the scenario declares " + it->second);
  }
  return out;
}

}  // namespace mw::harness
