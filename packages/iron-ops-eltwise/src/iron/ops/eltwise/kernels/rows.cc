// Helpers of iron.ops.eltwise's row designs (rows.py), for aie2 and aie2p
// (compiled with Peano); the numpy models in rows.py state what they do.
#include <aie_api/aie.hpp>
#include <stdint.h>

extern "C" {

// Every later float-to-bf16 conversion on this core rounds to nearest even.
// A core boots in floor and aie_api never sets the mode, so the row designs
// call this before their kernels (the mode is one register the core's
// kernels share).
void iron_set_rounding_conv_even() {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
}

// x[valid:n] = the most negative finite bf16 (bits 0xff7f), whose exp is 0:
// Softmax masks the columns past a call's `valid` so that softmax_bf16, which
// walks whole vectors, can run over the whole row.
void iron_mask_tail_bf16(bfloat16 *x, int32_t valid, int32_t n) {
  for (int32_t i = valid; i < n; i++)
    x[i] = -3.38953139e38f;
}

} // extern "C"
