// Test support: run an operation on every member of a LocalWorld and check the statuses.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "support/local_worlds.h"

namespace mw::test {

// Runs op(rank) on every member's own thread and waits for each member's Work.
inline std::vector<Status> runAll(LocalWorld& w, const std::function<Work(int)>& op,
                                  std::chrono::seconds wait = std::chrono::seconds(20)) {
  std::vector<Status> st(static_cast<size_t>(w.size()));
  w.parallel([&](int r) { st[r] = op(r).wait(mw::deadlineIn(wait)); });
  return st;
}

inline void requireAllOk(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) {
    INFO("rank " << r << ": " << st[r].toString());
    REQUIRE(st[r].ok());
  }
}

}  // namespace mw::test
