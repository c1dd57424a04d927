// Helpers of iron.ops.eltwise's row designs (rows.py), for aie2 and aie2p
// (Peano); the numpy models in rows.py state what they do.
#include "iron_aie.h"

extern "C" {

// Every later float-to-bf16 conversion on this core rounds to nearest even.
// A core boots in floor and mlir-aie's row kernels never set the mode, so the
// row designs call this before them (the mode is one register the core's
// kernels share).
void iron_set_rounding_conv_even() {
  ::aie::set_rounding(::aie::rounding_mode::conv_even);
}

// x[valid:n] = the most negative finite bf16 (bits 0xff7f), whose exp is 0:
// Softmax masks the columns past a call's `valid` so that softmax_bf16, which
// walks whole vectors, can run over the whole row. The vector holding
// element `valid` keeps its lanes below it; every later vector is replaced.
void iron_mask_tail_bf16(bfloat16 *x, int32_t valid, int32_t n) {
  constexpr int32_t LANES = 16;
  const ::aie::vector<bfloat16, LANES> masked =
      ::aie::broadcast<uint16_t, LANES>(0xff7f).cast_to<bfloat16>();
  int32_t i = valid / LANES * LANES;
  if (i < valid && i + LANES <= n) {
    // lanes below `valid` keep their values
    const auto keep = ::aie::mask<LANES>::from_uint32((1u << (valid - i)) - 1u);
    ::aie::store_v(x + i, ::aie::select(masked, ::aie::load_v<LANES>(x + i), keep));
    i += LANES;
  }
  for (; i + LANES <= n; i += LANES)
    ::aie::store_v(x + i, masked);
  for (int32_t k = i > valid ? i : valid; k < n; k++)
    x[k] = masked[0];
}

} // extern "C"
