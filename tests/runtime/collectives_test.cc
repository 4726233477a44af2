// Exact results of point-to-point operations and every collective for world sizes 2, 3 and 4 and
// every dtype; argument validation; members whose calls disagree.
//
// Members are threads of this process (LocalWorld). Catch2 assertions are not thread-safe, so the
// member threads only record statuses and buffers; the test thread checks them after the join.
// Every value used is a small integer, exact in every dtype (uint8 and bfloat16 hold integers up to
// 255 exactly, float16 up to 2048).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/reduce.h"
#include "multiworld/multiworld.h"
#include "support/local_worlds.h"

using namespace std::chrono_literals;

namespace {

using mw::Code;
using mw::DType;
using mw::ReduceOp;
using mw::Status;
using mw::Work;
using mw::test::LocalWorld;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt32, DType::kInt64,
                             DType::kFloat16, DType::kBFloat16, DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
constexpr int kSizes[] = {2, 3, 4};
// Elements per rank (or per block): none, one, and counts that no world size divides.
constexpr size_t kCounts[] = {0, 1, 7, 1001};
// 6 MiB of float32: every ring chunk spans several 512 KiB segments.
constexpr size_t kLargeCount = 1572865;
constexpr auto kWait = 20s;

// kCounts, plus the large count (split over `blocks` blocks) for float32.
std::vector<size_t> countsFor(DType t, int blocks = 1) {
  std::vector<size_t> c(std::begin(kCounts), std::end(kCounts));
  if (t == DType::kFloat32) c.push_back(kLargeCount / static_cast<size_t>(blocks));
  return c;
}

// `count` elements of one dtype, read and written as doubles.
class Buffer {
 public:
  Buffer(DType t, size_t count, double fill = 0)
      : t_(t), n_(count), bytes_(count * mw::dtypeSize(t)) {
    for (size_t i = 0; i < n_; ++i) set(i, fill);
  }
  template <typename F>
  static Buffer of(DType t, size_t count, F value) {
    Buffer b(t, count);
    for (size_t i = 0; i < count; ++i) b.set(i, value(i));
    return b;
  }

  void set(size_t i, double v) {
    unsigned char* p = bytes_.data() + i * mw::dtypeSize(t_);
    switch (t_) {
      case DType::kFloat32:
        return put(p, static_cast<float>(v));
      case DType::kFloat64:
        return put(p, v);
      case DType::kInt32:
        return put(p, static_cast<int32_t>(v));
      case DType::kInt64:
        return put(p, static_cast<int64_t>(v));
      case DType::kFloat16:
        return put(p, mw::detail::floatToHalf(static_cast<float>(v)));
      case DType::kBFloat16:
        return put(p, mw::detail::floatToBfloat16(static_cast<float>(v)));
      case DType::kUInt8:
        return put(p, static_cast<uint8_t>(v));
    }
  }
  double get(size_t i) const {
    const unsigned char* p = bytes_.data() + i * mw::dtypeSize(t_);
    switch (t_) {
      case DType::kFloat32:
        return take<float>(p);
      case DType::kFloat64:
        return take<double>(p);
      case DType::kInt32:
        return take<int32_t>(p);
      case DType::kInt64:
        return static_cast<double>(take<int64_t>(p));
      case DType::kFloat16:
        return mw::detail::halfToFloat(take<uint16_t>(p));
      case DType::kBFloat16:
        return mw::detail::bfloat16ToFloat(take<uint16_t>(p));
      case DType::kUInt8:
        return take<uint8_t>(p);
    }
    return -1;
  }
  size_t count() const { return n_; }
  mw::Tensor tensor() { return mw::Tensor{bytes_.data(), t_, n_, mw::Device::cpu()}; }

 private:
  template <typename T>
  static void put(unsigned char* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }
  template <typename T>
  static T take(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  DType t_;
  size_t n_;
  std::vector<unsigned char> bytes_;
};

// "" when b[i] == expect(i) for every i, otherwise the first difference.
template <typename F>
std::string mismatch(const Buffer& b, F expect) {
  for (size_t i = 0; i < b.count(); ++i) {
    if (b.get(i) != expect(i)) {
      return "element " + std::to_string(i) + " of " + std::to_string(b.count()) + " is " +
             std::to_string(b.get(i)) + ", expected " + std::to_string(expect(i));
    }
  }
  return "";
}

// Payload of data-movement operations: 1..199, different for each source rank.
double data(int rank, size_t i) { return 1 + static_cast<double>((rank * 37 + i * 3) % 199); }

// Inputs of each reduce op: sums stay below 64, products below 16.
double reduceInput(ReduceOp op, int rank, size_t i) {
  switch (op) {
    case ReduceOp::kSum:
      return 1 + rank + static_cast<double>(i % 13);
    case ReduceOp::kProd:
      return (i + rank) % 3 == 0 ? 2 : 1;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((i * 7 + rank * 5) % 23);
  }
  return 0;
}

double reduced(ReduceOp op, int size, size_t i) {
  double acc = reduceInput(op, 0, i);
  for (int r = 1; r < size; ++r) {
    double v = reduceInput(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  return acc;
}

// Runs op(rank) on every member's own thread and waits for each member's Work.
std::vector<Status> runAll(LocalWorld& w, const std::function<Work(int)>& op,
                           std::chrono::seconds wait = kWait) {
  std::vector<Status> st(static_cast<size_t>(w.size()));
  w.parallel([&](int r) { st[r] = op(r).wait(mw::deadlineIn(wait)); });
  return st;
}

void requireAllOk(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) {
    INFO("rank " << r << ": " << st[r].toString());
    REQUIRE(st[r].ok());
  }
}

std::string combo(int size, DType t, size_t n) {
  return "size " + std::to_string(size) + ", " + mw::dtypeName(t) + " x " + std::to_string(n);
}

// One buffer per rank, filled by value(rank, i).
template <typename F>
std::vector<Buffer> perRank(int size, DType t, size_t n, F value) {
  std::vector<Buffer> v;
  for (int r = 0; r < size; ++r)
    v.push_back(Buffer::of(t, n, [&](size_t i) { return value(r, i); }));
  return v;
}

}  // namespace

TEST_CASE("isend/irecv deliver between every ordered pair of ranks", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("p2p", size);
    REQUIRE(w.status().ok());
    auto tag = [&](int src, int dst) { return 1000 + src * 10 + dst; };
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t)) {
        INFO(combo(size, t, n));
        // in[src][dst] goes to out[dst][src]; every message is in flight at once.
        std::vector<std::vector<Buffer>> in(size), out(size);
        for (int a = 0; a < size; ++a) {
          for (int b = 0; b < size; ++b) {
            const size_t len = a == b ? 0 : n;
            in[a].push_back(Buffer::of(t, len, [&](size_t i) { return data(a * size + b, i); }));
            out[a].emplace_back(t, len);
          }
        }
        std::vector<Status> st(size);
        w.parallel([&](int r) {
          std::vector<Work> works;
          for (int p = 0; p < size; ++p) {
            if (p != r)
              works.push_back(w.comm(r).irecv(w.name(), out[r][p].tensor(), p, tag(p, r)));
          }
          for (int p = 0; p < size; ++p) {
            if (p != r) works.push_back(w.comm(r).isend(w.name(), in[r][p].tensor(), p, tag(r, p)));
          }
          for (auto& wk : works) {
            Status s = wk.wait(mw::deadlineIn(kWait));
            if (st[r].ok()) st[r] = s;
          }
        });
        requireAllOk(st);
        for (int dst = 0; dst < size; ++dst) {
          for (int src = 0; src < size; ++src) {
            if (src == dst) continue;
            INFO("from " << src << " to " << dst);
            CHECK(mismatch(out[dst][src], [&](size_t i) { return data(src * size + dst, i); }) ==
                  "");
          }
        }
      }
    }
  }
}

TEST_CASE("messages on one tag arrive in the order they were sent", "[runtime][collectives]") {
  constexpr int kMessages = 4;
  constexpr int kTag = 2147483647;  // the largest tag
  for (int size : kSizes) {
    LocalWorld w("p2p-order", size);
    REQUIRE(w.status().ok());
    const int last = size - 1;
    for (DType t : kDTypes) {
      for (size_t n : {size_t{1}, size_t{1001}}) {
        INFO(combo(size, t, n));
        std::vector<Buffer> in, out;
        for (int k = 0; k < kMessages; ++k) {
          in.push_back(
              Buffer::of(t, n, [&](size_t i) { return 10 * k + static_cast<double>(i % 7); }));
          out.emplace_back(t, n, 255);
        }
        std::vector<Status> st(size);
        w.parallel([&](int r) {
          std::vector<Work> works;
          for (int k = 0; k < kMessages; ++k) {
            if (r == 0) works.push_back(w.comm(r).isend(w.name(), in[k].tensor(), last, kTag));
            if (r == last) works.push_back(w.comm(r).irecv(w.name(), out[k].tensor(), 0, kTag));
          }
          for (auto& wk : works) {
            Status s = wk.wait(mw::deadlineIn(kWait));
            if (st[r].ok()) st[r] = s;
          }
        });
        requireAllOk(st);
        for (int k = 0; k < kMessages; ++k) {
          INFO("message " << k);
          CHECK(mismatch(out[k], [&](size_t i) { return 10 * k + static_cast<double>(i % 7); }) ==
                "");
        }
      }
    }
  }
}

TEST_CASE("broadcast copies the root's tensor to every member", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("broadcast", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t)) {
        for (int root = 0; root < size; ++root) {
          INFO(combo(size, t, n) << ", root " << root);
          auto bufs =
              perRank(size, t, n, [&](int r, size_t i) { return r == root ? data(r, i) : 0; });
          requireAllOk(runAll(
              w, [&](int r) { return w.comm(r).broadcast(w.name(), bufs[r].tensor(), root); }));
          for (int r = 0; r < size; ++r) {
            INFO("rank " << r);
            CHECK(mismatch(bufs[r], [&](size_t i) { return data(root, i); }) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("allReduce gives the exact sum, prod, min and max everywhere", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("all-reduce", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (ReduceOp op : kOps) {
        for (size_t n : countsFor(t)) {
          if (n == kLargeCount && op != ReduceOp::kSum && op != ReduceOp::kMax) continue;
          INFO(combo(size, t, n) << ", " << mw::reduceOpName(op));
          auto bufs = perRank(size, t, n, [&](int r, size_t i) { return reduceInput(op, r, i); });
          requireAllOk(runAll(
              w, [&](int r) { return w.comm(r).allReduce(w.name(), bufs[r].tensor(), op); }));
          for (int r = 0; r < size; ++r) {
            INFO("rank " << r);
            CHECK(mismatch(bufs[r], [&](size_t i) { return reduced(op, size, i); }) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("reduce leaves the exact result at every root", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("reduce", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t)) {
        for (int root = 0; root < size; ++root) {
          // Sum at every root; each other op at one root, so every op meets every dtype.
          for (ReduceOp op : kOps) {
            if (op != ReduceOp::kSum && root != size - 1) continue;
            if (op != ReduceOp::kSum && n == kLargeCount) continue;
            INFO(combo(size, t, n) << ", root " << root << ", " << mw::reduceOpName(op));
            auto bufs = perRank(size, t, n, [&](int r, size_t i) { return reduceInput(op, r, i); });
            requireAllOk(runAll(
                w, [&](int r) { return w.comm(r).reduce(w.name(), bufs[r].tensor(), root, op); }));
            CHECK(mismatch(bufs[root], [&](size_t i) { return reduced(op, size, i); }) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("allGather puts rank i's tensor in block i everywhere", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("all-gather", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t, size)) {
        INFO(combo(size, t, n));
        auto in = perRank(size, t, n, data);
        std::vector<Buffer> out(size, Buffer(t, n * size));
        requireAllOk(runAll(w, [&](int r) {
          return w.comm(r).allGather(w.name(), in[r].tensor(), out[r].tensor());
        }));
        for (int r = 0; r < size; ++r) {
          INFO("rank " << r);
          CHECK(mismatch(out[r], [&](size_t i) { return data(static_cast<int>(i / n), i % n); }) ==
                "");
        }
      }
    }
  }
}

TEST_CASE("gather collects every block at every root", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("gather", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t, size)) {
        for (int root = 0; root < size; ++root) {
          INFO(combo(size, t, n) << ", root " << root);
          auto in = perRank(size, t, n, data);
          Buffer out(t, n * size);
          requireAllOk(runAll(w, [&](int r) {
            // Other ranks pass an empty `out`.
            return w.comm(r).gather(w.name(), in[r].tensor(),
                                    r == root ? out.tensor() : mw::Tensor{}, root);
          }));
          CHECK(mismatch(out, [&](size_t i) { return data(static_cast<int>(i / n), i % n); }) ==
                "");
        }
      }
    }
  }
}

TEST_CASE("scatter sends block i of the root's tensor to rank i", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("scatter", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t, size)) {
        for (int root = 0; root < size; ++root) {
          INFO(combo(size, t, n) << ", root " << root);
          Buffer in = Buffer::of(t, n * size, [&](size_t i) { return data(root, i); });
          std::vector<Buffer> out(size, Buffer(t, n));
          requireAllOk(runAll(w, [&](int r) {
            // Other ranks pass an empty `in`.
            return w.comm(r).scatter(w.name(), r == root ? in.tensor() : mw::Tensor{},
                                     out[r].tensor(), root);
          }));
          for (int r = 0; r < size; ++r) {
            INFO("rank " << r);
            CHECK(mismatch(out[r], [&](size_t i) { return data(root, r * n + i); }) == "");
          }
        }
      }
    }
  }
}

TEST_CASE("reduceScatter sums and leaves block i at rank i", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("reduce-scatter", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t n : countsFor(t, size)) {
        INFO(combo(size, t, n));
        auto in = perRank(size, t, n * size,
                          [](int r, size_t i) { return reduceInput(ReduceOp::kSum, r, i); });
        std::vector<Buffer> out(size, Buffer(t, n));
        requireAllOk(runAll(w, [&](int r) {
          return w.comm(r).reduceScatter(w.name(), in[r].tensor(), out[r].tensor(), ReduceOp::kSum);
        }));
        for (int r = 0; r < size; ++r) {
          INFO("rank " << r);
          CHECK(mismatch(out[r],
                         [&](size_t i) { return reduced(ReduceOp::kSum, size, r * n + i); }) == "");
        }
      }
    }
  }
}

TEST_CASE("allToAll moves block j of rank i to block i of rank j", "[runtime][collectives]") {
  for (int size : kSizes) {
    LocalWorld w("all-to-all", size);
    REQUIRE(w.status().ok());
    for (DType t : kDTypes) {
      for (size_t block : countsFor(t, size)) {
        const size_t n = block * size;
        INFO(combo(size, t, n));
        auto in = perRank(size, t, n, data);
        std::vector<Buffer> out(size, Buffer(t, n));
        requireAllOk(runAll(w, [&](int r) {
          return w.comm(r).allToAll(w.name(), in[r].tensor(), out[r].tensor());
        }));
        for (int j = 0; j < size; ++j) {
          INFO("rank " << j);
          CHECK(mismatch(out[j], [&](size_t k) {
                  return data(static_cast<int>(k / block), j * block + k % block);
                }) == "");
        }
      }
    }
  }
}

TEST_CASE("barrier releases no member before every member arrived", "[runtime][collectives]") {
  constexpr int kRounds = 12;
  for (int size : kSizes) {
    INFO("size " << size);
    LocalWorld w("barrier", size);
    REQUIRE(w.status().ok());
    std::vector<std::atomic<int>> arrived(kRounds);
    std::atomic<int> early{0};
    std::vector<Status> st(size);
    w.parallel([&](int r) {
      for (int k = 0; k < kRounds && st[r].ok(); ++k) {
        if (k % size == r) std::this_thread::sleep_for(5ms);  // one late member per round
        arrived[k].fetch_add(1);
        st[r] = w.comm(r).barrier(w.name()).wait(mw::deadlineIn(kWait));
        if (arrived[k].load() != size) early.fetch_add(1);
      }
    });
    requireAllOk(st);
    CHECK(early.load() == 0);
  }
}

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
