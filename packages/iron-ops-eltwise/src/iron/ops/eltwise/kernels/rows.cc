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

// y[0:n] = +0: Softmax's row before softmax_bf16 writes its valid columns.
void iron_zero_bf16(bfloat16 *y, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    y[i] = (bfloat16)0.0f;
}

} // extern "C"
