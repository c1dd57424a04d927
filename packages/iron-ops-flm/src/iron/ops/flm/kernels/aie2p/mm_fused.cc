// FLMGemm's multiply and drain on aie2p (npu2): 8x8x8 matrix multiplies with
// bf16 A converted to bfp16ebs8 (blocks of 8 k of one row) in the core's
// mode, against B as packed: bfp16ebs8 blocks of 8 k of one n, or bf16 that
// the AIE API converts the same way (built with
// AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16). Each 8-k step adds one exact
// block product into the float32 accumulator. tanh for the epilogues is the
// core's aie::tanh. Shared parts: ../mm_fused.h.
#include "../mm_fused.h"

namespace {

constexpr int32_t MA = MM_FUSED_TILE_MA, CK = MM_FUSED_CT_K;
static_assert(MA % 8 == 0 && CK % 8 == 0 && flm::COLS % 8 == 0, "whole 8 x 8 tiles");
using Acc64 = ::aie::accum<accfloat, 64>;

::aie::vector<bfloat16, flm::LANES> tanh_of(flm::floats z) {
  return ::aie::tanh<bfloat16>(z);
}

// the accumulator's 8 x 8 tile at rows r, columns 8 tb of rows `rows`
Acc64 load_acc(const float *rows, int32_t r, int32_t tb) {
  Acc64 c;
  c.from_vector(flm::load_tile<8, 8>(rows + r * flm::COLS + tb * 8, flm::COLS));
  return c;
}

void store_acc(float *rows, int32_t r, int32_t tb, Acc64 c) {
  flm::store_tile<8, 8>(rows + r * flm::COLS + tb * 8, flm::COLS, c.to_vector<float>());
}

} // namespace

extern "C" {

#ifdef MM_FUSED_BFP16_B
// rows 8 r.. of A tile `tile` (MA x CK bf16, row-major) times one B chunk:
// (COLS/8, CK/8) sub-tiles, n-block major, each 8 blocks (72 bytes) of 8 k
// of one n, added into the accumulator's rows of that tile
void iron_flm_mm_bfp16(const bfloat16 *a, const bfp16ebs8 *b, float *acc, int32_t tile) {
  flm::Rounding rounding;
  float *rows = acc + tile * MA * flm::COLS;
  for (int32_t r = 0; r < MA; r += 8)
    for (int32_t tb = 0; tb < flm::COLS / 8; tb++) {
      Acc64 c = load_acc(rows, r, tb);
      ::aie::block_vector_input_buffer_stream<bfp16ebs8, 64> chunk(b);
      chunk.seek(tb * (CK / 8));
      for (int32_t i = 0; i < CK / 8; i++) {
        const Acc64 a_tile(flm::load_tile<8, 8>(a + r * CK + i * 8, CK));
        c = mac_8x8_8x8T(a_tile.to_vector<bfp16ebs8>(), chunk.pop(), c);
      }
      store_acc(rows, r, tb, c);
    }
}
#else
// as iron_flm_mm_bfp16, B bf16: each sub-tile 8 k x 8 n, row-major
void iron_flm_mm_bf16(const bfloat16 *a, const bfloat16 *b, float *acc, int32_t tile) {
  using MMUL = ::aie::mmul<8, 8, 8, bfloat16, bfloat16, accfloat>;
  flm::Rounding rounding;
  float *rows = acc + tile * MA * flm::COLS;
  for (int32_t r = 0; r < MA; r += 8)
    for (int32_t tb = 0; tb < flm::COLS / 8; tb++) {
      MMUL c(load_acc(rows, r, tb));
      for (int32_t i = 0; i < CK / 8; i++)
        c.mac(flm::load_tile<8, 8>(a + r * CK + i * 8, CK),
              ::aie::load_v<64>(b + (tb * (CK / 8) + i) * 64));
      store_acc(rows, r, tb, c.to_accum());
    }
}
#endif

void iron_flm_drain_bf16(float *acc, bfloat16 *c, int32_t chunk, int32_t mode, int32_t lo_bits,
                         int32_t hi_bits) {
  flm::drain(acc, c, chunk, mode, lo_bits, hi_bits, tanh_of);
}

void iron_flm_zero_bf16(bfloat16 *c) { flm::zero(c); }

} // extern "C"
