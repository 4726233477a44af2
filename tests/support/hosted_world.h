// Test support: this process as rank 0 of a world (hosting its store), the other members as
// mw_test_worker children.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/child.h"
#include "support/local_worlds.h"
#include "support/util.h"

namespace mw::test {

using namespace std::chrono_literals;

// This process as rank 0 of `name` (hosting its store), the other members as worker children.
struct HostedWorld {
  uint16_t port = 0;
  mw::Work join;
};

inline mw::WorldOptions options(const std::string& name, int rank, int size, uint16_t port,
                                std::chrono::milliseconds hb = 1000ms) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.store.port = port;
  o.heartbeat_timeout = hb;
  return o;
}

inline HostedWorld hostWorld(mw::WorldManager& m, const std::string& name, int size,
                             std::chrono::milliseconds hb = 1000ms) {
  HostedWorld h;
  h.join = m.initWorldAsync(options(name, 0, size, 0, hb), mw::deadlineIn(20s));
  h.port = mw::test::LocalWorld::waitForPort(m, name);
  return h;
}

inline std::string joinArg(const std::string& name, int rank, int size, uint16_t port,
                           long hb = 1000) {
  return name + ":" + std::to_string(rank) + ":" + std::to_string(size) + ":" +
         std::to_string(port) + ":" + std::to_string(hb);
}

inline std::unique_ptr<Child> worker(std::vector<std::string> args) {
  args.insert(args.begin(), mw::test::workerPath());
  auto c = std::make_unique<Child>(args);
  return c;
}

// Waits for the first kBroken event of `world`.
inline std::optional<mw::WorldEvent> brokenEvent(mw::Subscription& sub, const std::string& world,
                                                 std::chrono::milliseconds timeout) {
  auto until = mw::deadlineIn(timeout);
  while (auto e = sub.next(until)) {
    if (e->kind == mw::WorldEvent::Kind::kBroken && e->world == world) return e;
  }
  return std::nullopt;
}

}  // namespace mw::test
