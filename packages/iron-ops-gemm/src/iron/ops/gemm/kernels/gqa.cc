// Decode attention over one chunk of a KV cache for iron.ops.gemm's
// GQAScores and GQAContext, aie2 and aie2p (Peano). HEADS query heads in
// GROUPS groups, HEAD_DIM wide, POSITIONS cache rows per chunk (each row
// GROUPS x HEAD_DIM), the chunk starting at position `first`; rows at or
// past `valid` are not read. The numpy models are scores_model and
// context_model in core_kernels.py.
#include "iron_gemm.h"

#if !defined(HEADS) || !defined(GROUPS) || !defined(HEAD_DIM) || !defined(POSITIONS)
#error "build with -DHEADS -DGROUPS -DHEAD_DIM -DPOSITIONS"
#endif

static_assert(HEAD_DIM % 16 == 0 && HEADS % GROUPS == 0, "whole vectors and groups");

namespace {

constexpr int32_t LANES = 16;
constexpr int32_t PER_GROUP = HEADS / GROUPS;

} // namespace

extern "C" {

#ifdef SCORE_SCALE
// scores[h][p] = bf16(q[h] . key[p] * SCORE_SCALE) (1 / sqrt(HEAD_DIM) as a
// float32), the dot in 16 lanes added by iron::sum_lanes; 0 past `valid`
void iron_gqa_scores_bf16(const bfloat16 *q, const bfloat16 *keys, bfloat16 *scores,
                          int32_t first, int32_t valid) {
  iron::ConvEven rounding;
  for (int32_t h = 0; h < HEADS; h++)
    for (int32_t p = 0; p < POSITIONS; p++) {
      float dot = 0.0f;
      if (first + p < valid) {
        const bfloat16 *key = keys + (p * GROUPS + h / PER_GROUP) * HEAD_DIM;
        ::aie::accum<accfloat, LANES> acc = ::aie::zeros<accfloat, LANES>();
        for (int32_t d = 0; d < HEAD_DIM; d += LANES)
          acc = ::aie::mac(acc, ::aie::load_v<LANES>(q + h * HEAD_DIM + d),
                           ::aie::load_v<LANES>(key + d));
        dot = iron::sum_lanes(acc.to_vector<float>()) * SCORE_SCALE;
      }
      scores[h * POSITIONS + p] = (bfloat16)dot;
    }
}
#endif

// acc[h] += weights[h][p] * value[p] over the chunk's positions before
// `valid`, position after position, 16 elements of a head at a time
void iron_gqa_context_bf16(const bfloat16 *weights, const bfloat16 *values, float *acc,
                           int32_t first, int32_t valid) {
  const int32_t live = valid - first < POSITIONS ? valid - first : POSITIONS;
  for (int32_t h = 0; h < HEADS; h++)
    for (int32_t d = 0; d < HEAD_DIM; d += LANES) {
      ::aie::accum<accfloat, LANES> sum;
      sum.from_vector(::aie::load_v<LANES>(acc + h * HEAD_DIM + d));
      for (int32_t p = 0; p < live; p++) {
        const bfloat16 *value = values + (p * GROUPS + h / PER_GROUP) * HEAD_DIM + d;
        const auto weight = ::aie::broadcast<bfloat16, LANES>(weights[h * POSITIONS + p]);
        sum = ::aie::mac(sum, weight, ::aie::load_v<LANES>(value));
      }
      ::aie::store_v(acc + h * HEAD_DIM + d, sum.to_vector<float>());
    }
}

} // extern "C"
