#include "chaos/traffic_content.h"

#include <algorithm>
#include <bit>
#include <cmath>
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

template <class Bits, class Encode>
void fillWith(void* data, size_t begin, size_t end, uint64_t h, uint64_t mask, Encode encode) {
  auto* out = static_cast<Bits*>(data);
  for (size_t i = begin; i < end; ++i) out[i] = encode((h + i) & mask);
}

template <class Bits, class Encode, class Decode>
std::optional<Mismatch> checkWith(const void* data, size_t begin, size_t end,
                                  const std::vector<uint64_t>& hs, uint64_t mask, Encode encode,
                                  Decode decode) {
  const auto* in = static_cast<const Bits*>(data);
  std::optional<Mismatch> first;
  auto wrong = [&](size_t i, Bits want) {
    if (!first) first = Mismatch{i, decode(want), decode(in[i]), 0};
    ++first->wrong;
  };
  if (hs.size() == 1) {  // one sender's content: the common case, a loop the compiler vectorizes
    const uint64_t h = hs[0];
    for (size_t i = begin; i < end; ++i) {
      const Bits want = encode((h + i) & mask);
      if (in[i] != want) wrong(i, want);
    }
    return first;
  }
  for (size_t i = begin; i < end; ++i) {
    uint64_t sum = 0;
    for (uint64_t h : hs) sum += (h + i) & mask;
    const Bits want = encode(sum);
    if (in[i] != want) wrong(i, want);
  }
  return first;
}

uint32_t floatBits(float f) { return std::bit_cast<uint32_t>(f); }

// Calls f(Bits{}, encode, decode) with the codec of `dtype`.
template <class F>
auto withCodec(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(
          uint32_t{}, [](uint64_t v) { return floatBits(static_cast<float>(v)); },
          [](uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); });
    case DType::kFloat64:
      return f(
          uint64_t{}, [](uint64_t v) { return std::bit_cast<uint64_t>(static_cast<double>(v)); },
          [](uint64_t b) { return std::bit_cast<double>(b); });
    case DType::kInt32:
      return f(
          uint32_t{}, [](uint64_t v) { return static_cast<uint32_t>(v); },
          [](uint32_t b) { return static_cast<double>(static_cast<int32_t>(b)); });
    case DType::kInt64:
      return f(
          uint64_t{}, [](uint64_t v) { return v; },
          [](uint64_t b) { return static_cast<double>(static_cast<int64_t>(b)); });
    case DType::kFloat16:
      return f(uint16_t{}, toHalf, fromHalf);
    case DType::kBFloat16:
      return f(
          uint16_t{},
          [](uint64_t v) { return static_cast<uint16_t>(floatBits(static_cast<float>(v)) >> 16); },
          [](uint16_t b) {
            return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
          });
    case DType::kUInt8:
      break;
  }
  return f(
      uint8_t{}, [](uint64_t v) { return static_cast<uint8_t>(v); },
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
  const uint64_t h = start(key), mask = range - 1;
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
  std::vector<uint64_t> hs;
  hs.reserve(keys.size());
  for (const auto& k : keys) hs.push_back(start(k));
  return withCodec(dtype, [&](auto bits, auto encode, auto decode) {
    return checkWith<decltype(bits)>(data, begin, end, hs, range - 1, encode, decode);
  });
}

std::optional<Mismatch> checkContent(const void* data, DType dtype, size_t count,
                                     std::span<const ContentKey> keys, uint64_t range) {
  return checkContent(data, dtype, 0, count, keys, range);
}

bool holdsContent(const void* data, DType dtype, size_t begin, size_t end, const ContentKey& key,
                  uint64_t range) {
  const uint64_t h = start(key), mask = range - 1;
  return withCodec(dtype, [&](auto bits, auto encode, auto) {
    using Bits = decltype(bits);
    const auto* in = static_cast<const Bits*>(data);
    for (size_t i = begin; i < end; ++i) {
      if (in[i] != encode((h + i) & mask)) return false;
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
