// The worker configuration (chaos/worker_config.h): what the harness writes, the worker reads
// back field for field; a configuration that is not one is an error naming the field.
#include "chaos/worker_config.h"

#include <catch2/catch.hpp>

namespace mw::chaos {
namespace {

using Catch::Matchers::Contains;

WorkerConfig sample() {
  WorkerConfig c;
  c.role = "leader";
  c.seed = 4242;
  c.window = std::chrono::milliseconds(250);
  c.fifo_prefix = "/tmp/mwchaos-x/fiu";
  c.check = false;
  c.check_every_element = true;
  c.history = 5000;
  WorkerWorld a;
  a.name = "w1";
  a.host = "10.77.0.2";
  a.rank = 0;
  a.size = 3;
  a.port = 40123;
  a.heartbeat = std::chrono::milliseconds(500);
  a.op_timeout = std::chrono::milliseconds(7000);
  a.rejoin = true;
  WorkerWorld b;
  b.name = "g1";
  b.rank = 1;
  b.size = 2;
  b.port = 40124;
  b.backend = BackendKind::kNccl;
  b.device = Device::cuda(1);
  b.start = false;
  c.worlds = {a, b};
  c.traffic = {{"w1", TrafficPattern::kRingAllreduce, 4096, DType::kBFloat16, 200, 0},
               {"g1", TrafficPattern::kBroadcast, 1 << 20, DType::kUInt8, 0, 1}};
  return c;
}

TEST_CASE("a worker configuration round-trips field for field", "[harness][config]") {
  const WorkerConfig c = sample();
  auto back = parseWorkerConfig(toJson(c));
  INFO(back.status().toString());
  REQUIRE(back.ok());
  CHECK(back->role == c.role);
  CHECK(back->seed == c.seed);
  CHECK(back->window == c.window);
  CHECK(back->fifo_prefix == c.fifo_prefix);
  CHECK(back->check == false);
  CHECK(back->check_every_element == true);
  CHECK(back->history == 5000);
  REQUIRE(back->worlds.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto &x = back->worlds[i], &y = c.worlds[i];
    CHECK(x.name == y.name);
    CHECK(x.host == y.host);
    CHECK(x.rank == y.rank);
    CHECK(x.size == y.size);
    CHECK(x.port == y.port);
    CHECK(x.backend == y.backend);
    CHECK(x.device.str() == y.device.str());
    CHECK(x.heartbeat == y.heartbeat);
    CHECK(x.op_timeout == y.op_timeout);
    CHECK(x.rejoin == y.rejoin);
    CHECK(x.start == y.start);
  }
  REQUIRE(back->traffic.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto &x = back->traffic[i], &y = c.traffic[i];
    CHECK(x.world == y.world);
    CHECK(x.pattern == y.pattern);
    CHECK(x.bytes == y.bytes);
    CHECK(x.dtype == y.dtype);
    CHECK(x.rate == y.rate);
    CHECK(x.root == y.root);
  }
  CHECK(toJson(*back) == toJson(c));
}

TEST_CASE("a world's options are the configuration's", "[harness][config]") {
  const WorkerWorld w = sample().worlds[0];
  const WorldOptions o = worldOptions(w, "s3cret");
  CHECK(o.name == "w1");
  CHECK(o.rank == 0);
  CHECK(o.size == 3);
  CHECK(o.store.host == "10.77.0.2");
  CHECK(o.store.port == 40123);
  CHECK(o.token == "s3cret");
  CHECK(o.backend == BackendKind::kGloo);
  CHECK(o.device.str() == "cpu");
  CHECK(o.heartbeat_timeout == std::chrono::milliseconds(500));
  CHECK(o.op_timeout == std::chrono::milliseconds(7000));
  CHECK(worldOptions(sample().worlds[1], "").device.str() == "cuda:1");
}

TEST_CASE("every traffic pattern has one name both ways", "[harness][config]") {
  for (auto p : {TrafficPattern::kGatherToLeader, TrafficPattern::kRingAllreduce,
                 TrafficPattern::kBroadcast, TrafficPattern::kPipeline}) {
    CHECK(parseTrafficPattern(trafficPatternName(p)) == p);
  }
  CHECK_FALSE(parseTrafficPattern("gather").has_value());
}

TEST_CASE("a configuration that is not one names what is wrong", "[harness][config]") {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"", "worker configuration"},
      {"[1, 2]", "not a JSON object"},
      {R"({"worlds": []})", "config.role is missing"},
      {R"({"role": 7, "worlds": []})", "config.role has the wrong type"},
      {R"({"role": "a"})", "config.worlds is missing"},
      {R"({"role": "a", "worlds": [{"name": "w1", "rank": 0, "size": 1}]})",
       "config.worlds[0].port is missing"},
      {R"({"role": "a", "worlds": [{"name": "w1", "rank": 0, "size": 1, "port": 1,
           "backend": "mpi"}]})",
       "unknown backend 'mpi'"},
      {R"({"role": "a", "worlds": [{"name": "w1", "rank": 0, "size": 1, "port": 70000}]})",
       "config.worlds[0].port has the wrong type"},
      {R"({"role": "a", "worlds": [], "traffic": [{"world": "w1", "pattern": "gather_to_leader",
           "bytes": 4}]})",
       "world 'w1' is not joined"},
      {R"({"role": "a", "worlds": [{"name": "w1", "rank": 0, "size": 1, "port": 1}],
           "traffic": [{"world": "w1", "pattern": "scatter", "bytes": 4}]})",
       "unknown pattern 'scatter'"},
      {R"({"role": "a", "worlds": [{"name": "w1", "rank": 0, "size": 1, "port": 1}],
           "traffic": [{"world": "w1", "pattern": "broadcast", "bytes": 4, "dtype": "f8"}]})",
       "config.traffic[0]"},
      {R"({"role": "a", "worlds": [], "history": -1})", "config.history: below 0"},
      {R"({"role": "a", "worlds": [], "history": "all"})", "config.history has the wrong type"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = parseWorkerConfig(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Contains(c.says));
  }
}

}  // namespace
}  // namespace mw::chaos
