// Element-wise reduction kernels used by the CPU collectives.
#pragma once

#include <cstddef>

#include "multiworld/tensor.h"

namespace mw::detail {

// dst[i] = op(dst[i], src[i]) for i < count. 16-bit floats are reduced in float32 and rounded to
// nearest even. REQUIRES: dst and src hold `count` elements of `dtype`; they may not overlap.
void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// Conversions used by the kernels and by tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace mw::detail
