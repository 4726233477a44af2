// Tensor: a non-owning view of a buffer that a world operation reads or writes.
//
// A Tensor never owns its memory: the caller keeps the buffer alive and untouched until the Work of
// every operation using it has completed. DLPack import and export let PyTorch, JAX or CuPy buffers
// pass without copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "multiworld/status.h"

struct DLManagedTensor;  // from <dlpack/dlpack.h>

namespace mw {

enum class DType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,   // IEEE 754 binary16
  kBFloat16 = 5,  // bfloat16
  kUInt8 = 6,     // bytes; no arithmetic reductions except sum/min/max/prod on unsigned values
};
inline constexpr int kNumDTypes = 7;

// Element-wise reduction of all_reduce, reduce and reduce_scatter.
enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };
// Stable name ("sum", "prod", "min", "max").
const char* reduceOpName(ReduceOp op);

// Bytes per element of `t`.
size_t dtypeSize(DType t);
// Stable name ("float32", "bfloat16", ...).
const char* dtypeName(DType t);
// Parses a name as printed by dtypeName. Returns kInvalidArgument for an unknown name.
Result<DType> parseDType(const std::string& name);

struct Device {
  enum class Kind : uint8_t { kCpu = 0, kCuda = 1 };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA ordinal as seen through CUDA_VISIBLE_DEVICES; 0 for CPU

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {Kind::kCuda, i}; }
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:N".
  std::string str() const;
};

// Parses "cpu" or "cuda:N". Returns kInvalidArgument otherwise.
Result<Device> parseDevice(const std::string& text);

// The largest tensor, in bytes, any call accepts (PTRDIFF_MAX: no object is larger). Larger
// element counts, and sizes whose computation would overflow, are refused with kInvalidArgument.
inline constexpr size_t kMaxTensorBytes = static_cast<size_t>(PTRDIFF_MAX);

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  size_t count = 0;  // elements
  Device device{};

  size_t bytes() const { return count * dtypeSize(dtype); }

  // A view of `count` elements of type `dtype` at `data` on the CPU.
  template <typename T>
  static Tensor cpu(T* data, size_t count);
};

// Maps a C++ element type to its DType.
// clang-format off
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
// clang-format on

template <typename T>
Tensor Tensor::cpu(T* data, size_t count) {
  return Tensor{data, DTypeOf<T>::value, count, Device::cpu()};
}

// Imports a DLPack tensor as a view. The view borrows `managed`'s memory: the caller must keep
// `managed` alive (and call its deleter when done). Only compact row-major tensors (strides null or
// matching a contiguous layout; a dimension of extent 1 may have any stride) of a supported dtype
// on CPU or CUDA are accepted; anything else returns kInvalidArgument saying what was wrong, with
// the tensor called `what` (e.g. "argument 'input'"). `managed` may not be null.
Result<Tensor> fromDLPack(const DLManagedTensor* managed,
                          std::string_view what = "fromDLPack: tensor");

// Exports `t` as a one-dimensional DLPack tensor that borrows `t.data`. The returned object is
// owned by the caller, who calls its `deleter` exactly once; the deleter frees only the DLPack
// bookkeeping, never `t.data`. Returns kInvalidArgument for a null data pointer with count > 0.
Result<DLManagedTensor*> toDLPack(const Tensor& t);

}  // namespace mw
