// iron.ops.eltwise's sized activations on aie2p (npu2): the core's native
// tanh (aie::tanh<bfloat16> of a float32 vector, a bf16 out). The arithmetic
// around it is activation.h's.
#include "../activation.h"

namespace {

::aie::vector<bfloat16, 16> tanh_of(::aie::accum<accfloat, 16> z) {
  return ::aie::tanh<bfloat16>(z.to_vector<float>());
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
