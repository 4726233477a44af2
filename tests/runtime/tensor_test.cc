// DTypes, devices, Tensor views, DLPack import/export and the CPU reduce kernels.
#include "multiworld/tensor.h"

#include <dlpack/dlpack.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gloo/reduce.h"
#include "support/dtypes.h"

namespace {

using mw::Code;
using mw::DType;
using mw::ReduceOp;

using mw::test::kDTypes;
using mw::test::kOps;

}  // namespace

TEST_CASE("dtype sizes and names round trip", "[runtime][tensor]") {
  const size_t sizes[] = {4, 8, 4, 8, 2, 2, 1};
  const char* names[] = {"float32", "float64", "int32", "int64", "float16", "bfloat16", "uint8"};
  for (int i = 0; i < mw::kNumDTypes; ++i) {
    DType t = kDTypes[i];
    CAPTURE(i);
    CHECK(static_cast<int>(t) == i);
    CHECK(mw::dtypeSize(t) == sizes[i]);
    CHECK(std::string(mw::dtypeName(t)) == names[i]);
    auto parsed = mw::parseDType(mw::dtypeName(t));
    REQUIRE(parsed.ok());
    CHECK(*parsed == t);
  }
  CHECK(std::string(mw::reduceOpName(ReduceOp::kSum)) == "sum");
  CHECK(std::string(mw::reduceOpName(ReduceOp::kProd)) == "prod");
  CHECK(std::string(mw::reduceOpName(ReduceOp::kMin)) == "min");
  CHECK(std::string(mw::reduceOpName(ReduceOp::kMax)) == "max");
}

TEST_CASE("parseDType rejects unknown names", "[runtime][tensor]") {
  for (const char* bad : {"", "float", "Float32", "int8", "float32 ", "complex64"}) {
    CAPTURE(bad);
    auto r = mw::parseDType(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Matchers::Contains("'" + std::string(bad) + "'"));
  }
}

TEST_CASE("parseDevice accepts cpu and cuda:N only", "[runtime][tensor]") {
  auto cpu = mw::parseDevice("cpu");
  REQUIRE(cpu.ok());
  CHECK(*cpu == mw::Device::cpu());
  CHECK(cpu->str() == "cpu");
  auto cuda = mw::parseDevice("cuda:3");
  REQUIRE(cuda.ok());
  CHECK(cuda->kind == mw::Device::Kind::kCuda);
  CHECK(cuda->index == 3);
  CHECK(*cuda == mw::Device::cuda(3));
  CHECK(cuda->str() == "cuda:3");
  CHECK(mw::parseDevice("cuda:0")->index == 0);
  CHECK_FALSE(mw::Device::cuda(1) == mw::Device::cuda(2));
  for (const char* bad : {"", "CPU", "cpu:0", "gpu", "cuda", "cuda:", "cuda:-1", "cuda:x",
                          "cuda:1x", "cuda:1.5", "cuda0", " cuda:1"}) {
    CAPTURE(bad);
    auto r = mw::parseDevice(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Matchers::Contains(bad));
  }
}

// The contract is "cpu" or "cuda:N": digits only, no blanks or signs.
TEST_CASE("parseDevice rejects blanks and signs in the ordinal", "[runtime][tensor]") {
  for (const char* bad : {"cuda: 3", "cuda:+3", "cuda:\t3"}) {
    CAPTURE(bad);
    CHECK_FALSE(mw::parseDevice(bad).ok());
  }
}

TEST_CASE("Tensor::cpu views a typed buffer", "[runtime][tensor]") {
  std::vector<double> d(5);
  std::vector<int64_t> l(3);
  std::vector<uint8_t> b(9);
  float f[2];
  int32_t i[4];
  auto td = mw::Tensor::cpu(d.data(), d.size());
  CHECK(td.data == d.data());
  CHECK(td.dtype == DType::kFloat64);
  CHECK(td.count == 5);
  CHECK(td.device == mw::Device::cpu());
  CHECK(td.bytes() == 40);
  CHECK(mw::Tensor::cpu(l.data(), 3).dtype == DType::kInt64);
  CHECK(mw::Tensor::cpu(l.data(), 3).bytes() == 24);
  CHECK(mw::Tensor::cpu(b.data(), 9).dtype == DType::kUInt8);
  CHECK(mw::Tensor::cpu(b.data(), 9).bytes() == 9);
  CHECK(mw::Tensor::cpu(f, 2).dtype == DType::kFloat32);
  CHECK(mw::Tensor::cpu(i, 4).dtype == DType::kInt32);
  CHECK(mw::Tensor::cpu(i, 4).bytes() == 16);
  mw::Tensor empty;
  CHECK(empty.bytes() == 0);
  CHECK(empty.data == nullptr);
  mw::Tensor half{nullptr, DType::kBFloat16, 6, mw::Device::cpu()};
  CHECK(half.bytes() == 12);
}

// ---------------------------------------------------------------------------------------------
// DLPack.

namespace {

// A DLPack tensor over caller-owned memory; the test owns every field.
struct Managed {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor m{};

  Managed(void* data, DLDataType dt, std::vector<int64_t> shp, std::vector<int64_t> str = {})
      : shape(std::move(shp)), strides(std::move(str)) {
    m.dl_tensor.data = data;
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = static_cast<int32_t>(shape.size());
    m.dl_tensor.dtype = dt;
    m.dl_tensor.shape = shape.data();
    m.dl_tensor.strides = strides.empty() ? nullptr : strides.data();
    m.dl_tensor.byte_offset = 0;
  }
};

DLDataType dl(uint8_t code, uint8_t bits, uint16_t lanes = 1) { return {code, bits, lanes}; }

void requireRejected(const mw::Result<mw::Tensor>& r, const std::string& needle) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Matchers::Contains(needle));
}

}  // namespace

TEST_CASE("toDLPack then fromDLPack round trips every dtype", "[runtime][tensor]") {
  const DLDataType expected[] = {dl(kDLFloat, 32), dl(kDLFloat, 64), dl(kDLInt, 32),
                                 dl(kDLInt, 64),   dl(kDLFloat, 16), dl(kDLBfloat, 16),
                                 dl(kDLUInt, 8)};
  alignas(8) unsigned char storage[64] = {};
  for (int i = 0; i < mw::kNumDTypes; ++i) {
    DType t = kDTypes[i];
    CAPTURE(mw::dtypeName(t));
    mw::Tensor in{storage, t, 64 / mw::dtypeSize(t), mw::Device::cpu()};
    auto exported = mw::toDLPack(in);
    REQUIRE(exported.ok());
    DLManagedTensor* m = *exported;
    REQUIRE(m != nullptr);
    const DLTensor& d = m->dl_tensor;
    CHECK(d.data == storage);
    CHECK(d.device.device_type == kDLCPU);
    CHECK(d.ndim == 1);
    REQUIRE(d.shape != nullptr);
    CHECK(d.shape[0] == static_cast<int64_t>(in.count));
    CHECK(d.strides == nullptr);
    CHECK(d.byte_offset == 0);
    CHECK(d.dtype.code == expected[i].code);
    CHECK(d.dtype.bits == expected[i].bits);
    CHECK(d.dtype.lanes == 1);
    auto back = mw::fromDLPack(m);
    REQUIRE(back.ok());
    CHECK(back->data == storage);
    CHECK(back->dtype == t);
    CHECK(back->count == in.count);
    CHECK(back->device == mw::Device::cpu());
    REQUIRE(m->deleter != nullptr);
    m->deleter(m);
  }
}

TEST_CASE("toDLPack keeps the device and handles empty and null tensors", "[runtime][tensor]") {
  float x[3] = {1, 2, 3};
  mw::Tensor gpu{x, DType::kFloat16, 3, mw::Device::cuda(3)};
  auto m = mw::toDLPack(gpu);
  REQUIRE(m.ok());
  CHECK((*m)->dl_tensor.device.device_type == kDLCUDA);
  CHECK((*m)->dl_tensor.device.device_id == 3);
  auto back = mw::fromDLPack(*m);
  REQUIRE(back.ok());
  CHECK(back->device == mw::Device::cuda(3));
  (*m)->deleter(*m);

  auto empty = mw::toDLPack(mw::Tensor{nullptr, DType::kInt32, 0, mw::Device::cpu()});
  REQUIRE(empty.ok());
  CHECK((*empty)->dl_tensor.shape[0] == 0);
  auto empty_back = mw::fromDLPack(*empty);
  REQUIRE(empty_back.ok());
  CHECK(empty_back->count == 0);
  (*empty)->deleter(*empty);

  auto null = mw::toDLPack(mw::Tensor{nullptr, DType::kInt32, 4, mw::Device::cpu()});
  REQUIRE_FALSE(null.ok());
  CHECK(null.status().code() == Code::kInvalidArgument);
}

TEST_CASE("the DLPack deleter frees only the bookkeeping", "[runtime][tensor]") {
  // Under ASan a deleter that freed the data, or freed twice, is reported.
  auto* data = new std::vector<int64_t>{1, 2, 3, 4};
  auto a = mw::toDLPack(mw::Tensor::cpu(data->data(), data->size()));
  auto b = mw::toDLPack(mw::Tensor::cpu(data->data(), data->size()));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a != *b);  // independent exports
  (*a)->deleter(*a);
  // The other export and the data are untouched.
  CHECK((*b)->dl_tensor.shape[0] == 4);
  CHECK(static_cast<int64_t*>((*b)->dl_tensor.data)[3] == 4);
  (*data)[3] = 40;
  CHECK((*data)[3] == 40);
  (*b)->deleter(*b);
  CHECK((*data)[0] == 1);
  delete data;
}

TEST_CASE("fromDLPack honours byte_offset and contiguous shapes", "[runtime][tensor]") {
  alignas(8) float buf[32] = {};
  SECTION("byte_offset") {
    Managed m(buf, dl(kDLFloat, 32), {4});
    m.m.dl_tensor.byte_offset = 8;
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->data == &buf[2]);
    CHECK(t->count == 4);
  }
  SECTION("multi-dimensional, implicit strides") {
    Managed m(buf, dl(kDLInt, 32), {2, 3, 4});
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->count == 24);
    CHECK(t->dtype == DType::kInt32);
  }
  SECTION("multi-dimensional, explicit contiguous strides") {
    Managed m(buf, dl(kDLFloat, 16), {2, 3, 4}, {12, 4, 1});
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->count == 24);
    CHECK(t->dtype == DType::kFloat16);
  }
  SECTION("a dimension of one may have any stride") {
    Managed m(buf, dl(kDLUInt, 8), {3, 1}, {1, 99});
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->count == 3);
  }
  SECTION("a scalar") {
    Managed m(buf, dl(kDLFloat, 64), {});
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->count == 1);
  }
  SECTION("a zero dimension") {
    Managed m(nullptr, dl(kDLBfloat, 16), {5, 0});
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->count == 0);
    CHECK(t->dtype == DType::kBFloat16);
  }
  SECTION("a CUDA tensor") {
    Managed m(buf, dl(kDLFloat, 32), {8});
    m.m.dl_tensor.device = {kDLCUDA, 2};
    auto t = mw::fromDLPack(&m.m);
    REQUIRE(t.ok());
    CHECK(t->device == mw::Device::cuda(2));
  }
}

TEST_CASE("fromDLPack rejects what it cannot view", "[runtime][tensor]") {
  alignas(8) float buf[32] = {};
  requireRejected(mw::fromDLPack(nullptr), "null");
  {
    Managed m(buf, dl(kDLFloat, 32), {4});
    m.m.dl_tensor.device = {kDLOpenCL, 0};
    requireRejected(mw::fromDLPack(&m.m), "device type");
  }
  {
    Managed m(buf, dl(kDLComplex, 64), {4});
    requireRejected(mw::fromDLPack(&m.m), "dtype");
  }
  {
    Managed m(buf, dl(kDLInt, 3), {4});
    requireRejected(mw::fromDLPack(&m.m), "dtype");
  }
  {
    Managed m(buf, dl(kDLInt, 8), {4});  // int8 is not supported, only uint8
    requireRejected(mw::fromDLPack(&m.m), "dtype");
  }
  {
    Managed m(buf, dl(kDLFloat, 32, 2), {4});
    requireRejected(mw::fromDLPack(&m.m), "lanes");
  }
  {
    Managed m(buf, dl(kDLFloat, 32), {2, 3}, {1, 2});  // column-major
    requireRejected(mw::fromDLPack(&m.m), "not contiguous");
  }
  {
    Managed m(buf, dl(kDLFloat, 32), {4}, {2});  // every other element
    requireRejected(mw::fromDLPack(&m.m), "not contiguous");
  }
  {
    Managed m(buf, dl(kDLFloat, 32), {2, -3});
    requireRejected(mw::fromDLPack(&m.m), "negative");
  }
  {
    Managed m(buf, dl(kDLFloat, 32), {4});
    m.m.dl_tensor.shape = nullptr;
    requireRejected(mw::fromDLPack(&m.m), "shape");
  }
  {
    Managed m(nullptr, dl(kDLFloat, 32), {4});
    requireRejected(mw::fromDLPack(&m.m), "null data");
  }
}

// ---------------------------------------------------------------------------------------------
// Reduce kernels.

namespace {

// Small integers as each dtype's bytes.
std::vector<unsigned char> encode(DType t, const std::vector<double>& v) {
  std::vector<unsigned char> out(v.size() * mw::dtypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    unsigned char* p = out.data() + i * mw::dtypeSize(t);
    auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (t) {
      case DType::kFloat32:
        put(static_cast<float>(v[i]));
        break;
      case DType::kFloat64:
        put(v[i]);
        break;
      case DType::kInt32:
        put(static_cast<int32_t>(v[i]));
        break;
      case DType::kInt64:
        put(static_cast<int64_t>(v[i]));
        break;
      case DType::kFloat16:
        put(mw::detail::floatToHalf(static_cast<float>(v[i])));
        break;
      case DType::kBFloat16:
        put(mw::detail::floatToBfloat16(static_cast<float>(v[i])));
        break;
      case DType::kUInt8:
        put(static_cast<uint8_t>(v[i]));
        break;
    }
  }
  return out;
}

template <typename T>
T at(const std::vector<unsigned char>& b, size_t i) {
  T x;
  std::memcpy(&x, b.data() + i * sizeof(T), sizeof(T));
  return x;
}

double decode(DType t, const std::vector<unsigned char>& b, size_t i) {
  switch (t) {
    case DType::kFloat32:
      return at<float>(b, i);
    case DType::kFloat64:
      return at<double>(b, i);
    case DType::kInt32:
      return at<int32_t>(b, i);
    case DType::kInt64:
      return static_cast<double>(at<int64_t>(b, i));
    case DType::kFloat16:
      return mw::detail::halfToFloat(at<uint16_t>(b, i));
    case DType::kBFloat16:
      return mw::detail::bfloat16ToFloat(at<uint16_t>(b, i));
    case DType::kUInt8:
      return at<uint8_t>(b, i);
  }
  return 0;
}

double apply(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

template <typename T>
std::vector<T> reduced(std::vector<T> dst, const std::vector<T>& src, ReduceOp op,
                       DType t = mw::DTypeOf<T>::value) {
  REQUIRE(dst.size() == src.size());
  mw::detail::reduceInto(dst.data(), src.data(), dst.size(), t, op);
  return dst;
}

uint16_t h(float f) { return mw::detail::floatToHalf(f); }
uint16_t bf(float f) { return mw::detail::floatToBfloat16(f); }

}  // namespace

TEST_CASE("reduceInto is exact for every dtype and op", "[runtime][tensor]") {
  // 2500 elements: more than one 1024-element block of the 16-bit kernels.
  constexpr size_t kN = 2500;
  for (DType t : kDTypes) {
    const bool is_unsigned = t == DType::kUInt8;
    std::vector<double> a(kN), b(kN);
    for (size_t i = 0; i < kN; ++i) {
      a[i] = static_cast<double>(i % 11) - (is_unsigned ? 0 : 5);
      b[i] = static_cast<double>((i * 3) % 7) - (is_unsigned ? 0 : 3);
    }
    for (ReduceOp op : kOps) {
      CAPTURE(mw::dtypeName(t), mw::reduceOpName(op));
      auto dst = encode(t, a);
      const auto src = encode(t, b);
      mw::detail::reduceInto(dst.data(), src.data(), kN, t, op);
      size_t bad = kN;
      for (size_t i = 0; i < kN && bad == kN; ++i) {
        if (decode(t, dst, i) != apply(op, a[i], b[i])) bad = i;
      }
      INFO("first wrong element: " << bad);
      CHECK(bad == kN);
      CHECK(decode(t, src, 4) == b[4]);  // src untouched
    }
  }
  // count 0 touches nothing.
  int32_t x = 7, y = 9;
  mw::detail::reduceInto(&x, &y, 0, DType::kInt32, ReduceOp::kSum);
  CHECK(x == 7);
}

TEST_CASE("integer reductions wrap on overflow", "[runtime][tensor]") {
  using L32 = std::numeric_limits<int32_t>;
  using L64 = std::numeric_limits<int64_t>;
  const auto sum32 = reduced<int32_t>({L32::max(), L32::min(), -1, 1 << 30},
                                      {1, -1, L32::min(), 1 << 30}, ReduceOp::kSum);
  CHECK(sum32 == std::vector<int32_t>{L32::min(), L32::max(), L32::max(), L32::min()});
  const auto prod32 = reduced<int32_t>({65536, L32::max(), L32::min(), 46341, -1},
                                       {65536, 2, -1, 46341, L32::min()}, ReduceOp::kProd);
  CHECK(prod32 == std::vector<int32_t>{0, -2, L32::min(), -2147479015, L32::min()});
  const auto sum64 = reduced<int64_t>({L64::max(), L64::min()}, {1, -1}, ReduceOp::kSum);
  CHECK(sum64 == std::vector<int64_t>{L64::min(), L64::max()});
  const auto prod64 = reduced<int64_t>({int64_t{1} << 32, L64::max(), L64::min(), -1},
                                       {int64_t{1} << 32, 2, -1, L64::min()}, ReduceOp::kProd);
  CHECK(prod64 == std::vector<int64_t>{0, -2, L64::min(), L64::min()});
  const auto sum8 = reduced<uint8_t>({200, 255, 128}, {100, 1, 128}, ReduceOp::kSum);
  CHECK(sum8 == std::vector<uint8_t>{44, 0, 0});
  const auto prod8 = reduced<uint8_t>({16, 255, 3}, {16, 255, 85}, ReduceOp::kProd);
  CHECK(prod8 == std::vector<uint8_t>{0, 1, 255});
  CHECK(reduced<uint8_t>({0, 255}, {255, 0}, ReduceOp::kMin) == std::vector<uint8_t>{0, 0});
  CHECK(reduced<uint8_t>({0, 255}, {255, 0}, ReduceOp::kMax) == std::vector<uint8_t>{255, 255});
  CHECK(reduced<int64_t>({L64::min(), 5}, {L64::max(), -5}, ReduceOp::kMin) ==
        std::vector<int64_t>{L64::min(), -5});
}

TEST_CASE("16-bit floats convert and round to nearest even", "[runtime][tensor]") {
  CHECK(h(1.0f) == 0x3C00);
  CHECK(h(-2.0f) == 0xC000);
  CHECK(h(0.1f) == 0x2E66);
  CHECK(h(65504.0f) == 0x7BFF);
  CHECK(mw::detail::halfToFloat(0x7BFF) == 65504.0f);
  CHECK(mw::detail::halfToFloat(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(std::isinf(mw::detail::halfToFloat(0x7C00)));
  CHECK(bf(1.0f) == 0x3F80);
  CHECK(bf(3.14159265f) == 0x4049);
  CHECK(mw::detail::bfloat16ToFloat(0x4049) == 3.140625f);
  CHECK(bf(1.00390625f) == 0x3F80);  // 1 + 2^-8: a tie, rounds to the even 1.0
  CHECK(bf(1.01171875f) == 0x3F82);  // 1 + 3 * 2^-8: a tie, rounds up to even
  CHECK(bf(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(std::isnan(mw::detail::bfloat16ToFloat(bf(std::numeric_limits<float>::quiet_NaN()))));
  for (float f : {0.0f, 1.5f, -7.0f, 255.0f, 2048.0f}) {
    CHECK(mw::detail::halfToFloat(h(f)) == f);
    CHECK(mw::detail::bfloat16ToFloat(bf(f)) == f);
  }

  // Sums are computed in float32 and rounded once.
  auto half = reduced<uint16_t>({h(2048), h(2048), h(1), h(65504), h(0.5f)},
                                {h(1), h(3), h(std::ldexp(1.0f, -11)), h(65504), h(0.25f)},
                                ReduceOp::kSum, DType::kFloat16);
  CHECK(mw::detail::halfToFloat(half[0]) == 2048.0f);  // 2049: tie, even is 2048
  CHECK(mw::detail::halfToFloat(half[1]) == 2052.0f);  // 2051: tie, even is 2052
  CHECK(mw::detail::halfToFloat(half[2]) == 1.0f);     // 1 + 2^-11: tie, even is 1
  CHECK(std::isinf(mw::detail::halfToFloat(half[3])));
  CHECK(mw::detail::halfToFloat(half[4]) == 0.75f);
  auto bsum = reduced<uint16_t>({bf(256), bf(256), bf(1)}, {bf(1), bf(3), bf(0.5f)}, ReduceOp::kSum,
                                DType::kBFloat16);
  CHECK(mw::detail::bfloat16ToFloat(bsum[0]) == 256.0f);
  CHECK(mw::detail::bfloat16ToFloat(bsum[1]) == 260.0f);
  CHECK(mw::detail::bfloat16ToFloat(bsum[2]) == 1.5f);
  auto hprod = reduced<uint16_t>({h(0.1f)}, {h(3)}, ReduceOp::kProd, DType::kFloat16);
  CHECK(hprod[0] == h(mw::detail::halfToFloat(h(0.1f)) * 3.0f));
}

TEST_CASE("fromDLPack refuses shapes whose size overflows", "[runtime][tensor][badinput]") {
  alignas(8) float buf[4] = {};
  // {2^62, 4} float32: 2^64 elements would wrap to 0 (and the bytes to 0) unchecked.
  Managed m(buf, dl(kDLFloat, 32), {int64_t{1} << 62, 4});
  auto t = mw::fromDLPack(&m.m);
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().code() == mw::Code::kInvalidArgument);
  CHECK_THAT(t.status().message(), Catch::Contains("overflows"));
  // Fits in size_t as elements, but not as bytes.
  Managed big(buf, dl(kDLFloat, 64), {int64_t{1} << 61});
  CHECK(mw::fromDLPack(&big.m).status().code() == mw::Code::kInvalidArgument);
  // A zero dimension is an empty tensor, whatever the others.
  Managed empty(buf, dl(kDLFloat, 32), {0, int64_t{1} << 62});
  auto e = mw::fromDLPack(&empty.m);
  REQUIRE(e.ok());
  CHECK(e->count == 0);
}
