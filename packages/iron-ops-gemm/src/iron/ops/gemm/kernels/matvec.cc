// The bf16 matvec of iron.ops.gemm's GEMV, aie2 and aie2p (Peano): DIM_M
// rows of DIM_K per call, y[row_offset + i] = A[i] . x. 16 float32 lanes
// take the exact bf16 products in order, their sum (iron::sum_lanes) is
// rounded once to bf16. The numpy model is matvec_model in core_kernels.py.
#include "iron_gemm.h"

#if !defined(DIM_M) || !defined(DIM_K)
#error "build with -DDIM_M=<rows per call> -DDIM_K=<reduction>"
#endif

static_assert(DIM_K % 16 == 0, "whole 16-lane vectors");

extern "C" {

void iron_matvec_bf16(const bfloat16 *a, const bfloat16 *x, bfloat16 *y, int32_t row_offset) {
  constexpr int32_t LANES = 16;
  iron::ConvEven rounding;
  for (int32_t i = 0; i < DIM_M; i++) {
    ::aie::accum<accfloat, LANES> acc = ::aie::zeros<accfloat, LANES>();
    for (int32_t j = 0; j < DIM_K; j += LANES)
      acc = ::aie::mac(acc, ::aie::load_v<LANES>(a + i * DIM_K + j), ::aie::load_v<LANES>(x + j));
    y[row_offset + i] = (bfloat16)iron::sum_lanes(acc.to_vector<float>());
  }
}

} // extern "C"
