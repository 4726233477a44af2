// Collectives and point-to-point operations with bad arguments (rejected before anything is
// sent) and with members whose calls disagree (the world breaks with a protocol error).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/checks.h"
#include "support/local_worlds.h"
#include "support/util.h"

using namespace std::chrono_literals;

namespace {

using mw::Code;
using mw::DType;
using mw::ReduceOp;
using mw::Status;
using mw::Work;
using mw::test::LocalWorld;
using mw::test::requireAllOk;
using mw::test::runAll;
using mw::test::scaled;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Arguments rejected before anything is sent.

namespace {

void requireRejected(const Work& w, Code code, const std::string& needle) {
  REQUIRE(w.valid());
  REQUIRE(w.test());  // completed at once
  Status s = w.status();
  INFO(s.toString());
  CHECK(s.code() == code);
  CHECK_THAT(s.message(), Catch::Matchers::Contains(needle));
}

}  // namespace

TEST_CASE("bad arguments complete the Work at once with kInvalidArgument",
          "[runtime][collectives]") {
  LocalWorld w("args", 2);
  REQUIRE(w.status().ok());
  mw::Communicator& c = w.comm(0);
  const std::string& n = w.name();
  std::vector<float> f(12, 1.0f);
  std::vector<int32_t> i32(12, 1);
  auto ft = [&](size_t count) { return mw::Tensor::cpu(f.data(), count); };
  auto it = [&](size_t count) { return mw::Tensor::cpu(i32.data(), count); };
  const Code kBad = Code::kInvalidArgument;

  SECTION("ranks and roots out of range, self, negative tag") {
    requireRejected(c.isend(n, ft(4), 2), kBad, "dst 2 is out of range");
    requireRejected(c.isend(n, ft(4), -1), kBad, "dst -1");
    requireRejected(c.irecv(n, ft(4), 5), kBad, "src 5");
    requireRejected(c.isend(n, ft(4), 0), kBad, "dst is this rank itself");
    requireRejected(c.irecv(n, ft(4), 0), kBad, "src is this rank itself");
    requireRejected(c.isend(n, ft(4), 1, -1), kBad, "tag -1");
    requireRejected(c.irecv(n, ft(4), 1, -7), kBad, "tag -7");
    requireRejected(c.broadcast(n, ft(4), 2), kBad, "root 2");
    requireRejected(c.reduce(n, ft(4), -1), kBad, "root -1");
    requireRejected(c.gather(n, ft(4), ft(8), 2), kBad, "root 2");
    requireRejected(c.scatter(n, ft(8), ft(4), 3), kBad, "root 3");
  }
  SECTION("null data with elements, and a CUDA tensor on a gloo world") {
    mw::Tensor null_t{nullptr, DType::kFloat32, 4, mw::Device::cpu()};
    requireRejected(c.isend(n, null_t, 1), kBad, "null data pointer");
    requireRejected(c.allReduce(n, null_t), kBad, "tensor has a null data pointer");
    requireRejected(c.allGather(n, ft(2), mw::Tensor{nullptr, DType::kFloat32, 4, {}}), kBad,
                    "out has a null data pointer");
    mw::Tensor gpu = ft(4);
    gpu.device = mw::Device::cuda(0);
    requireRejected(c.allReduce(n, gpu), kBad, "cuda:0");
    requireRejected(c.irecv(n, gpu, 1), kBad, "cuda:0");
    requireRejected(c.broadcast(n, gpu, 0), kBad, "cuda:0");
    requireRejected(c.allGather(n, gpu, ft(8)), kBad, "in is on cuda:0");
  }
  SECTION("sizes that do not fit") {
    requireRejected(c.allGather(n, ft(4), ft(7)), kBad, "out has 7 elements");
    requireRejected(c.gather(n, ft(4), ft(9), 0), kBad, "out has 9 elements");
    requireRejected(c.scatter(n, ft(9), ft(4), 0), kBad, "in has 9 elements");
    requireRejected(c.reduceScatter(n, ft(9), ft(4)), kBad, "in has 9 elements");
    requireRejected(c.allToAll(n, ft(8), ft(6)), kBad, "same dtype and count");
    requireRejected(c.allToAll(n, ft(7), ft(7)), kBad, "not a multiple of size");
  }
  SECTION("dtype of in and out differ") {
    requireRejected(c.allGather(n, ft(4), it(8)), kBad, "in is float32 but out is int32");
    requireRejected(c.gather(n, ft(4), it(8), 0), kBad, "in is float32 but out is int32");
    requireRejected(c.scatter(n, it(8), ft(4), 0), kBad, "out is float32 but in is int32");
    requireRejected(c.reduceScatter(n, it(8), ft(4)), kBad, "out is float32 but in is int32");
    requireRejected(c.allToAll(n, ft(8), it(8)), kBad, "same dtype and count");
  }
  SECTION("unknown world") {
    requireRejected(c.allReduce("no-such-world", ft(4)), Code::kNotFound, "no-such-world");
    requireRejected(c.isend("no-such-world", ft(4), 1), Code::kNotFound, "no-such-world");
    CHECK(c.barrier("no-such-world").world() == "no-such-world");
  }
  // Nothing was sent: the world is still healthy and its members still agree.
  auto st = runAll(w, [&](int r) { return w.comm(r).barrier(n); });
  requireAllOk(st);
  CHECK(w.manager(0).world(n)->state == mw::WorldState::kHealthy);
}

// ---------------------------------------------------------------------------------------------
// Members whose calls disagree break the world with a protocol error; nobody crashes or hangs.

namespace {

// Runs op(rank) on both members of a fresh world with a 3 s op_timeout and requires that both
// fail with kWorldBroken within a few seconds, that at least one blames a protocol error whose
// detail contains every needle, and that the world refuses further operations at once.
void requireProtocolBreak(const std::string& name, const std::function<Work(LocalWorld&, int)>& op,
                          const std::vector<std::string>& needles) {
  LocalWorld w(name, 2, 1000ms, 3000ms);
  REQUIRE(w.status().ok());
  auto start = mw::Clock::now();
  auto st = runAll(
      w, [&](int r) { return op(w, r); }, 15s);
  auto elapsed = mw::Clock::now() - start;
  CHECK(elapsed < 5s);
  bool blamed = false;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << st[r].toString());
    REQUIRE(st[r].code() == Code::kWorldBroken);
    REQUIRE(st[r].broken().has_value());
    const mw::BrokenInfo& b = *st[r].broken();
    CHECK(b.world == name);
    bool all = b.cause == mw::Cause::kProtocolError;
    for (const auto& s : needles) all = all && b.detail.find(s) != std::string::npos;
    blamed = blamed || all;
  }
  CHECK(blamed);
  for (int r = 0; r < 2; ++r) {
    Work next = w.comm(r).barrier(name);
    REQUIRE(next.wait(mw::deadlineIn(1s)).code() == Code::kWorldBroken);
    CHECK(w.manager(r).world(name)->state == mw::WorldState::kBroken);
  }
}

}  // namespace

TEST_CASE("allReduce counts that differ between members break the world",
          "[runtime][collectives]") {
  std::vector<float> a(100, 1.0f), b(50, 1.0f);
  requireProtocolBreak("count-mismatch",
                       [&](LocalWorld& w, int r) {
                         auto t = r == 0 ? mw::Tensor::cpu(a.data(), a.size())
                                         : mw::Tensor::cpu(b.data(), b.size());
                         return w.comm(r).allReduce(w.name(), t);
                       },
                       {"100", "50"});
}

TEST_CASE("a send whose dtype differs from the receive breaks the world",
          "[runtime][collectives]") {
  std::vector<float> a(10, 1.0f);
  std::vector<int32_t> b(10, 0);
  requireProtocolBreak("dtype-mismatch",
                       [&](LocalWorld& w, int r) {
                         return r == 0
                                    ? w.comm(0).isend(w.name(), mw::Tensor::cpu(a.data(), 10), 1)
                                    : w.comm(1).irecv(w.name(), mw::Tensor::cpu(b.data(), 10), 0);
                       },
                       {"float32", "int32"});
}

TEST_CASE("a send whose count differs from the receive breaks the world",
          "[runtime][collectives]") {
  std::vector<float> a(10, 1.0f), b(20, 0.0f);
  requireProtocolBreak("p2p-count-mismatch",
                       [&](LocalWorld& w, int r) {
                         return r == 0
                                    ? w.comm(0).isend(w.name(), mw::Tensor::cpu(a.data(), 10), 1)
                                    : w.comm(1).irecv(w.name(), mw::Tensor::cpu(b.data(), 20), 0);
                       },
                       {"10", "20"});
}

// A disagreement is named only once an operation stalls (CallCheck publishes the stalled call in
// the world's store and compares). A peer that is merely late must not look like one, whether it
// has not called yet or is waiting too, and what was published is deleted when the call ends.
TEST_CASE("late peers that agree are not a protocol error, and leave nothing in the store",
          "[runtime][collectives]") {
  // The watchdog ticks every heartbeat / 10 (100 ms; 300 ms at MW_TEST_TIME_SCALE=3). A shorter
  // heartbeat would break this world by silence on a loaded machine under TSan, as CI showed.
  const auto hb = scaled(1000), late = scaled(700);
  LocalWorld w("late-peer", 2, hb, 20000ms);
  REQUIRE(w.status().ok());
  auto store = mw::StoreClient::connect({"127.0.0.1", w.port()}, "", mw::deadlineIn(5s));
  REQUIRE(store.ok());
  auto exists = [&](const std::string& key) {
    auto has = (*store)->check({key}, mw::deadlineIn(1s));
    REQUIRE(has.ok());
    return *has;
  };
  const std::string recv_key = "mw/call/p2p/0/1/7/0/recv", coll_key = "mw/call/coll/0/0";
  std::vector<float> a(1000, 1.0f), b(1000, 0.0f);
  // The receive waits 700 ms for the send: its call is published and checked several times.
  Work recv = w.comm(1).irecv(w.name(), mw::Tensor::cpu(b.data(), b.size()), 0, 7);
  std::this_thread::sleep_for(late);
  CHECK(exists(recv_key));
  Work send = w.comm(0).isend(w.name(), mw::Tensor::cpu(a.data(), a.size()), 1, 7);
  REQUIRE(send.wait(mw::deadlineIn(5s)).ok());
  REQUIRE(recv.wait(mw::deadlineIn(5s)).ok());
  CHECK(b[999] == 1.0f);
  // An all_reduce whose second member comes 700 ms late: the first publishes, then they agree.
  std::vector<float> x(1000, 1.0f), y(1000, 2.0f);
  Work first = w.comm(0).allReduce(w.name(), mw::Tensor::cpu(x.data(), x.size()));
  std::this_thread::sleep_for(late);
  CHECK(exists(coll_key));
  Work second = w.comm(1).allReduce(w.name(), mw::Tensor::cpu(y.data(), y.size()));
  REQUIRE(first.wait(mw::deadlineIn(5s)).ok());
  REQUIRE(second.wait(mw::deadlineIn(5s)).ok());
  CHECK(x[0] == 3.0f);
  CHECK(y[999] == 3.0f);
  for (int r = 0; r < 2; ++r) {
    CHECK(w.manager(r).world(w.name())->state == mw::WorldState::kHealthy);
  }
  // What was published is deleted once the calls ended (within a tick or two).
  bool gone = false;
  for (auto until = mw::deadlineIn(scaled(2000)); !gone && mw::Clock::now() < until;) {
    gone = !exists(recv_key) && !exists(coll_key) && !exists("mw/call/coll/0/1");
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  CHECK(gone);
}
