// The telemetry channel: when the chaos harness (mwchaos) starts a program as a scenario role, the
// runtime in that program reports to the harness by itself, with no change to the program's code.
//
// The harness names the channel in the environment: MW_TELEMETRY_FD, an open descriptor (a pipe)
// to write to, and MW_TELEMETRY_WORLDS, the role's worlds, comma-separated. A WorldManager made
// while MW_TELEMETRY_FD is set starts one thread ("mw-telemetry") that writes, one line per
// message in the line protocol of multiworld/telemetry_lines.h (the one mw_worker writes on its
// stdout):
//   ready <t>          once, when every world of MW_TELEMETRY_WORLDS is healthy (when the variable
//                      is unset or empty: when the first world is);
//   event <t> ...      each world event of the manager (created, broken with its cause, removed);
//                      a `created` event's detail names the options the world was joined with,
//                      "backend=gloo device=cpu heartbeat_ms=500 op_timeout_ms=10000"
//                      (optionsText), so the harness can check them against the scenario's;
//   metrics <t> ...    every 100 ms, one per world the manager has had: the bytes (of each
//                      operation's largest tensor), operations, and latency sum and maximum (from
//                      submission to completion) of the operations that completed successfully in
//                      the window, and the world's generation (0 once removed).
//   fifo <path>|-      first, when MW_FAILPOINT_FIFO=<prefix> asks for failpoints: the first
//                      manager of the process opens libfiu's control fifo there (seeded with
//                      MW_FAILPOINT_SEED when set) and names it; "-" from a library built without
//                      failpoints (the harness then reports failpoint faults as skipped);
//   error <message>    when that fifo cannot be opened (the program goes on);
//   app <t> <name> <v> every 100 ms, the window's sum of each application metric the program
//                      reported (multiworld/telemetry.h), from one manager of the process.
// Without MW_TELEMETRY_FD nothing is started, and operations pay one null-pointer test.
// A write that fails (the harness is gone) ends the reports, never the program.
//
// Thread rules: counters() from any thread; the rest is the manager's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "multiworld/traffic_windows.h"
#include "multiworld/world_manager.h"

namespace mw::detail {

// Nanoseconds of `t` on the monotonic clock, the protocol's time.
int64_t monotonicNs(Clock::time_point t);

class Telemetry {
 public:
  // What a Telemetry asks of its manager.
  struct Source {
    virtual ~Source() = default;
    // The world's generation and whether it is healthy; generation 0 when it does not exist.
    virtual std::pair<uint64_t, bool> worldState(const std::string& name) const = 0;
    // A new event queue (WorldManager::subscribe).
    virtual std::shared_ptr<Subscription> subscribe() = 0;
    // telemetry_lines::optionsText of the world's generation `generation`; "" when that
    // generation is gone.
    virtual std::string joinedWith(const std::string& name, uint64_t generation) const = 0;
  };

  // The channel the environment names, or nullptr when MW_TELEMETRY_FD is unset or empty. A
  // value that is not an open descriptor: nullptr, and one line on stderr saying so.
  static std::unique_ptr<Telemetry> fromEnvironment(Source& source);
  Telemetry(Source& source, int fd, std::vector<std::string> ready_worlds,
            std::chrono::milliseconds window = std::chrono::milliseconds(100));
  // Reports the events queued so far and a last window, then stops the thread.
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // The traffic windows of world `name` (made on first use; the same object for every
  // generation): a successful operation adds itself at its completion (WorkState::complete).
  std::shared_ptr<TrafficWindows> counters(const std::string& name) MW_EXCLUDES(mu_);

 private:
  // Opens the failpoint fifo MW_FAILPOINT_FIFO asks for (once per process) and reports it.
  static void openFailpointsIfAsked(int fd);
  void run(std::stop_token stop);
  // The metrics and app lines of the windows that end by `window_end`, stamped `stamp`.
  void report(Clock::time_point window_end, Clock::time_point stamp);
  void checkReady();
  void write(const std::string& line);

  Source& source_;
  const int fd_;
  const std::vector<std::string> ready_worlds_;
  const std::chrono::milliseconds window_;
  const Clock::time_point origin_;  // window k ends at origin_ + (k + 1) * window_
  std::shared_ptr<Subscription> events_;
  bool ready_ = false;             // telemetry thread only
  std::set<std::string> created_;  // telemetry thread only: worlds whose `created` was written
  bool broken_ = false;            // telemetry thread only: a write failed, nothing more is written
  Mutex mu_;
  std::map<std::string, std::shared_ptr<TrafficWindows>> counters_ MW_GUARDED_BY(mu_);
  std::jthread thread_;  // last: starts once the above exist
};

}  // namespace mw::detail
