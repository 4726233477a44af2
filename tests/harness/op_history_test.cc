// The worker's operation history (chaos/op_history.h): off keeps nothing; on, operations come out
// in the order added, up to the limit, then one history_full line at the first left out; adds
// from several threads lose nothing under the limit.
#include "chaos/op_history.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace mw::chaos {
namespace {

namespace lines = telemetry_lines;

lines::History op(int64_t start, uint64_t seq) {
  return lines::History{start, start + 1, "w1", 1, "recv", 1, seq, "ok"};
}

TEST_CASE("a history keeps operations up to its limit, then says where it stopped",
          "[harness][history]") {
  OpHistory off(0);
  CHECK_FALSE(off.on());
  off.add(op(1, 0));
  CHECK(off.take().empty());

  OpHistory h(3);
  CHECK(h.on());
  h.add(op(10, 0));
  h.add(op(20, 1));
  auto first = h.take();
  REQUIRE(first.size() == 2);
  CHECK(std::get<lines::History>(first[0]).seq == 0);
  CHECK(std::get<lines::History>(first[1]).seq == 1);
  CHECK(h.take().empty());  // taken once
  h.add(op(30, 2));
  h.add(op(40, 3));  // past the limit: its start is where the history stopped
  h.add(op(50, 4));
  auto rest = h.take();
  REQUIRE(rest.size() == 2);
  CHECK(std::get<lines::History>(rest[0]).seq == 2);
  CHECK(std::get<lines::HistoryFull>(rest[1]).t_ns == 40);
  h.add(op(60, 5));
  CHECK(h.take().empty());
}

TEST_CASE("a history loses nothing added from several threads", "[harness][history]") {
  OpHistory h(100000);
  std::vector<std::thread> threads;
  std::vector<lines::Line> taken;
  std::atomic<bool> done{false};
  std::thread taker([&] {
    while (!done.load()) {
      for (auto& l : h.take()) taken.push_back(std::move(l));
    }
  });
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 5000; ++i) h.add(op(t, i));
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  taker.join();
  for (auto& l : h.take()) taken.push_back(std::move(l));
  REQUIRE(taken.size() == 20000);
  std::vector<uint64_t> next(4, 0);  // each thread's operations in the order it added them
  for (const auto& l : taken) {
    const auto& x = std::get<lines::History>(l);
    CHECK(x.seq == next.at(static_cast<size_t>(x.start_ns))++);
  }
}

}  // namespace
}  // namespace mw::chaos
