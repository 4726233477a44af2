// The nemesis (model/nemesis.h): a pure function of its seed and spec.
#include "model/nemesis.h"

#include <catch2/catch.hpp>
#include <set>

namespace mw::harness {
namespace {

NemesisSpec spec() {
  NemesisSpec n;
  n.enabled = true;
  n.faults = {"partition", "loss", "pause", "kill"};
  n.start = Ms(1000);
  n.stop = Ms(20000);
  n.gap = Ms(800);
  n.hold = Ms(300);
  n.loss = 0.2;
  n.roles = {"leader", "a", "b"};
  n.hosts = {"h0", "h1", "h2"};
  return n;
}

const std::vector<std::string> kHosts = {"h0", "h1", "h2"};

TEST_CASE("the same seed draws the same faults, another seed others", "[harness][nemesis]") {
  auto a = drawNemesis(spec(), 7, kHosts, "f.lua:3");
  auto b = drawNemesis(spec(), 7, kHosts, "f.lua:3");
  auto c = drawNemesis(spec(), 8, kHosts, "f.lua:3");
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].describe() == b[i].describe());
    CHECK(a[i].at == b[i].at);
  }
  bool differs = a.size() != c.size();
  for (size_t i = 0; !differs && i < a.size(); ++i) differs = a[i].describe() != c[i].describe();
  CHECK(differs);
}

TEST_CASE("each fault is undone after hold, in order, within start and stop",
          "[harness][nemesis]") {
  const NemesisSpec n = spec();
  auto v = drawNemesis(n, 3, kHosts, "f.lua:3");
  REQUIRE(v.size() >= 20);  // 19 s at a gap of 0.4-1.2 s plus 0.3 s of hold
  REQUIRE(v.size() % 2 == 0);
  std::set<std::string> kinds;
  Ms last_end{0};
  for (size_t i = 0; i < v.size(); i += 2) {
    const ActionSpec &on = v[i], &off = v[i + 1];
    CAPTURE(i, on.describe(), off.describe());
    kinds.insert(faultKindName(on.kind()));
    CHECK(on.at > n.start);
    CHECK(off.at == on.at + n.hold);
    CHECK(off.at <= n.stop);
    // The gap from the previous fault's end: uniform in [gap/2, 3*gap/2].
    if (i > 0) {
      CHECK(on.at - last_end >= n.gap / 2);
      CHECK(on.at - last_end <= n.gap * 3 / 2);
    }
    last_end = off.at;
    CHECK(on.where == "f.lua:3 (nemesis #" + std::to_string(i / 2 + 1) + ")");
    if (const auto* p = std::get_if<Partition>(&on.fault)) {
      CHECK(off.kind() == FaultKind::kHeal);
      REQUIRE(p->a.size() == 1);
      CHECK(p->b.size() == 2);  // every other host
      CHECK(std::count(p->b.begin(), p->b.end(), p->a[0]) == 0);
    } else if (const auto* l = std::get_if<Loss>(&on.fault)) {
      CHECK(off.kind() == FaultKind::kHeal);
      CHECK(l->p == 0.2);
      CHECK(std::count(kHosts.begin(), kHosts.end(), l->host) == 1);
    } else {
      CHECK(off.kind() ==
            (on.kind() == FaultKind::kPause ? FaultKind::kResume : FaultKind::kRestart));
      CHECK(off.role() == on.role());
      CHECK(std::count(n.roles.begin(), n.roles.end(), on.role()) == 1);
    }
  }
  CHECK(kinds.size() == 4);  // every kind asked for is drawn in 19 s
}

TEST_CASE("a window too short for one fault draws none", "[harness][nemesis]") {
  NemesisSpec n = spec();
  n.stop = n.start + Ms(500);  // the first gap alone is at least 400 ms, then 300 ms of hold
  n.gap = Ms(1000);
  CHECK(drawNemesis(n, 1, kHosts, "w").empty());
}

}  // namespace
}  // namespace mw::harness
