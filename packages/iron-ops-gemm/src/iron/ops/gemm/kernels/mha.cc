// Prefill attention for iron.ops.gemm's MHA, aie2p (Peano, built with
// -DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16): one ROWS-row query block
// against one ROWS-row key block at a time, HEAD_DIM wide, as a running
// softmax (max, sum, rescale) over the key blocks. Q K^T and P V go through
// the 8x8x8 bf16 aie::mmul, which the AIE API emulates with bfp16: each
// 8 x 8 operand tile is converted to bfp16ebs8 (here to nearest even) and
// the float32 accumulator adds one exact block product per 8-deep step.
// exp is aie::exp2 of x log2(e), stored as bf16; 1 / l is aie::inv. The numpy
// models are the block_*_model functions in core_kernels.py.
#include "iron_gemm.h"

#if !defined(ROWS) || !defined(HEAD_DIM) || !defined(SEQ_LEN) || !defined(CAUSAL)
#error "build with -DROWS -DHEAD_DIM -DSEQ_LEN -DCAUSAL"
#endif

static_assert(ROWS % 16 == 0 && HEAD_DIM % 16 == 0, "whole 8 x 8 tiles and 16-lane vectors");

namespace {

constexpr int32_t LANES = 16;
constexpr float LOG2E = 1.4426950408889634f;
using MMUL = ::aie::mmul<8, 8, 8, bfloat16, bfloat16, accfloat>;
using floats = ::aie::vector<float, LANES>;

// exp(x) of 16 lanes: aie::exp2 of x log2(e) (a float32 product), as bf16
::aie::vector<bfloat16, LANES> exp_bf16(floats x) {
  return ::aie::exp2<bfloat16>(::aie::mul(x, LOG2E).to_vector<float>());
}

} // namespace

extern "C" {

// S = Q K^T / sqrt(HEAD_DIM) in float32; keys at or past SEQ_LEN, and with
// CAUSAL keys after the query, are -inf
void iron_mha_scores(const bfloat16 *q, const bfloat16 *k, float *s, int32_t q_block,
                     int32_t k_block) {
  iron::ConvEven rounding;
  constexpr float SCALE = 1.0f / 8.0f; // 1 / sqrt(64)
  static_assert(HEAD_DIM == 64, "SCALE is 1 / sqrt(64)");
  for (int32_t rb = 0; rb < ROWS; rb += 8)
    for (int32_t cb = 0; cb < ROWS; cb += 8) {
      MMUL c(::aie::zeros<accfloat, 64>());
      for (int32_t d = 0; d < HEAD_DIM; d += 8) {
        const auto keys = iron::load_8x8(k + cb * HEAD_DIM + d, HEAD_DIM); // K tile: B^T
        c.mac(iron::load_8x8(q + rb * HEAD_DIM + d, HEAD_DIM), ::aie::transpose(keys, 8, 8));
      }
      ::aie::vector<float, 64> tile = ::aie::mul(c.to_vector<float>(), SCALE).to_vector<float>();
      for (int32_t r = 0; r < 8; r++)
        for (int32_t col = 0; col < 8; col++) {
          const int32_t query = q_block * ROWS + rb + r, key = k_block * ROWS + cb + col;
          if (key >= SEQ_LEN || (CAUSAL && key > query))
            tile.set(-__builtin_inff(), r * 8 + col);
        }
      iron::store_8x8(s + rb * ROWS + cb, ROWS, tile);
    }
}

// one key block of the running softmax: m' = max(m, max S), alpha =
// exp(m - m'), P = E = exp(S - m'), l' = l alpha + sum E (16 lanes, summed
// by iron::sum_lanes); state holds m then l, reset at key block 0
void iron_mha_softmax(const float *s, bfloat16 *p, float *alpha, float *state, int32_t k_block) {
  iron::ConvEven rounding;
  float *m = state, *total = state + ROWS;
  for (int32_t i = 0; i < ROWS; i++) {
    if (k_block == 0) {
      m[i] = -__builtin_inff();
      total[i] = 0.0f;
    }
    float top = m[i];
    for (int32_t j = 0; j < ROWS; j += LANES) {
      const float most = ::aie::reduce_max(::aie::load_v<LANES>(s + i * ROWS + j));
      top = most > top ? most : top;
    }
    const float safe = __builtin_isfinite(top) ? top : 0.0f;
    const float scale = (float)exp_bf16(::aie::broadcast<float, LANES>(m[i] - safe))[0];
    ::aie::accum<accfloat, LANES> sums = ::aie::zeros<accfloat, LANES>();
    for (int32_t j = 0; j < ROWS; j += LANES) {
      const auto shifted = ::aie::sub(::aie::load_v<LANES>(s + i * ROWS + j), safe);
      const auto e = exp_bf16(shifted);
      sums = ::aie::add(sums, e);
      ::aie::store_v(p + i * ROWS + j, e);
    }
    const float kept = total[i] * scale; // its own statement: never fused
    total[i] = kept + iron::sum_lanes(sums.to_vector<float>());
    m[i] = top;
    alpha[i] = scale;
  }
}

void iron_mha_total(const float *state, float *total) {
  for (int32_t i = 0; i < ROWS; i += LANES)
    ::aie::store_v(total + i, ::aie::load_v<LANES>(state + ROWS + i));
}

// acc = acc alpha (0 at key block 0) + P V
void iron_mha_context(const bfloat16 *p, const float *alpha, const bfloat16 *v, float *acc,
                      int32_t k_block) {
  iron::ConvEven rounding;
  for (int32_t rb = 0; rb < ROWS; rb += 8)
    for (int32_t db = 0; db < HEAD_DIM; db += 8) {
      ::aie::vector<float, 64> start = ::aie::zeros<float, 64>();
      if (k_block != 0) {
        ::aie::vector<float, 64> scale; // row r's 8 lanes: alpha[rb + r]
        for (int32_t r = 0; r < 8; r++)
          scale.insert(r, ::aie::broadcast<float, 8>(alpha[rb + r]));
        const auto old = iron::load_8x8(acc + rb * HEAD_DIM + db, HEAD_DIM);
        start = ::aie::mul(old, scale).to_vector<float>();
      }
      MMUL c(start);
      for (int32_t key = 0; key < ROWS; key += 8)
        c.mac(iron::load_8x8(p + rb * ROWS + key, ROWS), iron::load_8x8(v + key * HEAD_DIM + db, HEAD_DIM));
      iron::store_8x8(acc + rb * HEAD_DIM + db, HEAD_DIM, c.to_vector<float>());
    }
}

// O = acc / l (times aie::inv(l)), one rounding; rows at or past SEQ_LEN are 0
void iron_mha_output(const float *acc, const float *total, bfloat16 *o, int32_t q_block) {
  iron::ConvEven rounding;
  for (int32_t i = 0; i < ROWS; i++) {
    const bool past = q_block * ROWS + i >= SEQ_LEN;
    const float inverse = ::aie::inv(total[i]);
    for (int32_t d = 0; d < HEAD_DIM; d += LANES) {
      const auto row = ::aie::mul(::aie::load_v<LANES>(acc + i * HEAD_DIM + d), inverse);
      ::aie::store_v(o + i * HEAD_DIM + d,
                     past ? ::aie::zeros<bfloat16, LANES>() : row.to_vector<bfloat16>());
    }
  }
}

} // extern "C"
