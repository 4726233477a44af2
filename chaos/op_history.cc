#include "chaos/op_history.h"

#include <utility>

namespace mw::chaos {

void OpHistory::add(telemetry_lines::History op) {
  if (!on()) return;
  std::lock_guard lock(mu_);
  if (kept_ < limit_) {
    ++kept_;
    pending_.emplace_back(std::move(op));
  } else if (!full_) {
    full_ = true;
    pending_.emplace_back(telemetry_lines::HistoryFull{op.start_ns});
  }
}

std::vector<telemetry_lines::Line> OpHistory::take() {
  std::lock_guard lock(mu_);
  return std::exchange(pending_, {});
}

}  // namespace mw::chaos
