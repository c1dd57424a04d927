// Transpose's core kernel for aie2 and aie2p (Peano): every 8 x 8 block of a
// DIM_n x DIM_m tile of 16-bit elements (rows x cols, row-major) transposed
// in place of the block; it moves bits, no arithmetic. mlir-aie's
// generic/transpose.cc is not in the tree at iron-design's pin. The numpy
// model is transpose_blocks_model in movers.py.
#include <aie_api/aie.hpp>
#include <stdint.h>

#if !defined(DIM_m) || !defined(DIM_n)
#error "build with -DDIM_m=<tile columns> -DDIM_n=<tile rows>"
#endif

static_assert(DIM_m % 8 == 0 && DIM_n % 8 == 0, "whole 8 x 8 blocks");

extern "C" {

void iron_transpose_8x8_bf16(const bfloat16 *x, bfloat16 *y) {
  constexpr int32_t B = 8;
  for (int32_t row = 0; row < DIM_n; row += B)
    for (int32_t col = 0; col < DIM_m; col += B) {
      ::aie::vector<bfloat16, B * B> block;
      for (int32_t r = 0; r < B; r++)
        block.insert(r, ::aie::load_v<B>(x + (row + r) * DIM_m + col));
      const auto flipped = ::aie::transpose(block, B, B);
      for (int32_t r = 0; r < B; r++)
        ::aie::store_v(y + (row + r) * DIM_m + col, flipped.extract<B>(r));
    }
}

} // extern "C"
