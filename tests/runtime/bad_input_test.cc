// Bad input gets a clear error, never a crash or a hang.
#include <catch2/catch.hpp>
#include <thread>

#include "multiworld/multiworld.h"
#include "support/local_worlds.h"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

mw::WorldOptions opts(const std::string& name, int rank, int size, uint16_t port = 0) {
  mw::WorldOptions o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.store.port = port;
  return o;
}

}  // namespace

TEST_CASE("world options are validated with messages naming the field", "[runtime][badinput]") {
  mw::WorldManager m;
  auto check = [&](mw::WorldOptions o, const std::string& part) {
    mw::Status s = m.initWorld(o, mw::deadlineIn(1s));
    CHECK(s.code() == mw::Code::kInvalidArgument);
    CHECK_THAT(s.message(), Contains(part));
  };
  check(opts("w", 2, 2), "rank 2 is out of range for size 2");
  check(opts("w", -1, 2), "rank -1");
  check(opts("w", 0, 0), "size 0");
  check(opts("", 0, 1), "world name");
  check(opts("bad name", 0, 1), "world name 'bad name'");
  auto o = opts("w", 0, 1);
  o.heartbeat_timeout = 10ms;
  check(o, "heartbeat_timeout 10 ms");
  o = opts("w", 0, 1);
  o.executor_grace = -1us;
  check(o, "executor_grace -1 us");
  o.executor_grace = 11s;
  check(o, "executor_grace 11000000 us must be between 0 and 10 s");
  o = opts("w", 1, 2, 0);
  check(o, "store port 0");
  check(opts("w", 0, mw::kMaxWorldSize + 1), "size 4097 must be between 1 and 4096");
  CHECK(m.worlds().empty());
}

TEST_CASE("members that disagree on the world's size are refused", "[runtime][badinput]") {
  mw::WorldManager m0, m1;
  auto j0 = m0.initWorldAsync(opts("sz", 0, 2), mw::deadlineIn(2s));
  uint16_t port = mw::test::LocalWorld::waitForPort(m0, "sz");
  REQUIRE(port != 0);
  mw::Status s = m1.initWorld(opts("sz", 1, 3, port), mw::deadlineIn(2s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Contains("size"));
  CHECK_THAT(s.message(), Contains("2"));
  CHECK_THAT(s.message(), Contains("3"));
  // Rank 0 waits for a second member that never comes, until its deadline.
  CHECK(j0.wait(mw::deadlineIn(5s)).code() == mw::Code::kTimeout);
  CHECK(m0.worlds().empty());
}

TEST_CASE("members that disagree on heartbeat_timeout are refused", "[runtime][badinput]") {
  mw::WorldManager m0, m1;
  auto o0 = opts("hb", 0, 2);
  o0.heartbeat_timeout = 1000ms;
  auto j0 = m0.initWorldAsync(o0, mw::deadlineIn(2s));
  uint16_t port = mw::test::LocalWorld::waitForPort(m0, "hb");
  REQUIRE(port != 0);
  auto o1 = opts("hb", 1, 2, port);
  o1.heartbeat_timeout = 300ms;
  mw::Status s = m1.initWorld(o1, mw::deadlineIn(2s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Contains("heartbeat_timeout 1000 ms"));
  CHECK_THAT(s.message(), Contains("says 300 ms"));
  CHECK(m1.worlds().empty());
  CHECK(j0.wait(mw::deadlineIn(5s)).code() == mw::Code::kTimeout);
}

TEST_CASE("two members claiming the same rank: the second is refused", "[runtime][badinput]") {
  mw::WorldManager m0, m1, m2;
  auto o = opts("dup", 0, 3);
  auto j0 = m0.initWorldAsync(o, mw::deadlineIn(3s));
  uint16_t port = mw::test::LocalWorld::waitForPort(m0, "dup");
  auto j1 = m1.initWorldAsync(opts("dup", 1, 3, port), mw::deadlineIn(3s));
  std::this_thread::sleep_for(200ms);
  mw::Status s = m2.initWorld(opts("dup", 1, 3, port), mw::deadlineIn(3s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Contains("rank 1 already joined"));
  CHECK(j0.wait(mw::deadlineIn(5s)).code() == mw::Code::kTimeout);
  CHECK(j1.wait(mw::deadlineIn(5s)).code() == mw::Code::kTimeout);
}

TEST_CASE("a wrong store token is refused", "[runtime][badinput]") {
  mw::WorldManager m0, m1;
  auto o = opts("tok", 0, 2);
  o.token = "secret";
  auto j0 = m0.initWorldAsync(o, mw::deadlineIn(2s));
  uint16_t port = mw::test::LocalWorld::waitForPort(m0, "tok");
  auto o1 = opts("tok", 1, 2, port);
  o1.token = "guess";
  mw::Status s = m1.initWorld(o1, mw::deadlineIn(2s));
  CHECK(s.code() == mw::Code::kPermissionDenied);
  CHECK(j0.wait(mw::deadlineIn(5s)).code() == mw::Code::kTimeout);
}

TEST_CASE("operations on unknown, joining or broken worlds fail at once", "[runtime][badinput]") {
  mw::WorldManager m;
  mw::Communicator c(m);
  float x = 0;
  auto t = mw::Tensor::cpu(&x, 1);
  CHECK(c.allReduce("nope", t).wait(mw::deadlineIn(1s)).code() == mw::Code::kNotFound);
  CHECK(m.removeWorld("nope").code() == mw::Code::kNotFound);
  CHECK(m.world("nope").status().code() == mw::Code::kNotFound);

  mw::test::LocalWorld w("br", 2);
  REQUIRE(w.status().ok());
  REQUIRE(w.manager(1).removeWorld("br").ok());
  for (int i = 0; i < 2000 && w.manager(0).world("br")->state != mw::WorldState::kBroken; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  auto s = w.comm(0).allReduce("br", t).wait(mw::deadlineIn(1s));
  CHECK(s.code() == mw::Code::kWorldBroken);
  REQUIRE(s.broken());
  CHECK(s.broken()->world == "br");
  CHECK_THAT(s.message(), Contains("br"));
  // The removed member no longer knows the world.
  CHECK(w.comm(1).allReduce("br", t).wait(mw::deadlineIn(1s)).code() == mw::Code::kNotFound);
}

TEST_CASE("a store that cannot be reached times out at the deadline", "[runtime][badinput]") {
  mw::WorldManager m;
  auto o = opts("far", 1, 2, 1);  // nothing listens on port 1
  auto t0 = mw::Clock::now();
  mw::Status s = m.initWorld(o, mw::deadlineIn(300ms));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(mw::Clock::now() - t0).count();
  CHECK(s.code() == mw::Code::kTimeout);
  CHECK(ms < 2000);
  CHECK(m.worlds().empty());
}

TEST_CASE("storePort gives rank 0's chosen port while the world joins, and says why not",
          "[runtime][badinput]") {
  mw::WorldManager m0, m1;
  CHECK(m0.storePort("none", mw::deadlineIn(1s)).status().code() == mw::Code::kNotFound);
  auto j0 = m0.initWorldAsync(opts("port", 0, 2), mw::deadlineIn(10s));
  auto port = m0.storePort("port", mw::deadlineIn(5s));
  REQUIRE(port.ok());
  CHECK(*port != 0);
  CHECK(m0.world("port")->state == mw::WorldState::kJoining);  // known before the others join
  REQUIRE(m1.initWorld(opts("port", 1, 2, *port), mw::deadlineIn(10s)).ok());
  REQUIRE(j0.wait(mw::deadlineIn(10s)).ok());
  // A member that does not host the store has none to give (it was told the port).
  auto other = m1.storePort("port", mw::deadlineIn(1s));
  REQUIRE(other.ok());
  CHECK(other.value() == port.value());
}

TEST_CASE("reduce ops outside the enum and sizes that overflow are refused",
          "[runtime][badinput]") {
  mw::WorldManager m;
  mw::Communicator c(m);
  REQUIRE(m.initWorld(opts("solo", 0, 1), mw::deadlineIn(10s)).ok());
  uint8_t v = 1;
  auto t = mw::Tensor::cpu(&v, 1);
  for (auto op : {mw::ReduceOp{4}, mw::ReduceOp{200}}) {
    auto s = c.allReduce("solo", t, op).wait(mw::deadlineIn(5s));
    CHECK(s.code() == mw::Code::kInvalidArgument);
    CHECK_THAT(s.message(), Contains("is not one of sum, prod, min, max"));
    CHECK(c.reduce("solo", t, 0, op).wait(mw::deadlineIn(5s)).code() == mw::Code::kInvalidArgument);
  }
  CHECK(v == 1);  // nothing ran
  // count near SIZE_MAX / 4: count * 4 would wrap to a tiny byte size.
  float f = 0;
  mw::Tensor huge{&f, mw::DType::kFloat32, SIZE_MAX / 4 + 2, mw::Device::cpu()};
  auto s = c.allReduce("solo", huge).wait(mw::deadlineIn(5s));
  CHECK(s.code() == mw::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Contains("bytes"));
  mw::Tensor one{&f, mw::DType::kFloat32, 1, mw::Device::cpu()};
  CHECK(c.allGather("solo", huge, one).wait(mw::deadlineIn(5s)).code() ==
        mw::Code::kInvalidArgument);
}

TEST_CASE("deadlines saturate: Deadline::max() never comes, Deadline::min() has passed",
          "[runtime][badinput]") {
  CHECK(mw::deadlineIn(mw::Clock::duration::max()) == mw::Deadline::max());
  CHECK(mw::deadlineIn(mw::Clock::duration::min()) < mw::Clock::now());
  CHECK(mw::timeUntil(mw::Deadline::min()) < mw::Clock::duration::zero());
  CHECK(mw::timeUntil(mw::Deadline::max()) > std::chrono::hours(24 * 365));
  CHECK(mw::remaining(mw::Deadline::min()).count() == 0);
  CHECK(mw::remaining(mw::Deadline::max()) > std::chrono::hours(24 * 365));

  mw::WorldManager m;
  mw::Communicator c(m);
  auto o = opts("dl", 0, 1);
  o.op_timeout = std::chrono::hours(24 * 31);
  CHECK(m.initWorld(o, mw::Deadline::max()).code() == mw::Code::kInvalidArgument);
  o.op_timeout = std::chrono::hours(24 * 30);  // the longest accepted
  REQUIRE(m.initWorld(o, mw::Deadline::max()).ok());
  float x = 1;
  CHECK(c.allReduce("dl", mw::Tensor::cpu(&x, 1)).wait(mw::Deadline::max()).ok());
  CHECK(c.barrier("dl").wait(mw::Deadline::min()).code() != mw::Code::kInvalidArgument);

  // The store: a key that exists is read whatever the deadline; a missing one times out at once
  // with Deadline::min(), and a wait for it with Deadline::max() ends when it is set.
  mw::StoreServerOptions so;
  auto server = mw::StoreServer::start(so);
  REQUIRE(server.ok());
  auto client = mw::StoreClient::connect({"127.0.0.1", (*server)->port()}, "", mw::Deadline::max());
  REQUIRE(client.ok());
  REQUIRE((*client)->set("k", "v", mw::Deadline::max()).ok());
  CHECK((*client)->get("k", mw::Deadline::max()).value() == "v");
  auto t0 = mw::Clock::now();
  CHECK((*client)->get("missing", mw::Deadline::min()).status().code() == mw::Code::kTimeout);
  CHECK(mw::Clock::now() - t0 < 5s);
}

TEST_CASE("the world name rule and the cause names that the harness reuses",
          "[runtime][badinput]") {
  CHECK(mw::validWorldName("w1"));
  CHECK(mw::validWorldName("a.b-c_D9"));
  CHECK(mw::validWorldName(std::string(128, 'x')));
  CHECK_FALSE(mw::validWorldName(""));
  CHECK_FALSE(mw::validWorldName(std::string(129, 'x')));
  CHECK_FALSE(mw::validWorldName("w 1"));
  CHECK_FALSE(mw::validWorldName("w/1"));
  for (int c = 0; c <= static_cast<int>(mw::Cause::kPeerLeft); ++c) {
    const auto cause = static_cast<mw::Cause>(c);
    CHECK(mw::parseCause(mw::causeName(cause)).value() == cause);
  }
  auto bad = mw::parseCause("peer_exploded");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == mw::Code::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Contains("peer_exploded"));
}
