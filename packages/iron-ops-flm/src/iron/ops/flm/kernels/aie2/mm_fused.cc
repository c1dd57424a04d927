// FLMGemm's multiply and drain on aie2 (npu1, bf16 B only): the 4x8x4 bf16
// aie::mmul, each 8-k step adding its products into the float32
// accumulator. tanh for the epilogues is mlir-aie's lookup table
// (getTanhBf16, aie_runtime_lib/AIE2/lut_based_ops.h, a bf16 in and out):
// with an epilogue compiled in, the object links lut_based_ops.cpp. Shared
// parts: ../mm_fused.h.
#include "../mm_fused.h"

#if MM_FUSED_EPILOGUE_MODE_MASK & 14 // GELU, SILU or SIGMOID
#include <lut_based_ops.h>
#endif

namespace {

constexpr int32_t MA = MM_FUSED_TILE_MA, CK = MM_FUSED_CT_K;
static_assert(MA % 4 == 0 && CK % 8 == 0 && flm::COLS % 8 == 0, "whole mmul tiles");
using MMUL = ::aie::mmul<4, 8, 4, bfloat16, bfloat16, accfloat>;

::aie::vector<bfloat16, flm::LANES> tanh_of(flm::floats z) {
#if MM_FUSED_EPILOGUE_MODE_MASK & 14
  ::aie::accum<accfloat, flm::LANES> acc;
  acc.from_vector(z);
  return getTanhBf16(acc.to_vector<bfloat16>()); // the table reads bf16
#else
  return ::aie::zeros<bfloat16, flm::LANES>(); // no epilogue calls it
#endif
}

} // namespace

extern "C" {

// rows 4 r.. of A tile `tile` (MA x CK bf16, row-major) times one B chunk:
// (COLS/8, CK/8) sub-tiles of 8 k x 8 n, row-major, n-block major; each
// 8 x 8 sub-tile is two 8 x 4 halves (columns 0-3 and 4-7)
void iron_flm_mm_bf16(const bfloat16 *a, const bfloat16 *b, float *acc, int32_t tile) {
  flm::Rounding rounding;
  float *rows = acc + tile * MA * flm::COLS;
  for (int32_t r = 0; r < MA; r += 4)
    for (int32_t tb = 0; tb < flm::COLS / 8; tb++) {
      float *c_rows = rows + r * flm::COLS + tb * 8;
      MMUL left(flm::load_tile<4, 4>(c_rows, flm::COLS));
      MMUL right(flm::load_tile<4, 4>(c_rows + 4, flm::COLS));
      for (int32_t i = 0; i < CK / 8; i++) {
        const auto a_tile = flm::load_tile<4, 8>(a + r * CK + i * 8, CK);
        const auto b_tile = ::aie::load_v<64>(b + (tb * (CK / 8) + i) * 64);
        left.mac(a_tile, ::aie::filter_even(b_tile, 4));
        right.mac(a_tile, ::aie::filter_odd(b_tile, 4));
      }
      flm::store_tile<4, 4>(c_rows, flm::COLS, left.to_vector<float>());
      flm::store_tile<4, 4>(c_rows + 4, flm::COLS, right.to_vector<float>());
    }
}

void iron_flm_drain_bf16(float *acc, bfloat16 *c, int32_t chunk, int32_t mode, int32_t lo_bits,
                         int32_t hi_bits) {
  flm::drain(acc, c, chunk, mode, lo_bits, hi_bits, tanh_of);
}

void iron_flm_zero_bf16(bfloat16 *c) { flm::zero(c); }

} // extern "C"
