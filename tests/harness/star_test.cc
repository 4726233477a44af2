// The scenario prelude's star {} helper: the worlds and roles it writes.
#include <catch2/catch.hpp>

#include "model/scenario.h"
#include "tests/harness/scenario_text.h"

namespace mw::harness {
namespace {

Scenario loadText(const std::string& text) { return testing::loadText(text).scenario; }

TEST_CASE("star gives the leader rank 0 of one world per worker", "[harness][scenario]") {
  auto s = loadText(R"(local worlds, roles = star { workers = 3, hosts = true,
      world = { heartbeat = "300ms" }, each = { w2 = { rejoin = true } } }
    scenario { name = "s", worlds = worlds, roles = roles })");
  REQUIRE(s.worlds.size() == 3);
  REQUIRE(s.roles.size() == 4);
  for (int i = 1; i <= 3; ++i) {
    const std::string w = "w" + std::to_string(i);
    CAPTURE(w);
    CHECK(s.worlds.at(w).heartbeat == std::chrono::milliseconds(300));
    CHECK(s.worlds.at(w).rejoin == (i == 2));
    CHECK(s.roles.at("leader").ranks.at(w) == 0);
    CHECK(s.roles.at("worker" + std::to_string(i)).ranks.at(w) == 1);
    CHECK(s.roles.at("worker" + std::to_string(i)).host == "h" + std::to_string(i));
  }
  CHECK(s.roles.at("leader").host == "h0");
}

}  // namespace
}  // namespace mw::harness
