// Test support: every element type and every reduction the runtime has, for the tests that check
// each of them (tensor_test.cc, collectives_test.cc).
#pragma once

#include "multiworld/tensor.h"

namespace mw::test {

inline constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt32, DType::kInt64,
                                    DType::kFloat16, DType::kBFloat16, DType::kUInt8};
inline constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                    ReduceOp::kMax};

}  // namespace mw::test
