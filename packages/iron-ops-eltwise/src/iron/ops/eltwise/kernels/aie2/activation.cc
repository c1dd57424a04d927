// iron.ops.eltwise's sized activations on aie2 (npu1): tanh from mlir-aie's
// lookup table (getTanhBf16, aie_runtime_lib/AIE2/lut_based_ops.h: 32 linear
// segments on [-4, 4), a bf16 in and out), whose tables lut_based_ops.cpp
// defines; the object links both (see the manifest). The arithmetic around it
// is activation.h's.
#include "../activation.h"
#include <lut_based_ops.h>

namespace {

// the table reads a bf16 vector: z is rounded to bf16 first
::aie::vector<bfloat16, 16> tanh_of(::aie::accum<accfloat, 16> z) {
  return getTanhBf16(z.to_vector<bfloat16>());
}

} // namespace

extern "C" {

void iron_tanh_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  iron::activation::tanh_line(x, y, n, tanh_of);
}

void iron_sigmoid_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  iron::activation::sigmoid_line(x, y, n, tanh_of);
}

void iron_silu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  iron::activation::silu_line(x, y, n, tanh_of);
}

void iron_gelu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  iron::activation::gelu_line(x, y, n, tanh_of);
}

} // extern "C"
