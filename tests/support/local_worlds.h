// Test support: worlds whose members are threads of this process, each with its own manager.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"

namespace mw::test {

// N members of one world, member i with its own WorldManager and Communicator, joined as rank i.
// Rank 0 hosts the store on a free port.
class LocalWorld {
 public:
  LocalWorld(const std::string& name, int size,
             std::chrono::milliseconds heartbeat = std::chrono::milliseconds(1000),
             std::chrono::milliseconds op_timeout = std::chrono::milliseconds(20000),
             std::chrono::microseconds executor_grace = WorldOptions{}.executor_grace)
      : name_(name) {
    for (int i = 0; i < size; ++i) {
      managers_.push_back(std::make_unique<WorldManager>());
      comms_.push_back(std::make_unique<Communicator>(*managers_.back()));
    }
    WorldOptions o;
    o.name = name;
    o.size = size;
    o.rank = 0;
    o.heartbeat_timeout = heartbeat;
    o.op_timeout = op_timeout;
    o.executor_grace = executor_grace;
    std::vector<Work> joins;
    joins.push_back(managers_[0]->initWorldAsync(o, deadlineIn(std::chrono::seconds(20))));
    o.store.port = waitForPort(*managers_[0], name);
    for (int i = 1; i < size; ++i) {
      o.rank = i;
      joins.push_back(managers_[i]->initWorldAsync(o, deadlineIn(std::chrono::seconds(20))));
    }
    for (auto& j : joins) status_ = status_.ok() ? j.wait() : status_;
    port_ = o.store.port;
  }

  // The port rank 0's store listens on, once it is known (0 when rank 0 failed to start it).
  static uint16_t waitForPort(WorldManager& m, const std::string& name) {
    auto port = m.storePort(name, deadlineIn(std::chrono::seconds(5)));
    return port.ok() ? *port : 0;
  }

  // Runs fn(rank) on one thread per member and joins them.
  void parallel(const std::function<void(int)>& fn) {
    std::vector<std::thread> ts;
    for (int i = 0; i < size(); ++i) ts.emplace_back(fn, i);
    for (auto& t : ts) t.join();
  }

  const Status& status() const { return status_; }
  const std::string& name() const { return name_; }
  int size() const { return static_cast<int>(managers_.size()); }
  uint16_t port() const { return port_; }
  WorldManager& manager(int i) { return *managers_[i]; }
  Communicator& comm(int i) { return *comms_[i]; }

 private:
  std::string name_;
  uint16_t port_ = 0;
  Status status_;
  std::vector<std::unique_ptr<WorldManager>> managers_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace mw::test
