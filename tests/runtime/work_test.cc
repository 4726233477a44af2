// Work handles: empty handles, completed handles, deadlines, and waitAny across worlds.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/local_worlds.h"
#include "support/util.h"

using namespace std::chrono_literals;

namespace {

using mw::Code;
using mw::Status;
using mw::Work;

// A leader that is rank 0 of worlds "a" and "b" (one manager), with one peer per world.
struct TwoWorlds {
  mw::WorldManager leader, peer_a, peer_b;
  mw::Communicator lc{leader}, ac{peer_a}, bc{peer_b};
  Status status;

  TwoWorlds() {
    std::vector<Work> joins;
    for (auto [name, peer] : {std::pair{"a", &peer_a}, std::pair{"b", &peer_b}}) {
      mw::WorldOptions o;
      o.name = name;
      o.size = 2;
      o.rank = 0;
      joins.push_back(leader.initWorldAsync(o, mw::deadlineIn(20s)));
      o.store.port = mw::test::LocalWorld::waitForPort(leader, name);
      o.rank = 1;
      joins.push_back(peer->initWorldAsync(o, mw::deadlineIn(20s)));
    }
    for (auto& j : joins) {
      Status s = j.wait(mw::deadlineIn(20s));
      if (status.ok()) status = s;
    }
  }
};

auto elapsedSince(mw::Clock::time_point start) { return mw::Clock::now() - start; }

}  // namespace

TEST_CASE("an empty Work reports invalid usage", "[runtime][work]") {
  Work w;
  CHECK_FALSE(w.valid());
  CHECK_FALSE(w.test());
  CHECK(w.world().empty());
  CHECK(w.wait(mw::deadlineIn(1s)).code() == Code::kInvalidUsage);
  CHECK(w.wait().code() == Code::kInvalidUsage);
  CHECK(w.status().code() == Code::kInvalidUsage);
}

TEST_CASE("Work::done is complete at once with its status", "[runtime][work]") {
  Work ok = Work::done("w1", Status::Ok());
  CHECK(ok.valid());
  CHECK(ok.test());
  CHECK(ok.world() == "w1");
  CHECK(ok.wait().ok());
  CHECK(ok.status().ok());

  Work bad = Work::done("w2", Status(Code::kInvalidArgument, "rank 9"));
  CHECK(bad.test());
  CHECK(bad.wait(mw::deadlineIn(-1s)).code() == Code::kInvalidArgument);  // even past deadline
  CHECK(bad.status().message() == "rank 9");
  Work copy = bad;  // copies share the state
  CHECK(copy.sameAs(bad));
  CHECK(copy.status().code() == Code::kInvalidArgument);
}

TEST_CASE("waiting past the deadline on a pending op times out at once", "[runtime][work]") {
  mw::test::LocalWorld w("pending", 2);
  INFO(w.status().toString());
  REQUIRE(w.status().ok());
  int32_t x = 0, y = 42;
  Work r = w.comm(0).irecv(w.name(), mw::Tensor::cpu(&x, 1), 1, 3);
  REQUIRE(r.valid());
  CHECK(r.world() == "pending");
  auto start = mw::Clock::now();
  Status s = r.wait(mw::deadlineIn(-5s));
  CHECK(elapsedSince(start) < 100ms);
  INFO(s.toString());
  CHECK(s.code() == Code::kTimeout);
  CHECK_FALSE(r.test());
  CHECK(r.status().code() == Code::kInvalidUsage);  // not complete yet
  start = mw::Clock::now();
  CHECK(r.wait(mw::deadlineIn(50ms)).code() == Code::kTimeout);
  CHECK(elapsedSince(start) >= 45ms);
  // The op goes on: it completes once the peer sends.
  REQUIRE(w.comm(1).isend(w.name(), mw::Tensor::cpu(&y, 1), 0, 3).wait(mw::deadlineIn(20s)).ok());
  REQUIRE(r.wait(mw::deadlineIn(20s)).ok());
  CHECK(x == 42);
  CHECK(r.test());
  CHECK(r.status().ok());
}

TEST_CASE("waitAny rejects an empty span and empty handles", "[runtime][work]") {
  auto none = mw::waitAny({}, mw::deadlineIn(1s));
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == Code::kInvalidArgument);
  std::vector<Work> works{Work::done("x", Status::Ok()), Work()};
  auto empty = mw::waitAny(works, mw::deadlineIn(1s));
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == Code::kInvalidArgument);
  CHECK_THAT(empty.status().message(), Catch::Matchers::Contains("1"));
}

TEST_CASE("waitAny returns a work that completed before the call at once", "[runtime][work]") {
  mw::test::LocalWorld w("early", 2);
  REQUIRE(w.status().ok());
  int32_t x = 0;
  std::vector<Work> works{w.comm(0).irecv(w.name(), mw::Tensor::cpu(&x, 1), 1),
                          Work::done("early", Status(Code::kAborted, "gone"))};
  auto start = mw::Clock::now();
  auto i = mw::waitAny(works);  // no deadline: must not block
  CHECK(elapsedSince(start) < 100ms);
  REQUIRE(i.ok());
  CHECK(*i == 1);
  CHECK(works[1].status().code() == Code::kAborted);
  CHECK_FALSE(works[0].test());
  int32_t y = 5;
  REQUIRE(w.comm(1).isend(w.name(), mw::Tensor::cpu(&y, 1), 0).wait(mw::deadlineIn(20s)).ok());
  REQUIRE(works[0].wait(mw::deadlineIn(20s)).ok());
}

TEST_CASE("waitAny returns the world that has data first", "[runtime][work]") {
  TwoWorlds tw;
  INFO(tw.status.toString());
  REQUIRE(tw.status.ok());
  float in_a = 0, in_b = 0, one = 1, two = 2;

  SECTION("only b's peer sends") {
    std::vector<Work> recvs{tw.lc.irecv("a", mw::Tensor::cpu(&in_a, 1), 1),
                            tw.lc.irecv("b", mw::Tensor::cpu(&in_b, 1), 1)};
    Status sent;
    std::thread sender([&] {
      std::this_thread::sleep_for(50ms);  // waitAny is waiting by then
      sent = tw.bc.send("b", mw::Tensor::cpu(&two, 1), 0);
    });
    auto i = mw::waitAny(recvs, mw::deadlineIn(20s));
    sender.join();
    REQUIRE(sent.ok());
    INFO(i.status().toString());
    REQUIRE(i.ok());
    CHECK(*i == 1);
    CHECK(in_b == 2);
    CHECK(recvs[1].status().ok());
    CHECK_FALSE(recvs[0].test());

    // Once both are done, the lowest index wins.
    REQUIRE(tw.ac.send("a", mw::Tensor::cpu(&one, 1), 0).ok());
    REQUIRE(recvs[0].wait(mw::deadlineIn(20s)).ok());
    auto j = mw::waitAny(recvs, mw::deadlineIn(1s));
    REQUIRE(j.ok());
    CHECK(*j == 0);
    CHECK(in_a == 1);
  }
  SECTION("none completes before the deadline") {
    std::vector<Work> recvs{tw.lc.irecv("a", mw::Tensor::cpu(&in_a, 1), 1),
                            tw.lc.irecv("b", mw::Tensor::cpu(&in_b, 1), 1)};
    auto start = mw::Clock::now();
    auto i = mw::waitAny(recvs, mw::deadlineIn(100ms));
    auto elapsed = elapsedSince(start);
    REQUIRE_FALSE(i.ok());
    CHECK(i.status().code() == Code::kTimeout);
    CHECK(elapsed >= 95ms);
    CHECK(elapsed < 2s);
    // Both receives are still pending and complete normally afterwards.
    REQUIRE(tw.ac.send("a", mw::Tensor::cpu(&one, 1), 0).ok());
    REQUIRE(tw.bc.send("b", mw::Tensor::cpu(&two, 1), 0).ok());
    for (auto& r : recvs) REQUIRE(r.wait(mw::deadlineIn(20s)).ok());
    CHECK(in_a == 1);
    CHECK(in_b == 2);
  }
  // World "a" is unaffected by what happens in "b".
  CHECK(tw.leader.world("a")->state == mw::WorldState::kHealthy);
  CHECK(tw.leader.world("b")->state == mw::WorldState::kHealthy);
}

TEST_CASE("waits in whole milliseconds are rounded up, never down to a busy poll", "[runtime]") {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  CHECK(mw::waitMillis(microseconds(300)) == milliseconds(1));  // not 0: poll(0) would spin
  CHECK(mw::waitMillis(microseconds(1)) == milliseconds(1));
  CHECK(mw::waitMillis(milliseconds(2)) == milliseconds(2));
  CHECK(mw::waitMillis(microseconds(2001)) == milliseconds(3));
  CHECK(mw::waitMillis(microseconds(0)) == milliseconds(0));
  CHECK(mw::waitMillis(milliseconds(-5)) == milliseconds(0));
  // remaining() waits at least until the deadline: a fraction of a millisecond left is 1 ms.
  CHECK(mw::remaining(mw::deadlineIn(microseconds(500))) <= milliseconds(1));
  CHECK(mw::remaining(mw::deadlineIn(milliseconds(10) + microseconds(500))) >= milliseconds(10));
  CHECK(mw::remaining(mw::deadlineIn(-milliseconds(1))) == milliseconds(0));
}

// When queued operations start (Work's header): the grace here is 10 s, far longer than any
// bound checked, so an operation that completes within those bounds was started by the rule under
// test, not by the end of its grace.
TEST_CASE("test(), waitAny and a wait behind a running operation start it at once",
          "[runtime][work]") {
  mw::test::LocalWorld lw("start", 2, 1000ms, 60000ms, 10s);
  INFO(lw.status().toString());
  REQUIRE(lw.status().ok());
  float v0[4] = {1, 1, 1, 1}, v1[4] = {2, 2, 2, 2};
  auto peer = [&](Status& out) {  // rank 1 waits for its own all_reduce, so runs it at once
    out = lw.comm(1).allReduce("start", mw::Tensor::cpu(v1, 4)).wait(mw::deadlineIn(20s));
  };

  SECTION("test() polling") {
    Status peer_status;
    std::thread t(peer, std::ref(peer_status));
    Work w = lw.comm(0).allReduce("start", mw::Tensor::cpu(v0, 4));
    const auto start = mw::Clock::now();
    while (!w.test() && elapsedSince(start) < 20s) std::this_thread::sleep_for(1ms);
    const auto took = elapsedSince(start);
    t.join();
    REQUIRE(peer_status.ok());
    REQUIRE(w.test());
    CHECK(w.status().ok());
    CHECK(took < 5s);
    CHECK(v0[0] == 3);
  }
  SECTION("waitAny") {
    Status peer_status;
    std::thread t(peer, std::ref(peer_status));
    std::vector<Work> ws{lw.comm(0).allReduce("start", mw::Tensor::cpu(v0, 4))};
    const auto start = mw::Clock::now();
    auto i = mw::waitAny(ws, mw::deadlineIn(20s));
    const auto took = elapsedSince(start);
    t.join();
    REQUIRE(peer_status.ok());
    REQUIRE(i.ok());
    CHECK(ws[0].status().ok());
    CHECK(took < 5s);
  }
  SECTION("wait() while another thread runs the world's previous operation") {
    // Rank 0: thread x runs all_reduce #1 inline, stalled until rank 1 arrives 300 ms later;
    // meanwhile this thread queues #2 and waits, which it cannot run itself.
    Status first, peer_first, peer_second;
    std::thread x([&] {
      first = lw.comm(0).allReduce("start", mw::Tensor::cpu(v0, 4)).wait(mw::deadlineIn(20s));
    });
    std::this_thread::sleep_for(100ms);
    Work second = lw.comm(0).allReduce("start", mw::Tensor::cpu(v0, 4));
    std::thread p([&] {
      std::this_thread::sleep_for(200ms);
      peer(peer_first);
      peer(peer_second);
    });
    const auto start = mw::Clock::now();
    Status s = second.wait(mw::deadlineIn(20s));
    const auto took = elapsedSince(start);
    x.join();
    p.join();
    REQUIRE(first.ok());
    REQUIRE(peer_first.ok());
    REQUIRE(peer_second.ok());
    REQUIRE(s.ok());
    CHECK(took < 5s);
  }
}

TEST_CASE("an operation nobody waits for starts at the end of its grace", "[runtime][work]") {
  mw::test::LocalWorld lw("grace", 2, 1000ms, 60000ms, 300ms);
  INFO(lw.status().toString());
  REQUIRE(lw.status().ok());
  float v0[4] = {1, 1, 1, 1}, v1[4] = {2, 2, 2, 2};
  // Rank 1 runs its side at once; it completes when rank 0's executor starts rank 0's side, which
  // nothing else starts: this thread only sleeps meanwhile.
  Status peer_status;
  mw::Clock::time_point peer_done;
  const auto submitted = mw::Clock::now();
  Work w = lw.comm(0).allReduce("grace", mw::Tensor::cpu(v0, 4));
  std::thread t([&] {
    peer_status = lw.comm(1).allReduce("grace", mw::Tensor::cpu(v1, 4)).wait(mw::deadlineIn(20s));
    peer_done = mw::Clock::now();
  });
  t.join();
  REQUIRE(peer_status.ok());
  CHECK(peer_done - submitted >= 300ms);
  CHECK(peer_done - submitted < 5s);
  REQUIRE(w.wait(mw::deadlineIn(1s)).ok());
  CHECK(v0[0] == 3);
}

TEST_CASE("sends and receives waited for in short slices lose nothing on reused buffers",
          "[runtime][work]") {
  // A caller whose deadline comes before the operation's runs it itself until then, and the
  // world's yielder interrupts its Gloo wait at that deadline (a wait on that one buffer: a
  // Gloo timeout would close every pair). The slices here end before, during and after the
  // transfers, so interruptions also land after a wait has succeeded; the same memory is used by
  // every message, so a leftover interruption would fail the next one on the recycled buffer.
  mw::test::LocalWorld w("slices", 2);
  REQUIRE(w.status().ok());
  constexpr int kMessages = 2000;
  std::vector<int32_t> in(4096), out(4096);
  auto slicedWait = [](const Work& work, int i) {
    const auto slice = std::chrono::microseconds(50 + (i * 37) % 400);
    for (auto until = mw::deadlineIn(20s); mw::Clock::now() < until;) {
      Status s = work.wait(mw::deadlineIn(slice));
      if (s.code() != Code::kTimeout) return s;
    }
    return Status(Code::kTimeout, "not done within 20 s");
  };
  Status peer_status;
  std::thread peer([&] {  // rank 1 echoes every message back, with its own sliced waits
    std::vector<int32_t> buf(4096);
    for (int i = 0; i < kMessages && peer_status.ok(); ++i) {
      peer_status = slicedWait(w.comm(1).irecv(w.name(), mw::Tensor::cpu(buf.data(), 4096), 0), i);
      if (peer_status.ok())
        peer_status =
            slicedWait(w.comm(1).isend(w.name(), mw::Tensor::cpu(buf.data(), 4096), 0), i);
    }
  });
  int wrong = 0;
  Status s;
  for (int i = 0; i < kMessages && s.ok(); ++i) {
    std::fill(in.begin(), in.end(), i);
    s = slicedWait(w.comm(0).isend(w.name(), mw::Tensor::cpu(in.data(), 4096), 1), i + 1);
    if (s.ok()) s = slicedWait(w.comm(0).irecv(w.name(), mw::Tensor::cpu(out.data(), 4096), 1), i);
    if (s.ok()) wrong += std::count_if(out.begin(), out.end(), [&](int32_t v) { return v != i; });
  }
  peer.join();
  INFO(s.toString() << " / peer: " << peer_status.toString());
  REQUIRE(s.ok());
  REQUIRE(peer_status.ok());
  CHECK(wrong == 0);
  CHECK(w.manager(0).worlds().at(0).state == mw::WorldState::kHealthy);
}

TEST_CASE("a short wait on a receive returns at its deadline while the completer is blocked",
          "[runtime][work]") {
  // An isend nobody waits for and nobody receives keeps the world's completer in Gloo for as long
  // as it lasts; a caller's short wait on a receive must still end at the caller's deadline (the
  // interruption comes from a thread of its own), and the receive then completes later.
  mw::test::LocalWorld w("blocked_completer", 2);
  REQUIRE(w.status().ok());
  int32_t stuck = 1, x = 0, y = 7;
  Work unmatched = w.comm(0).isend(w.name(), mw::Tensor::cpu(&stuck, 1), 1, /*tag=*/99);
  std::this_thread::sleep_for(50ms);  // past its grace: the completer has taken it
  Work r = w.comm(0).irecv(w.name(), mw::Tensor::cpu(&x, 1), 1, 5);
  for (int i = 0; i < 5; ++i) {
    const auto start = mw::Clock::now();
    CHECK(r.wait(mw::deadlineIn(40ms)).code() == Code::kTimeout);
    const auto took = elapsedSince(start);
    CHECK(took >= 35ms);
    CHECK(took < mw::test::scaled(1000));  // a hang guard; the bound is in bench/
  }
  REQUIRE(w.comm(1).send(w.name(), mw::Tensor::cpu(&y, 1), 0, 5).ok());
  REQUIRE(r.wait(mw::deadlineIn(20s)).ok());
  CHECK(x == 7);
  int32_t sink = 0;  // let the unmatched send finish too
  REQUIRE(w.comm(1).recv(w.name(), mw::Tensor::cpu(&sink, 1), 0, 99).ok());
  REQUIRE(unmatched.wait(mw::deadlineIn(20s)).ok());
  CHECK(sink == 1);
}
