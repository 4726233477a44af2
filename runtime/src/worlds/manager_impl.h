// WorldManager::Impl: the registry of worlds, the watchdog and the event queues.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "multiworld/world_manager.h"
#include "worlds/telemetry.h"
#include "worlds/watchdog.h"
#include "worlds/world.h"

namespace mw {

namespace detail {

class SubscriptionImpl final : public Subscription {
 public:
  std::optional<WorldEvent> next(Deadline deadline) override MW_EXCLUDES(mu_);
  void push(const WorldEvent& e) MW_EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<WorldEvent> events_ MW_GUARDED_BY(mu_);
};

}  // namespace detail

struct WorldManager::Impl final : detail::WorldSink {
  Impl();
  ~Impl() override;

  Status init(const WorldOptions& options, Deadline deadline);
  Work initAsync(const WorldOptions& options, Deadline deadline) MW_EXCLUDES(async_mu_);
  Status remove(const std::string& name) MW_EXCLUDES(mu_);
  // The world, or nullptr when unknown.
  std::shared_ptr<detail::World> find(const std::string& name) const MW_EXCLUDES(mu_);

  void emit(WorldEvent event) override MW_EXCLUDES(subs_mu_);
  // A new event queue, filled from now on.
  std::shared_ptr<detail::SubscriptionImpl> addSubscription() MW_EXCLUDES(subs_mu_);
  void wakeWatchdog() override { watchdog_->wake(); }

  // Reserves `options.name` for a new joining world; kInvalidUsage when taken.
  Result<std::shared_ptr<detail::World>> reserve(const WorldOptions& options) MW_EXCLUDES(mu_);
  // Connects a reserved world and makes it healthy, or releases it on failure.
  Status join(const std::shared_ptr<detail::World>& world, Deadline deadline);
  void release(const std::shared_ptr<detail::World>& world) MW_EXCLUDES(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<detail::World>> worlds_ MW_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> generations_ MW_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<detail::SubscriptionImpl>> subs_ MW_GUARDED_BY(subs_mu_);
  Mutex subs_mu_;
  std::set<std::string> removing_ MW_GUARDED_BY(mu_);
  struct AsyncInit {
    std::shared_ptr<std::atomic<bool>> done;
    std::jthread thread;
  };
  Mutex async_mu_;
  std::vector<AsyncInit> async_ MW_GUARDED_BY(async_mu_);
  std::unique_ptr<detail::Watchdog> watchdog_;

  // The harness's telemetry channel (worlds/telemetry.h), when the environment names one.
  struct TelemetrySource final : detail::Telemetry::Source {
    explicit TelemetrySource(Impl& m) : manager(m) {}
    std::pair<uint64_t, bool> worldState(const std::string& name) const override;
    std::shared_ptr<Subscription> subscribe() override;
    std::string joinedWith(const std::string& name, uint64_t generation) const override;
    Impl& manager;
  };
  TelemetrySource telemetry_source_{*this};
  std::unique_ptr<detail::Telemetry> telemetry_;  // after everything it reads
};

namespace detail {

// The Communicator's access to a manager's worlds.
struct ManagerAccess {
  static WorldManager::Impl& impl(WorldManager& m) { return *m.impl_; }
};

}  // namespace detail

}  // namespace mw
