#include "chaos/traffic_content.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace mw::chaos {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t start(const ContentKey& k) {
  return mix(k.nonce ^ mix(static_cast<uint64_t>(k.sender) * 0x100000001b3ULL ^ mix(k.seq)));
}

// Small non-negative integers (< 2^24, and < 2049 for float16) to a dtype's bits, and back.
uint16_t toHalf(uint64_t v) {  // exact for v <= 2048
  if (v == 0) return 0;
  const int e = std::bit_width(v) - 1;  // v = 1.m * 2^e
  const uint64_t mantissa = (v << (10 - e)) & 0x3ff;
  return static_cast<uint16_t>(((e + 15) << 10) | mantissa);
}
double fromHalf(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const double m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1 : 1;
  if (e == 0) return sign * m * 0x1p-24;
  if (e == 31) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  return sign * (1 + m / 1024) * std::ldexp(1.0, e - 15);
}

// The content is computed in 32-bit lanes, which the compiler vectorizes: every value is below
// 2^24 (contentRange), so (h + i) mod range depends only on h and i mod 2^32, and each codec turns
// a value into its dtype through int32 (packed conversions exist for int32, not for uint64).
constexpr size_t kChunk = 256;  // elements judged per step of checkWith

template <class Bits, class Encode>
void fillWith(void* data, size_t begin, size_t end, uint32_t h, uint32_t mask, Encode encode) {
  auto* out = static_cast<Bits*>(data);
  for (size_t i = begin; i < end; ++i) out[i] = encode((h + static_cast<uint32_t>(i)) & mask);
}

// The sum of the contents starting at `hs` over [begin, end), against `data`: per chunk, each
// content is added into `want` in a loop of its own, encoded into `expect`, and the chunk is
// compared whole (memcmp); only a chunk with a difference is walked element by element.
template <class Bits, class Encode, class Decode>
std::optional<Mismatch> checkWith(const void* data, size_t begin, size_t end,
                                  const std::vector<uint32_t>& hs, uint32_t mask, Encode encode,
                                  Decode decode) {
  const auto* in = static_cast<const Bits*>(data);
  std::optional<Mismatch> first;
  uint32_t want[kChunk];
  Bits expect[kChunk];
  for (size_t c = begin; c < end; c += kChunk) {
    const size_t n = std::min(kChunk, end - c);
    const auto base = static_cast<uint32_t>(c);
    std::fill_n(want, n, 0u);
    for (uint32_t h : hs) {
      for (size_t j = 0; j < n; ++j) want[j] += (h + base + static_cast<uint32_t>(j)) & mask;
    }
    for (size_t j = 0; j < n; ++j) expect[j] = encode(want[j]);
    if (std::memcmp(expect, in + c, n * sizeof(Bits)) == 0) continue;
    for (size_t j = 0; j < n; ++j) {
      if (in[c + j] == expect[j]) continue;
      if (!first) first = Mismatch{c + j, decode(expect[j]), decode(in[c + j]), 0};
      ++first->wrong;
    }
  }
  return first;
}

uint32_t floatBits(float f) { return std::bit_cast<uint32_t>(f); }

// Calls f(Bits{}, encode, decode) with the codec of `dtype`: encode takes a value below 2^24.
template <class F>
auto withCodec(DType dtype, F&& f) {
  auto i32 = [](uint32_t v) { return static_cast<int32_t>(v); };
  switch (dtype) {
    case DType::kFloat32:
      return f(
          uint32_t{}, [&](uint32_t v) { return floatBits(static_cast<float>(i32(v))); },
          [](uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); });
    case DType::kFloat64:
      return f(
          uint64_t{},
          [&](uint32_t v) { return std::bit_cast<uint64_t>(static_cast<double>(i32(v))); },
          [](uint64_t b) { return std::bit_cast<double>(b); });
    case DType::kInt32:
      return f(
          uint32_t{}, [](uint32_t v) { return v; },
          [](uint32_t b) { return static_cast<double>(static_cast<int32_t>(b)); });
    case DType::kInt64:
      return f(
          uint64_t{}, [](uint32_t v) { return static_cast<uint64_t>(v); },
          [](uint64_t b) { return static_cast<double>(static_cast<int64_t>(b)); });
    case DType::kFloat16:
      return f(
          uint16_t{}, [](uint32_t v) { return toHalf(v); }, fromHalf);
    case DType::kBFloat16:
      return f(
          uint16_t{},
          [&](uint32_t v) {
            return static_cast<uint16_t>(floatBits(static_cast<float>(i32(v))) >> 16);
          },
          [](uint16_t b) {
            return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
          });
    case DType::kUInt8:
      break;
  }
  return f(
      uint8_t{}, [](uint32_t v) { return static_cast<uint8_t>(v); },
      [](uint8_t b) { return static_cast<double>(b); });
}

}  // namespace

uint64_t contentRange(DType dtype, int contributors) {
  uint64_t exact = 1ULL << 24;  // float32's, and enough for the integers
  if (dtype == DType::kFloat16) exact = 2048;
  if (dtype == DType::kBFloat16) exact = 256;
  if (dtype == DType::kUInt8) exact = 255;  // a sum must not wrap
  const uint64_t per = exact / static_cast<uint64_t>(std::max(contributors, 1));
  return per == 0 ? 1 : std::bit_floor(per);
}

void fillContent(void* data, DType dtype, size_t begin, size_t end, const ContentKey& key,
                 uint64_t range) {
  const auto h = static_cast<uint32_t>(start(key)), mask = static_cast<uint32_t>(range - 1);
  withCodec(dtype, [&](auto bits, auto encode, auto) {
    fillWith<decltype(bits)>(data, begin, end, h, mask, encode);
    return 0;
  });
}

void fillContent(void* data, DType dtype, size_t count, const ContentKey& key, uint64_t range) {
  fillContent(data, dtype, 0, count, key, range);
}

std::optional<Mismatch> checkContent(const void* data, DType dtype, size_t begin, size_t end,
                                     std::span<const ContentKey> keys, uint64_t range) {
  std::vector<uint32_t> hs;
  hs.reserve(keys.size());
  for (const auto& k : keys) hs.push_back(static_cast<uint32_t>(start(k)));
  return withCodec(dtype, [&](auto bits, auto encode, auto decode) {
    return checkWith<decltype(bits)>(data, begin, end, hs, static_cast<uint32_t>(range - 1), encode,
                                     decode);
  });
}

std::optional<Mismatch> checkContent(const void* data, DType dtype, size_t count,
                                     std::span<const ContentKey> keys, uint64_t range) {
  return checkContent(data, dtype, 0, count, keys, range);
}

bool holdsContent(const void* data, DType dtype, size_t begin, size_t end, const ContentKey& key,
                  uint64_t range) {
  const auto h = static_cast<uint32_t>(start(key)), mask = static_cast<uint32_t>(range - 1);
  return withCodec(dtype, [&](auto bits, auto encode, auto) {
    using Bits = decltype(bits);
    const auto* in = static_cast<const Bits*>(data);
    Bits expect[kChunk];
    for (size_t c = begin; c < end; c += kChunk) {
      const size_t n = std::min(kChunk, end - c);
      fillWith<Bits>(expect, 0, n, h + static_cast<uint32_t>(c), mask, encode);
      if (std::memcmp(expect, in + c, n * sizeof(Bits)) != 0) return false;
    }
    return true;
  });
}

uint64_t drawNonce() {
  std::random_device rd;
  uint64_t n = 0;
  while (n == 0) n = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return n;
}

}  // namespace mw::chaos
