#include "chaos/worker_config.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "chaos/enum_names.h"

namespace mw::chaos {

namespace {

using json = nlohmann::json;

constexpr const char* kPatternNames[] = {"gather_to_leader", "ring_allreduce", "broadcast",
                                         "pipeline"};

// `field` of `j` as a T; the value itself when absent and `fallback` is given.
template <class T>
T get(const json& j, const char* field, const std::string& where,
      std::optional<T> fallback = std::nullopt) {
  auto it = j.find(field);
  if (it == j.end()) {
    if (fallback) return *fallback;
    throw std::invalid_argument(where + "." + field + " is missing");
  }
  const auto wrong = [&] {
    return std::invalid_argument(where + "." + field + " has the wrong type: " + it->dump());
  };
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // nlohmann converts 70000 to a uint16_t of 4464 without a word: check the range first.
    if (!it->is_number_integer()) throw wrong();
    const bool fits = it->is_number_unsigned()
                          ? it->template get<uint64_t>() <= std::numeric_limits<T>::max()
                          : std::in_range<T>(it->template get<int64_t>());
    if (!fits) throw wrong();
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw wrong();
  }
}

template <class T>
T orThrow(Result<T> r, const std::string& where) {
  if (!r.ok()) throw std::invalid_argument(where + ": " + r.status().message());
  return *r;
}

WorkerWorld worldFrom(const json& w, const std::string& where) {
  WorkerWorld o;
  o.name = get<std::string>(w, "name", where);
  o.host = get<std::string>(w, "host", where, o.host);
  o.rank = get<int>(w, "rank", where);
  o.size = get<int>(w, "size", where);
  o.port = get<uint16_t>(w, "port", where);
  o.backend = orThrow(parseBackend(get<std::string>(w, "backend", where, "gloo")), where);
  o.device = orThrow(parseDevice(get<std::string>(w, "device", where, "cpu")), where);
  o.heartbeat = std::chrono::milliseconds(get<int64_t>(w, "heartbeat_ms", where, 1000));
  o.op_timeout = std::chrono::milliseconds(get<int64_t>(w, "op_timeout_ms", where, 10000));
  o.rejoin = get<bool>(w, "rejoin", where, false);
  o.start = get<bool>(w, "start", where, true);
  return o;
}

WorkerTraffic trafficFrom(const json& t, const std::string& where) {
  WorkerTraffic o;
  o.world = get<std::string>(t, "world", where);
  const std::string pattern = get<std::string>(t, "pattern", where);
  auto p = parseTrafficPattern(pattern);
  if (!p) throw std::invalid_argument(where + ".pattern: unknown pattern '" + pattern + "'");
  o.pattern = *p;
  o.bytes = get<uint64_t>(t, "bytes", where);
  o.dtype = orThrow(parseDType(get<std::string>(t, "dtype", where, "float32")), where);
  o.rate = get<double>(t, "rate", where, 0.0);
  o.root = get<int>(t, "root", where, 0);
  return o;
}

}  // namespace

const char* trafficPatternName(TrafficPattern p) { return enumName(kPatternNames, p); }

std::optional<TrafficPattern> parseTrafficPattern(std::string_view name) {
  return enumFromName<TrafficPattern>(kPatternNames, name);
}

WorldOptions worldOptions(const WorkerWorld& w, const std::string& token) {
  WorldOptions o;
  o.name = w.name;
  o.rank = w.rank;
  o.size = w.size;
  o.store.host = w.host;
  o.store.port = w.port;
  o.token = token;
  o.backend = w.backend;
  o.device = w.device;
  o.heartbeat_timeout = w.heartbeat;
  o.op_timeout = w.op_timeout;
  return o;
}

std::string toJson(const WorkerConfig& c) {
  json j;
  j["role"] = c.role;
  j["seed"] = c.seed;
  j["window_ms"] = c.window.count();
  if (!c.fifo_prefix.empty()) j["fifo_prefix"] = c.fifo_prefix;
  j["check"] = c.check;
  j["check_every_element"] = c.check_every_element;
  if (c.history > 0) j["history"] = c.history;
  j["worlds"] = json::array();
  for (const auto& w : c.worlds) {
    j["worlds"].push_back({{"name", w.name},
                           {"host", w.host},
                           {"rank", w.rank},
                           {"size", w.size},
                           {"port", w.port},
                           {"backend", backendName(w.backend)},
                           {"device", w.device.str()},
                           {"heartbeat_ms", w.heartbeat.count()},
                           {"op_timeout_ms", w.op_timeout.count()},
                           {"rejoin", w.rejoin},
                           {"start", w.start}});
  }
  j["traffic"] = json::array();
  for (const auto& t : c.traffic) {
    j["traffic"].push_back({{"world", t.world},
                            {"pattern", trafficPatternName(t.pattern)},
                            {"bytes", t.bytes},
                            {"dtype", dtypeName(t.dtype)},
                            {"rate", t.rate},
                            {"root", t.root}});
  }
  return j.dump();
}

Result<WorkerConfig> parseWorkerConfig(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (!j.is_object()) throw std::invalid_argument("the configuration is not a JSON object");
    WorkerConfig c;
    c.role = get<std::string>(j, "role", "config");
    c.seed = get<unsigned>(j, "seed", "config", 0u);
    c.window = std::chrono::milliseconds(get<int64_t>(j, "window_ms", "config", 100));
    c.fifo_prefix = get<std::string>(j, "fifo_prefix", "config", std::string());
    c.check = get<bool>(j, "check", "config", true);
    c.check_every_element = get<bool>(j, "check_every_element", "config", false);
    c.history = get<int64_t>(j, "history", "config", 0);
    if (c.history < 0) throw std::invalid_argument("config.history: below 0");
    const json worlds = get<json>(j, "worlds", "config");
    for (size_t i = 0; i < worlds.size(); ++i) {
      c.worlds.push_back(worldFrom(worlds.at(i), "config.worlds[" + std::to_string(i) + "]"));
    }
    const json traffic = get<json>(j, "traffic", "config", json::array());
    for (size_t i = 0; i < traffic.size(); ++i) {
      const std::string where = "config.traffic[" + std::to_string(i) + "]";
      WorkerTraffic t = trafficFrom(traffic.at(i), where);
      bool joined = false;
      for (const auto& w : c.worlds) joined = joined || w.name == t.world;
      if (!joined) throw std::invalid_argument(where + ": world '" + t.world + "' is not joined");
      c.traffic.push_back(std::move(t));
    }
    return c;
  } catch (const std::exception& e) {  // json::exception and ours alike
    return Status(Code::kInvalidArgument, std::string("worker configuration: ") + e.what());
  }
}

}  // namespace mw::chaos
