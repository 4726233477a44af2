#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"

using namespace std::chrono_literals;

TEST_CASE("two ranks in threads exchange a tensor and all-reduce", "[runtime]") {
  mw::WorldManager m0, m1;
  mw::WorldOptions o0;
  o0.name = "w";
  o0.rank = 0;
  o0.size = 2;
  REQUIRE(m0.initWorldAsync(o0, mw::deadlineIn(5s)).valid());
  // Rank 0 picked the port; wait until it is known.
  uint16_t port = 0;
  for (int i = 0; i < 500 && port == 0; ++i) {
    auto info = m0.world("w");
    if (info.ok()) port = info->store_port;
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(port != 0);
  auto o1 = o0;
  o1.rank = 1;
  o1.store.port = port;
  REQUIRE(m1.initWorld(o1, mw::deadlineIn(5s)).ok());
  for (int i = 0; i < 500 && m0.world("w")->state != mw::WorldState::kHealthy; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  mw::Communicator c0(m0), c1(m1);
  std::vector<float> a(1000, 1.0f), b(1000, 0.0f);
  auto s = c0.isend("w", mw::Tensor::cpu(a.data(), a.size()), 1);
  auto r = c1.irecv("w", mw::Tensor::cpu(b.data(), b.size()), 0);
  REQUIRE(s.wait(mw::deadlineIn(5s)).ok());
  REQUIRE(r.wait(mw::deadlineIn(5s)).ok());
  REQUIRE(b[999] == 1.0f);
  std::vector<float> x(1 << 20, 1.0f), y(1 << 20, 2.0f);
  auto w0 = c0.allReduce("w", mw::Tensor::cpu(x.data(), x.size()));
  auto w1 = c1.allReduce("w", mw::Tensor::cpu(y.data(), y.size()));
  REQUIRE(w0.wait(mw::deadlineIn(5s)).toString() == "ok");
  REQUIRE(w1.wait(mw::deadlineIn(5s)).toString() == "ok");
  REQUIRE(x[12345] == 3.0f);
  REQUIRE(y[(1 << 20) - 1] == 3.0f);
}
