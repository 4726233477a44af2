// Exact results of point-to-point operations and every collective for world sizes 2, 3 and 4 and
// every dtype. Argument validation and disagreeing members: collectives_checks_test.cc.
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

#include "gloo/reduce.h"
#include "multiworld/multiworld.h"
#include "support/checks.h"
#include "support/dtypes.h"
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

using mw::test::kDTypes;
using mw::test::kOps;
constexpr int kSizes[] = {2, 3, 4};
// Elements per rank (or per block): none, one, and counts that no world size divides.
constexpr size_t kCounts[] = {0, 1, 7, 1001};
// 6 MiB of float32: every ring chunk spans several 512 KiB segments. Sanitized runs (they set
// MW_TEST_TIME_SCALE) use 2 MiB, where every chunk still spans two or more: the 6 MiB cases took
// 45 s of the TSan run, checking the same paths.
const size_t kLargeCount = mw::test::timeScale() > 1 ? 524289 : 1572865;
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

// The Gloo backend keeps the buffers of finished sends and receives, and Gloo's all_reduce options,
// for the next call over the same memory (gloo/channel.h, gloo/collectives.h). Reuse must never
// show: not with the same memory at another size, not with several messages from one memory in
// flight at once, not past the number kept, not with another reduce op on the same tensor.
TEST_CASE("reusing buffers across calls over the same memory keeps every result right",
          "[runtime][collectives]") {
  LocalWorld w("reuse", 3);
  REQUIRE(w.status().ok());
  constexpr size_t kN = 1 << 14;
  std::vector<float> src(kN), dst(kN);
  auto value = [](int it, size_t i) {
    return static_cast<float>(it * 1000 + static_cast<int>(i % 977));
  };
  for (int it = 0; it < 30; ++it) {
    INFO("message " << it);
    // Every third message is half as long, over the same memory.
    const size_t n = it % 3 == 2 ? kN / 2 : kN;
    for (size_t i = 0; i < kN; ++i) src[i] = value(it, i);
    std::fill(dst.begin(), dst.end(), -1.0f);
    requireAllOk(runAll(w, [&](int r) {
      if (r == 0) return w.comm(0).isend(w.name(), mw::Tensor::cpu(src.data(), n), 2, 5);
      if (r == 2) return w.comm(2).irecv(w.name(), mw::Tensor::cpu(dst.data(), n), 0, 5);
      return Work::done(w.name(), Status::Ok());
    }));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += dst[i] != value(it, i);
    for (size_t i = n; i < kN; ++i) bad += dst[i] != -1.0f;
    CHECK(bad == 0);
  }
  // Four messages from one memory in flight at once, twice: each needs a buffer of its own.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<float>> got(4, std::vector<float>(kN, -1.0f));
    for (size_t i = 0; i < kN; ++i) src[i] = value(round, i);
    std::vector<Status> st(3);
    w.parallel([&](int r) {
      std::vector<Work> works;
      for (int k = 0; k < 4; ++k) {
        if (r == 0)
          works.push_back(w.comm(0).isend(w.name(), mw::Tensor::cpu(src.data(), kN), 1, 10 + k));
        if (r == 1)
          works.push_back(w.comm(1).irecv(w.name(), mw::Tensor::cpu(got[k].data(), kN), 0, 10 + k));
      }
      for (auto& wk : works) {
        Status s = wk.wait(mw::deadlineIn(kWait));
        if (st[r].ok()) st[r] = s;
      }
    });
    requireAllOk(st);
    for (int k = 0; k < 4; ++k) {
      size_t bad = 0;
      for (size_t i = 0; i < kN; ++i) bad += got[k][i] != value(round, i);
      INFO("round " << round << ", tag " << 10 + k);
      CHECK(bad == 0);
    }
  }
  // all_reduce over 10 tensors in turn (more than are kept), twice; on each, sum, max, then min.
  constexpr int kTensors = 10;
  std::vector<std::vector<std::vector<float>>> t(3, std::vector<std::vector<float>>(kTensors));
  for (int pass = 0; pass < 2; ++pass) {
    for (int k = 0; k < kTensors; ++k) {
      const size_t n = 1000 + 100 * static_cast<size_t>(k);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        INFO("pass " << pass << ", tensor " << k << ", " << mw::reduceOpName(op));
        for (int r = 0; r < 3; ++r) t[r][k].assign(n, static_cast<float>(r + 1 + k));
        requireAllOk(runAll(w, [&](int r) {
          return w.comm(r).allReduce(w.name(), mw::Tensor::cpu(t[r][k].data(), n), op);
        }));
        const float want = op == ReduceOp::kSum   ? static_cast<float>(6 + 3 * k)
                           : op == ReduceOp::kMax ? static_cast<float>(3 + k)
                                                  : static_cast<float>(1 + k);
        size_t bad = 0;
        for (int r = 0; r < 3; ++r) {
          for (float x : t[r][k]) bad += x != want;
        }
        CHECK(bad == 0);
      }
    }
  }
}
