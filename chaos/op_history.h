// An mw_worker role's history of its traffic's operations (WorkerConfig::history; mwchaos run
// --history, docs/scenarios.md "The operation history"): the traffic loops add each operation as
// it ends, and the reporter writes what was added as `history` lines at each window's end, so
// that a role killed mid-run has written its history up to its last window.
//
// Thread rules: add() from any thread (the traffic loops), take() from any (the reporter); mu_
// guards what is pending.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "multiworld/telemetry_lines.h"

namespace mw::chaos {

class OpHistory {
 public:
  // A history of at most `limit` operations; 0: off, add() keeps nothing. `limit` >= 0.
  explicit OpHistory(int64_t limit) : limit_(limit) {}

  // Whether operations are kept (the limit is above 0); constant.
  bool on() const { return limit_ > 0; }

  // One operation that ended: kept while fewer than the limit were. The first one past the limit
  // is noted as a `history_full` line (at its start); it and every later one are left out.
  void add(telemetry_lines::History op);

  // The lines added since the last take(), in the order they were added.
  std::vector<telemetry_lines::Line> take();

 private:
  const int64_t limit_;
  std::mutex mu_;
  int64_t kept_ = 0;                            // GUARDED_BY(mu_)
  bool full_ = false;                           // GUARDED_BY(mu_)
  std::vector<telemetry_lines::Line> pending_;  // GUARDED_BY(mu_)
};

}  // namespace mw::chaos
