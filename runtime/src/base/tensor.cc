#include "multiworld/tensor.h"

#include <dlpack/dlpack.h>

#include <cstdlib>
#include <new>

namespace mw {

namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  size_t size;
  uint8_t dl_code;
};

constexpr DTypeRow kDTypes[kNumDTypes] = {
    {DType::kFloat32, "float32", 4, kDLFloat}, {DType::kFloat64, "float64", 8, kDLFloat},
    {DType::kInt32, "int32", 4, kDLInt},       {DType::kInt64, "int64", 8, kDLInt},
    {DType::kFloat16, "float16", 2, kDLFloat}, {DType::kBFloat16, "bfloat16", 2, kDLBfloat},
    {DType::kUInt8, "uint8", 1, kDLUInt},
};

const DTypeRow& row(DType t) { return kDTypes[static_cast<int>(t) % kNumDTypes]; }

// Holds the DLPack bookkeeping of an exported tensor: shape and the managed struct in one block.
struct Exported {
  DLManagedTensor managed;
  int64_t shape[1];
};

void deleteExported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

}  // namespace

size_t dtypeSize(DType t) { return row(t).size; }
const char* dtypeName(DType t) { return row(t).name; }

Result<DType> parseDType(const std::string& name) {
  for (const auto& r : kDTypes) {
    if (name == r.name) return r.dtype;
  }
  return Status(Code::kInvalidArgument, "unknown dtype '" + name +
                                            "' (expected float32, float64, int32, int64, "
                                            "float16, bfloat16 or uint8)");
}

std::string Device::str() const {
  return kind == Kind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Result<Device> parseDevice(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  const std::string digits = text.rfind("cuda:", 0) == 0 ? text.substr(5) : "";
  if (!digits.empty() && digits.size() <= 6 &&
      digits.find_first_not_of("0123456789") == std::string::npos) {
    return Device::cuda(std::stoi(digits));
  }
  return Status(Code::kInvalidArgument, "unknown device '" + text + "' (expected cpu or cuda:N)");
}

namespace {

// "float32", "bfloat16", "uint8", "int8 x 4 lanes": a DLPack dtype as frameworks name it.
std::string dlDTypeText(const DLDataType& t) {
  static const char* const kCodes[] = {"int",    "uint",    "float", "opaque",
                                       "bfloat", "complex", "bool"};
  std::string n = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  n += std::to_string(t.bits);
  if (t.lanes != 1) n += " x " + std::to_string(t.lanes) + " lanes";
  return n;
}

}  // namespace

Result<Tensor> fromDLPack(const DLManagedTensor* managed, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument, std::string(what) + why);
  };
  if (managed == nullptr) return bad(" is null");
  const DLTensor& t = managed->dl_tensor;
  Tensor out;
  if (t.device.device_type == kDLCPU) {
    out.device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
    out.device = Device::cuda(t.device.device_id);
  } else {
    return bad(": DLPack device type " + std::to_string(t.device.device_type) +
               " is not supported (cpu, cuda:N)");
  }
  bool found = false;
  for (const auto& r : kDTypes) {
    if (r.dl_code == t.dtype.code && r.size * 8 == t.dtype.bits && t.dtype.lanes == 1) {
      out.dtype = r.dtype;
      found = true;
    }
  }
  if (!found) {
    return bad(": dtype " + dlDTypeText(t.dtype) +
               " is not supported (float32, float64, int32, int64, float16, bfloat16, uint8)");
  }
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) return bad(": bad ndim/shape");
  size_t count = 1;
  int64_t expected_stride = 1;
  // Every product is checked: a shape such as {2^62, 4} must not wrap to a small size.
  const size_t max_count = kMaxTensorBytes / dtypeSize(out.dtype);
  bool empty = false;  // a zero dimension makes the whole tensor empty, whatever the others
  for (int d = 0; d < t.ndim; ++d) empty = empty || t.shape[d] == 0;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0) return bad(": negative dimension");
    const auto dim = static_cast<size_t>(t.shape[d]);
    if (!empty && count > max_count / dim) {
      return bad(": the shape's element count overflows (dimension " + std::to_string(d) + " is " +
                 std::to_string(t.shape[d]) + "; at most " + std::to_string(kMaxTensorBytes) +
                 " bytes)");
    }
    if (!empty && t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expected_stride) {
      return bad(" is not contiguous (dimension " + std::to_string(d) + " has stride " +
                 std::to_string(t.strides[d]) + ", expected " + std::to_string(expected_stride) +
                 "): operations use its memory in place, without copies; pass a contiguous "
                 "tensor (torch: tensor.contiguous())");
    }
    if (!empty) {
      expected_stride = static_cast<int64_t>(static_cast<size_t>(expected_stride) * dim);
      count *= dim;
    }
  }
  if (empty) count = 0;
  if (t.data == nullptr && count > 0) return bad(": null data with non-zero size");
  out.data = static_cast<char*>(t.data) + t.byte_offset;
  out.count = count;
  return out;
}

Result<DLManagedTensor*> toDLPack(const Tensor& t) {
  if (t.data == nullptr && t.count > 0) {
    return Status(Code::kInvalidArgument, "toDLPack: null data with non-zero count");
  }
  auto* ex = new (std::nothrow) Exported{};
  if (ex == nullptr) return Status(Code::kUnavailable, "toDLPack: out of memory");
  ex->shape[0] = static_cast<int64_t>(t.count);
  DLTensor& d = ex->managed.dl_tensor;
  d.data = t.data;
  d.device.device_type = t.device.kind == Device::Kind::kCpu ? kDLCPU : kDLCUDA;
  d.device.device_id = t.device.index;
  d.ndim = 1;
  d.dtype.code = row(t.dtype).dl_code;
  d.dtype.bits = static_cast<uint8_t>(row(t.dtype).size * 8);
  d.dtype.lanes = 1;
  d.shape = ex->shape;
  d.strides = nullptr;
  d.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = deleteExported;
  return &ex->managed;
}

}  // namespace mw
