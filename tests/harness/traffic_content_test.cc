// Checkable traffic (chaos/traffic_content.h): a receiver finds every wrong element, and an
// all-reduce of the members' contents is exactly the sum it expects, in every dtype.
#include "chaos/traffic_content.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "support/local_worlds.h"

namespace mw::chaos {
namespace {

constexpr DType kAll[] = {DType::kFloat32, DType::kFloat64,  DType::kInt32, DType::kInt64,
                          DType::kFloat16, DType::kBFloat16, DType::kUInt8};

TEST_CASE("a sender's content checks against its own key and against no other",
          "[traffic_content]") {
  for (DType d : kAll) {
    INFO("dtype " << dtypeName(d));
    constexpr size_t kCount = 1000;
    std::vector<unsigned char> buf(kCount * dtypeSize(d));
    const ContentKey key{0x1234abcdULL, 1, 7};
    const uint64_t range = contentRange(d, 1);
    fillContent(buf.data(), d, kCount, key, range);
    CHECK_FALSE(checkContent(buf.data(), d, kCount, std::span(&key, 1), range));
    for (ContentKey other : {ContentKey{key.nonce, 1, 6}, ContentKey{key.nonce, 1, 8},
                             ContentKey{key.nonce + 1, 1, 7}, ContentKey{key.nonce, 0, 7}}) {
      INFO("nonce " << other.nonce << " sender " << other.sender << " seq " << other.seq);
      const auto m = checkContent(buf.data(), d, kCount, std::span(&other, 1), range);
      REQUIRE(m);
      CHECK(m->wrong > kCount / 2);  // nearly every element: the content is another operation's
    }
    // One byte changed: found at its element, and nowhere else.
    const size_t at = 777;
    buf[at * dtypeSize(d)] ^= 0x01;
    const auto m = checkContent(buf.data(), d, kCount, std::span(&key, 1), range);
    REQUIRE(m);
    CHECK(m->offset == at);
    CHECK(m->wrong == 1);
    CHECK(m->expected != m->found);
  }
}

TEST_CASE("each dtype's range keeps a sum over the contributors exact", "[traffic_content]") {
  CHECK(contentRange(DType::kFloat32, 1) == (1ULL << 24));
  CHECK(contentRange(DType::kFloat32, 3) == (1ULL << 22));
  CHECK(contentRange(DType::kFloat16, 8) == 256);
  CHECK(contentRange(DType::kBFloat16, 8) == 32);
  CHECK(contentRange(DType::kUInt8, 2) == 64);
  CHECK(contentRange(DType::kUInt8, 200) == 1);  // every element 0: only the length is checked
  CHECK(contentRange(DType::kInt64, 1000) == 16384);
}

TEST_CASE("an all-reduce of the members' contents is the exact sum the receiver expects",
          "[traffic_content]") {
  for (int size : {3, 8}) {
    test::LocalWorld w("content" + std::to_string(size), size);
    REQUIRE(w.status().ok());
    for (DType d : kAll) {
      INFO("size " << size << ", dtype " << dtypeName(d));
      constexpr size_t kCount = 4099;
      const uint64_t range = contentRange(d, size);
      std::vector<ContentKey> keys;
      for (int r = 0; r < size; ++r) keys.push_back({99, r, 5});
      std::vector<std::vector<unsigned char>> bufs(size);
      std::vector<Status> st(size);
      std::vector<char> intact(size);  // written by every member's thread: one byte each
      w.parallel([&](int r) {
        bufs[r].resize(kCount * dtypeSize(d));
        fillContent(bufs[r].data(), d, kCount, keys[r], range);
        Tensor t{bufs[r].data(), d, kCount, Device::cpu()};
        st[r] = w.comm(r).allReduce(w.name(), t).wait();
        intact[r] = !checkContent(bufs[r].data(), d, kCount, keys, range).has_value();
      });
      for (int r = 0; r < size; ++r) {
        INFO("rank " << r);
        REQUIRE(st[r].ok());
        CHECK(intact[r]);
        // A sum missing one member's content is found out.
        CHECK(checkContent(bufs[r].data(), d, kCount, std::span(keys).first(size - 1), range));
      }
    }
  }
}

}  // namespace
}  // namespace mw::chaos
