// Several threads of one member use one world at once (the README says any thread may call):
// point-to-point messages never wait behind a collective, nor collectives behind them.
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "multiworld/multiworld.h"
#include "support/local_worlds.h"
#include "support/util.h"

using namespace std::chrono_literals;
using mw::test::LocalWorld;
using mw::test::scaled;

namespace {

// Rank r streams `n` messages to its peer and receives as many (tag 7), each send and receive
// waited for one after the other, as a serving loop does; returns the first failure.
mw::Status pingPong(LocalWorld& w, const std::string& world, int r, int n) {
  const int peer = 1 - r;
  std::vector<float> out(4096, static_cast<float>(r)), in(4096, -1.0f);
  for (int i = 0; i < n; ++i) {
    // Rank 0 sends first, rank 1 receives first: each step needs the peer's previous one.
    mw::Work a = r == 0 ? w.comm(r).isend(world, mw::Tensor::cpu(out.data(), out.size()), peer, 7)
                        : w.comm(r).irecv(world, mw::Tensor::cpu(in.data(), in.size()), peer, 7);
    if (auto s = a.wait(mw::deadlineIn(scaled(20000))); !s.ok()) return s;
    mw::Work b = r == 0 ? w.comm(r).irecv(world, mw::Tensor::cpu(in.data(), in.size()), peer, 7)
                        : w.comm(r).isend(world, mw::Tensor::cpu(out.data(), out.size()), peer, 7);
    if (auto s = b.wait(mw::deadlineIn(scaled(20000))); !s.ok()) return s;
    if (in[0] != static_cast<float>(peer)) {
      return mw::Status(mw::Code::kRemoteError, "wrong data received at step " + std::to_string(i));
    }
  }
  return mw::Status::Ok();
}

// Every collective kind in turn, `n` rounds, checking all_reduce's result.
mw::Status collectives(LocalWorld& w, const std::string& world, int r, int n) {
  auto& c = w.comm(r);
  const int size = w.size();
  std::vector<float> x(1024), gathered(1024 * size), exchanged(1024 * size), scattered(1024);
  for (int i = 0; i < n; ++i) {
    std::fill(x.begin(), x.end(), 1.0f);
    auto t = mw::Tensor::cpu(x.data(), x.size());
    auto all = mw::Tensor::cpu(gathered.data(), gathered.size());
    auto part = mw::Tensor::cpu(scattered.data(), scattered.size());
    const auto d = mw::deadlineIn(scaled(20000));
    std::vector<mw::Work> ops;
    ops.push_back(c.allReduce(world, t));
    if (auto s = ops.back().wait(d); !s.ok()) return s;
    if (x[0] != static_cast<float>(size))
      return mw::Status(mw::Code::kRemoteError, "bad all_reduce");
    ops.push_back(c.broadcast(world, t, i % size));
    ops.push_back(c.reduce(world, t, 0));
    ops.push_back(c.allGather(world, t, all));
    ops.push_back(c.gather(world, t, all, 1 % size));
    ops.push_back(c.scatter(world, all, part, 0));
    ops.push_back(c.reduceScatter(world, all, part));
    ops.push_back(c.allToAll(world, all, mw::Tensor::cpu(exchanged.data(), exchanged.size())));
    ops.push_back(c.barrier(world));
    for (auto& op : ops) {
      if (auto s = op.wait(d); !s.ok()) return s;
    }
  }
  return mw::Status::Ok();
}

}  // namespace

TEST_CASE("threads streaming isend/irecv beside threads running collectives on one world",
          "[runtime][threads]") {
  LocalWorld w("mix", 2);
  REQUIRE(w.status().ok());
  std::vector<mw::Status> p2p(2), coll(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { p2p[r] = pingPong(w, "mix", r, 400); });
    threads.emplace_back([&, r] { coll[r] = collectives(w, "mix", r, 40); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": p2p " << p2p[r].toString() << "; collectives " << coll[r].toString());
    CHECK(p2p[r].ok());
    CHECK(coll[r].ok());
  }
}

TEST_CASE("two worlds, each with its own p2p and collective threads, in the same processes",
          "[runtime][threads]") {
  LocalWorld a("mix_a", 2), b("mix_b", 2);
  REQUIRE(a.status().ok());
  REQUIRE(b.status().ok());
  std::vector<mw::Status> got(8);
  std::vector<std::thread> threads;
  int k = 0;
  for (LocalWorld* w : {&a, &b}) {
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, w, r, i = k++] { got[i] = pingPong(*w, w->name(), r, 200); });
      threads.emplace_back([&, w, r, i = k++] { got[i] = collectives(*w, w->name(), r, 20); });
    }
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("thread " << i << ": " << got[i].toString());
    CHECK(got[i].ok());
  }
}

TEST_CASE("a point-to-point operation nobody waits for completes behind a blocked collective",
          "[runtime][threads]") {
  // Rank 0 starts an all_reduce that rank 1 joins only after it has received rank 0's message:
  // the message must not wait for the collective queued before it.
  LocalWorld w("p2p_first", 2);
  REQUIRE(w.status().ok());
  float v0 = 1, v1 = 1, msg = 42, got = 0;
  auto ar0 = w.comm(0).allReduce("p2p_first", mw::Tensor::cpu(&v0, 1));
  auto send = w.comm(0).isend("p2p_first", mw::Tensor::cpu(&msg, 1), 1);
  REQUIRE(w.comm(1)
              .irecv("p2p_first", mw::Tensor::cpu(&got, 1), 0)
              .wait(mw::deadlineIn(scaled(10000)))
              .ok());
  CHECK(got == 42);
  CHECK(send.wait(mw::deadlineIn(scaled(10000))).ok());  // completes while ar0 waits for rank 1
  CHECK_FALSE(ar0.test());
  REQUIRE(w.comm(1)
              .allReduce("p2p_first", mw::Tensor::cpu(&v1, 1))
              .wait(mw::deadlineIn(scaled(10000)))
              .ok());
  CHECK(ar0.wait(mw::deadlineIn(scaled(10000))).ok());
  CHECK(v0 == 2);
  CHECK(v1 == 2);
}
