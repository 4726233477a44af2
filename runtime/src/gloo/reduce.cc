#include "gloo/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace mw {

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

namespace detail {

#if defined(__FLT16_MAX__)  // the compiler's _Float16 (GCC 12, clang 15 on x86-64)

float halfToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

uint16_t floatToHalf(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

#else  // IEEE 754 binary16 by hand (clang 14, used for the fuzz build): same results

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, nan (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // zero
  } else {        // subnormal: normalize
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf, nan (quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {               // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 .. 24
    const uint32_t half = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    const uint32_t rounded = half + ((rest > mid || (rest == mid && (half & 1))) ? 1 : 0);
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits, to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

#endif

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

// dst and src never overlap (REQUIRES of reduceInto): __restrict lets the compiler vectorize
// without run-time alias checks, which -O2's cost model would not pay for.
template <typename T, typename F>
void apply(void* dst, const void* src, size_t n, F f) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
}

// Integers wrap on overflow (two's complement) instead of invoking undefined behaviour.
template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<sizeof(T) < sizeof(unsigned), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
void reduceTyped(void* dst, const void* src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return apply<T>(dst, src, n, [](T a, T b) { return add(a, b); });
    case ReduceOp::kProd:
      return apply<T>(dst, src, n, [](T a, T b) { return mul(a, b); });
    case ReduceOp::kMin:
      return apply<T>(dst, src, n, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::kMax:
      return apply<T>(dst, src, n, [](T a, T b) { return std::max(a, b); });
  }
}

// 16-bit floats: widen a block to float32, reduce, narrow again.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce16(void* dst, const void* src, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 1024;
  float a[kBlock], b[kBlock];
  auto* d = static_cast<uint16_t*>(dst);
  const auto* s = static_cast<const uint16_t*>(src);
  for (size_t off = 0; off < n; off += kBlock) {
    size_t len = std::min(kBlock, n - off);
    for (size_t i = 0; i < len; ++i) {
      a[i] = Widen(d[off + i]);
      b[i] = Widen(s[off + i]);
    }
    reduceTyped<float>(a, b, len, op);
    for (size_t i = 0; i < len; ++i) d[off + i] = Narrow(a[i]);
  }
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
      return reduceTyped<float>(dst, src, count, op);
    case DType::kFloat64:
      return reduceTyped<double>(dst, src, count, op);
    case DType::kInt32:
      return reduceTyped<int32_t>(dst, src, count, op);
    case DType::kInt64:
      return reduceTyped<int64_t>(dst, src, count, op);
    case DType::kUInt8:
      return reduceTyped<uint8_t>(dst, src, count, op);
    case DType::kFloat16:
      return reduce16<halfToFloat, floatToHalf>(dst, src, count, op);
    case DType::kBFloat16:
      return reduce16<bfloat16ToFloat, floatToBfloat16>(dst, src, count, op);
  }
}

}  // namespace detail
}  // namespace mw
