// A traffic loop's bookkeeping (chaos/traffic_check.h): a receiver that gets each sender's next
// operation finds nothing, and one that gets a repeated, lost, stale, another incarnation's or a
// corrupted tensor finds exactly that, once, and then judges what follows correctly.
#include "chaos/traffic_check.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <span>
#include <vector>

namespace mw::chaos {
namespace {

constexpr size_t kCount = 513;
constexpr DType kType = DType::kFloat32;

// A sender and a receiver of one world, each with its own TrafficCheck, as two members keep them.
struct Link {
  TrafficCheck tx{kType, kCount, 1}, rx{kType, kCount, 1};
  std::vector<std::vector<float>> sent;  // every tensor the sender filled, by seq

  explicit Link(uint64_t nonce, uint64_t generation = 1) { begin(nonce, generation); }
  void begin(uint64_t nonce, uint64_t generation) {
    tx.begin(generation, nonce, 2);
    rx.begin(generation, nonce, 2);
    sent.clear();
  }
  // The sender's next operation (rank 1), kept.
  const std::vector<float>& send() {
    sent.emplace_back(kCount);
    tx.fill(sent.back().data(), 1);
    return sent.back();
  }
};

TEST_CASE("operations delivered in order are judged right", "[traffic_check]") {
  Link l(42);
  for (int i = 0; i < 50; ++i) CHECK_FALSE(l.rx.receive(l.send().data(), 1));
}

TEST_CASE("a repeated operation is found once, named, and what follows is right",
          "[traffic_check]") {
  Link l(42);
  for (int i = 0; i < 5; ++i) REQUIRE_FALSE(l.rx.receive(l.send().data(), 1));
  const std::vector<float> again = l.sent[3];
  auto f = l.rx.receive(again.data(), 1);
  REQUIRE(f);
  CHECK(f->seq == 5);
  CHECK(f->mismatch.wrong == kCount);
  CHECK(f->detail ==
        "from rank 1: the content of its seq 3, not seq 5 (an earlier operation's, "
        "delivered again)");
  // The repeat took no operation's place: the sender's next (seq 5) is right.
  CHECK_FALSE(l.rx.receive(l.send().data(), 1));
  CHECK_FALSE(l.rx.receive(l.send().data(), 1));
}

TEST_CASE("lost operations are found once and named", "[traffic_check]") {
  Link l(7);
  REQUIRE_FALSE(l.rx.receive(l.send().data(), 1));  // seq 0
  l.send();                                         // seq 1: lost
  l.send();                                         // seq 2: lost
  auto f = l.rx.receive(l.send().data(), 1);        // seq 3
  REQUIRE(f);
  CHECK(f->seq == 1);
  CHECK(f->detail == "from rank 1: the content of its seq 3, not seq 1 (seq 1 to 2 missing)");
  CHECK_FALSE(l.rx.receive(l.send().data(), 1));  // seq 4: in step again
  CHECK(l.rx.next(1) == 5);                       // what the history numbers it by
  CHECK(l.tx.next(1) == 5);
  CHECK(l.rx.next(0) == 0);
  CHECK(l.rx.next(2) == 0);  // no such member
  l.send();                  // seq 5: lost
  f = l.rx.receive(l.send().data(), 1);
  REQUIRE(f);
  CHECK(f->detail == "from rank 1: the content of its seq 6, not seq 5 (seq 5 missing)");
}

TEST_CASE("a corrupted element is found at its offset, with both values", "[traffic_check]") {
  Link l(9);
  std::vector<float> t = l.send();
  t[100] += 1;
  auto f = l.rx.receive(t.data(), 1);
  REQUIRE(f);
  CHECK(f->seq == 0);
  CHECK(f->mismatch.offset == 100);
  CHECK(f->mismatch.wrong == 1);
  CHECK(f->mismatch.found == f->mismatch.expected + 1);
  CHECK(f->detail == "from rank 1: 1 of 513 elements wrong");
  CHECK_FALSE(l.rx.receive(l.send().data(), 1));  // the next one is judged as usual
}

TEST_CASE("the previous incarnation's data is named as such", "[traffic_check]") {
  Link l(100);
  for (int i = 0; i < 3; ++i) REQUIRE_FALSE(l.rx.receive(l.send().data(), 1));
  const std::vector<float> stale = l.sent[2];
  l.tx.begin(2, 200, 2);
  l.rx.begin(2, 200, 2);
  auto f = l.rx.receive(stale.data(), 1);
  REQUIRE(f);
  CHECK(f->detail ==
        "from rank 1: the content of its seq 2 of the world's previous incarnation, not seq 0 of "
        "this one");
}

TEST_CASE("content nobody sent is said to be no operation's", "[traffic_check]") {
  Link l(5);
  std::vector<float> zeros(kCount, 0.0f);
  auto f = l.rx.receive(zeros.data(), 1);
  REQUIRE(f);
  CHECK(f->detail ==
        "from rank 1: every element wrong, and not the content of any of its operations near seq "
        "0");
}

TEST_CASE("nothing is judged without a nonce, or after an operation failed", "[traffic_check]") {
  Link l(0);
  std::vector<float> zeros(kCount, 0.0f);
  CHECK_FALSE(l.rx.judging());
  CHECK_FALSE(l.rx.receive(zeros.data(), 1));
  Link m(3);
  REQUIRE(m.rx.judging());
  m.rx.failed();
  CHECK_FALSE(m.rx.judging());
  CHECK_FALSE(m.rx.receive(zeros.data(), 1));
  m.rx.begin(2, 4, 2);  // the next incarnation is judged again
  CHECK(m.rx.judging());
  CHECK(m.rx.receive(zeros.data(), 1));
}

TEST_CASE("an all-reduce's result is judged against every member's content of its seq",
          "[traffic_check]") {
  constexpr int kMembers = 3;
  std::vector<TrafficCheck> members;
  for (int r = 0; r < kMembers; ++r) {
    members.emplace_back(kType, kCount, kMembers);
    members.back().begin(1, 77, kMembers);
  }
  for (int op = 0; op < 4; ++op) {
    std::vector<std::vector<float>> in(kMembers, std::vector<float>(kCount));
    for (int r = 0; r < kMembers; ++r) members[r].fill(in[r].data(), r);
    std::vector<float> sum(kCount, 0.0f);
    for (int r = 0; r < kMembers; ++r) {
      for (size_t i = 0; i < kCount; ++i) sum[i] += in[r][i];
    }
    for (int r = 0; r < kMembers; ++r) {
      std::vector<float> got = sum;
      if (op == 2 && r == 1) got[5] = -1;  // one member's result corrupted
      auto f = members[r].reduced(got.data(), r);
      INFO("op " << op << " rank " << r);
      CHECK(f.has_value() == (op == 2 && r == 1));
      if (f) {
        CHECK(f->seq == 2);
        CHECK(f->mismatch.offset == 5);
        CHECK(f->detail == "the sum of 3 members' contents: 1 of 513 elements wrong");
      }
    }
  }
}

TEST_CASE(
    "a large tensor is sampled: its ends and one stripe per operation, every element in "
    "kStripes operations",
    "[traffic_check]") {
  using Range = TrafficCheck::Range;
  constexpr size_t kBig = 100000;
  const TrafficCheck c(kType, kBig, 1);
  const size_t stripe = (kBig + TrafficCheck::kStripes - 1) / TrafficCheck::kStripes;  // 1563
  auto r0 = c.regions(0);
  REQUIRE(r0.size() == 2);  // the first stripe begins with the head
  CHECK((r0[0].begin == 0 && r0[0].end == stripe));
  CHECK((r0[1].begin == kBig - TrafficCheck::kEdge && r0[1].end == kBig));
  auto r5 = c.regions(5);
  REQUIRE(r5.size() == 3);
  CHECK((r5[1].begin == 5 * stripe && r5[1].end == 6 * stripe));
  std::vector<bool> seen(kBig, false);
  for (uint64_t seq = 0; seq < TrafficCheck::kStripes; ++seq) {
    for (const Range& r : c.regions(seq)) {
      for (size_t i = r.begin; i < r.end; ++i) seen[i] = true;
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), false) == 0);
  // Small tensors, and every_element, are whole.
  CHECK(TrafficCheck(kType, TrafficCheck::kWhole, 1).regions(9).size() == 1);
  auto all = TrafficCheck(kType, kBig, 1, TrafficCheck::Coverage::kEveryElement).regions(9);
  REQUIRE(all.size() == 1);
  CHECK((all[0].begin == 0 && all[0].end == kBig));
}

TEST_CASE("sampled: another operation's tensor is found, a flip outside the sample is not",
          "[traffic_check]") {
  constexpr size_t kBig = 100000;
  TrafficCheck tx(kType, kBig, 1), rx(kType, kBig, 1);
  tx.begin(1, 11, 2);
  rx.begin(1, 11, 2);
  std::vector<float> a(kBig), b(kBig);
  tx.fill(a.data(), 1);  // seq 0
  tx.fill(b.data(), 1);  // seq 1
  a[50000] += 1;         // outside seq 0's sample
  CHECK_FALSE(rx.receive(a.data(), 1));
  a[10] += 1;  // in the head, which every operation checks
  // Seq 0's tensor again, now also changed in its head: no operation's content.
  auto f = rx.receive(a.data(), 1);
  REQUIRE(f);
  CHECK(f->detail ==
        "from rank 1: every checked element wrong, and not the content of any of its operations "
        "near seq 1");
  // Seq 1's, with one element of its sample changed: named with the sample's size.
  std::vector<float> c = b;
  c[20] += 1;
  TrafficCheck rx3(kType, kBig, 1);
  rx3.begin(1, 11, 2);
  rx3.receive(a.data(), 1);  // seq 0: wrong, whatever it says
  auto h = rx3.receive(c.data(), 1);
  REQUIRE(h);
  CHECK(h->detail == "from rank 1: 1 of 1691 checked elements (of 100000) wrong");
  // A whole other operation's: named.
  TrafficCheck rx2(kType, kBig, 1);
  rx2.begin(1, 11, 2);
  auto g = rx2.receive(b.data(), 1);
  REQUIRE(g);
  CHECK(g->detail == "from rank 1: the content of its seq 1, not seq 0 (seq 0 missing)");
}

TEST_CASE("sampled all-reduces leave every element outside the sample at 0", "[traffic_check]") {
  constexpr size_t kBig = 20000;
  constexpr int kMembers = 2;
  std::vector<TrafficCheck> m;
  for (int r = 0; r < kMembers; ++r) {
    m.emplace_back(kType, kBig, kMembers);
    m.back().begin(1, 5, kMembers);
  }
  std::vector<std::vector<float>> buf(kMembers, std::vector<float>(kBig, 0.0f));
  for (int op = 0; op < 70; ++op) {
    for (int r = 0; r < kMembers; ++r) m[r].fill(buf[r].data(), r);
    std::vector<float> sum(kBig, 0.0f);
    for (int r = 0; r < kMembers; ++r) {
      for (size_t i = 0; i < kBig; ++i) sum[i] += buf[r][i];
    }
    for (int r = 0; r < kMembers; ++r) {
      buf[r] = sum;
      INFO("op " << op << " rank " << r);
      CHECK_FALSE(m[r].reduced(buf[r].data(), r));
      CHECK(std::count(buf[r].begin(), buf[r].end(), 0.0f) == static_cast<long>(kBig));
    }
  }
}

TEST_CASE("an all-reduce's earlier sum delivered again is named", "[traffic_check]") {
  constexpr int kMembers = 2;
  std::vector<TrafficCheck> m;
  for (int r = 0; r < kMembers; ++r) {
    m.emplace_back(kType, kCount, kMembers);
    m.back().begin(1, 9, kMembers);
  }
  std::vector<std::vector<float>> sums;  // by seq
  for (int op = 0; op < 4; ++op) {
    std::vector<std::vector<float>> in(kMembers, std::vector<float>(kCount));
    for (int r = 0; r < kMembers; ++r) m[r].fill(in[r].data(), r);
    sums.emplace_back(kCount, 0.0f);
    for (int r = 0; r < kMembers; ++r) {
      for (size_t i = 0; i < kCount; ++i) sums.back()[i] += in[r][i];
    }
    std::vector<float> got = op == 3 ? sums[1] : sums.back();  // seq 3 gets seq 1's sum
    auto f = m[0].reduced(got.data(), 0);
    INFO("op " << op);
    REQUIRE(f.has_value() == (op == 3));
    if (f) {
      CHECK(f->seq == 3);
      CHECK(f->detail ==
            "the sum of 2 members' contents: 513 of 513 elements wrong: the sum of its seq 1, not "
            "seq 3 (an earlier operation's, delivered again)");
    }
  }
  // Wrong everywhere and no earlier sum: only the count.
  std::vector<std::vector<float>> in(kMembers, std::vector<float>(kCount));
  for (int r = 0; r < kMembers; ++r) m[r].fill(in[r].data(), r);
  std::vector<float> junk(kCount, -3.0f);
  auto f = m[0].reduced(junk.data(), 0);
  REQUIRE(f);
  CHECK(f->detail == "the sum of 2 members' contents: 513 of 513 elements wrong");
}

// A tensor in "device memory" (another vector) seen through a host mirror: the check copies in
// exactly what it reads and copies out what it writes, so a fault on the device is found as on the
// host, named the same way, and the mirror's own stale contents never decide anything.
struct FakeDevice {
  std::vector<float> mem, mirror;
  size_t loaded = 0, stored = 0;  // elements copied each way
  explicit FakeDevice(size_t n) : mem(n, 0.0f), mirror(n, 0.0f) {}
  TrafficCheck::Mirror mirrorOf() {
    return {[this](std::span<const TrafficCheck::Range> rs) {
              for (const auto& r : rs) {
                std::copy(mem.begin() + r.begin, mem.begin() + r.end, mirror.begin() + r.begin);
                loaded += r.end - r.begin;
              }
            },
            [this](std::span<const TrafficCheck::Range> rs) {
              for (const auto& r : rs) {
                std::copy(mirror.begin() + r.begin, mirror.begin() + r.end, mem.begin() + r.begin);
                stored += r.end - r.begin;
              }
            }};
  }
};

TEST_CASE("through a mirror: only the sample is copied, and a device's wrong data is found",
          "[traffic_check]") {
  constexpr size_t kBig = 100000;
  TrafficCheck tx(kType, kBig, 1), rx(kType, kBig, 1);
  FakeDevice a(kBig), b(kBig);  // the sender's and the receiver's tensors
  tx.setMirror(a.mirrorOf());
  rx.setMirror(b.mirrorOf());
  tx.begin(1, 21, 2);
  rx.begin(1, 21, 2);
  size_t sample = 0;
  for (const auto& r : tx.regions(0)) sample += r.end - r.begin;
  tx.fill(a.mirror.data(), 1);  // seq 0: written to the mirror, then stored to the device
  CHECK(a.stored == sample);
  CHECK(a.loaded == 0);
  b.mem = a.mem;                                       // the transport moves the device's tensor
  std::fill(b.mirror.begin(), b.mirror.end(), -1.0f);  // stale: must be loaded before judging
  CHECK_FALSE(rx.receive(b.mirror.data(), 1));
  CHECK(b.loaded == sample);
  // Seq 1 arrives with seq 0's tensor (a repeat). Naming it reads seq 0's sample from the
  // device, not what the mirror held.
  const std::vector<float> seq0 = a.mem;
  tx.fill(a.mirror.data(), 1);
  const std::vector<float> seq1 = a.mem;
  b.mem = seq0;
  std::fill(b.mirror.begin(), b.mirror.end(), -1.0f);
  auto f = rx.receive(b.mirror.data(), 1);
  REQUIRE(f);
  CHECK(f->detail ==
        "from rank 1: the content of its seq 0, not seq 1 (an earlier operation's, delivered "
        "again)");
  // A bit flipped on the device, in the sample: found, with its element.
  b.mem = seq1;  // seq 1 is still expected: a repeat takes no operation's place
  b.mem[5] += 1;
  auto g = rx.receive(b.mirror.data(), 1);
  REQUIRE(g);
  CHECK(g->mismatch.offset == 5);
  // An all-reduce through a mirror stores its zeros back to the device.
  TrafficCheck ar(kType, kBig, 1);
  FakeDevice d(kBig);
  ar.setMirror(d.mirrorOf());
  ar.begin(1, 3, 1);
  ar.fill(d.mirror.data(), 0);
  CHECK_FALSE(ar.reduced(d.mirror.data(), 0));  // one member: the sum is its own content
  CHECK(std::count(d.mem.begin(), d.mem.end(), 0.0f) == static_cast<long>(kBig));
}

}  // namespace
}  // namespace mw::chaos
