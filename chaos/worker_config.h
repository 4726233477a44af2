// What mw_worker runs: the configuration the harness writes (harness/orchestrator.cc) and the
// worker reads (chaos/worker.cc), as types with one JSON codec, so that whatever is written can
// be read back (worker_config_test.cc round-trips it).
//
// Thread rules: pure functions of their arguments.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "multiworld/status.h"
#include "multiworld/tensor.h"
#include "multiworld/world_manager.h"

namespace mw::chaos {

// The traffic patterns a scenario can run (docs/scenarios.md, "Traffic").
enum class TrafficPattern : uint8_t { kGatherToLeader, kRingAllreduce, kBroadcast, kPipeline };

// The name a scenario calls it by: "gather_to_leader", "ring_allreduce", "broadcast", "pipeline".
const char* trafficPatternName(TrafficPattern p);
// The pattern called `name`, or nullopt.
std::optional<TrafficPattern> parseTrafficPattern(std::string_view name);

// One world the worker joins.
struct WorkerWorld {
  std::string name;
  std::string host = "127.0.0.1";  // the store's address (rank 0's host)
  int rank = 0;
  int size = 1;
  uint16_t port = 0;
  BackendKind backend = BackendKind::kGloo;
  Device device = Device::cpu();
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds op_timeout{10000};
  bool rejoin = false;  // re-create the world after it breaks
  bool start = true;    // join at start; false: only when told "add <world>"
};

// The options the worker joins `w` with, its store token `token` ("" for none).
WorldOptions worldOptions(const WorkerWorld& w, const std::string& token);

// One traffic loop: the worker runs `pattern` in `world` until it stops.
struct WorkerTraffic {
  std::string world;
  TrafficPattern pattern = TrafficPattern::kGatherToLeader;
  uint64_t bytes = 1 << 20;
  DType dtype = DType::kFloat32;
  double rate = 0;  // operations per second; 0: as fast as possible
  int root = 0;
};

struct WorkerConfig {
  std::string role;
  unsigned seed = 0;                      // the role's own failpoint PRNG seed
  std::chrono::milliseconds window{100};  // metrics window
  std::string fifo_prefix;                // libfiu control fifo prefix; "" for none
  // Fill what the traffic sends with checkable content and check every element received
  // (chaos/traffic_check.h): the scenario's expect.data_intact. Off, the tensors are sent as they
  // are and nothing is checked (no `verified` or `violation` lines).
  bool check = true;
  // Check every element of every tensor, not a sample of each (chaos/traffic_check.h, Coverage).
  bool check_every_element = false;
  // Keep a history of the traffic's operations, up to this many (`history` lines; mwchaos run
  // --history): 0, none. At least 0.
  int64_t history = 0;
  std::vector<WorkerWorld> worlds;
  std::vector<WorkerTraffic> traffic;
};

// The configuration as one line of JSON.
std::string toJson(const WorkerConfig& c);

// Parses what toJson wrote. kInvalidArgument naming the field when `text` is not a configuration:
// malformed JSON, a missing or mistyped field, an unknown backend, device, dtype or pattern, or
// traffic in a world the configuration does not join.
Result<WorkerConfig> parseWorkerConfig(std::string_view text);

}  // namespace mw::chaos
