// The core kernels of iron-ops-gemm's designs that mlir-aie's aie_kernels
// tree does not ship: narrowing casts to bf16 (aie2 has no f32 cast; neither
// generation an int32 one), a bf16 matvec accumulating in float32, and the
// two decode-attention kernels over a chunk of a KV cache. Plain scalar C++
// for Peano (aie2 or aie2p): correct first; their numpy models are in
// iron/ops/gemm/core_kernels.py. Shapes are compile-time defines.
#include <stdint.h>

#include <aie_api/aie.hpp>

namespace {

// One rounding to bf16, to nearest even, from a value float32 holds exactly.
inline bfloat16 to_bf16(float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u)
    bits += 0x7fffu + ((bits >> 16) & 1u);
  uint16_t high = bits >> 16;
  bfloat16 out;
  __builtin_memcpy(&out, &high, 2);
  return out;
}

// One rounding to bf16 of an int32: the top 9 significant bits, then to
// nearest even on everything below (no float32 step, which would round twice).
inline bfloat16 int_to_bf16(int32_t v) {
  if (v == 0)
    return to_bf16(0.0f);
  uint32_t mag = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
  int top = 31 - __builtin_clz(mag);
  if (top > 7) {
    int drop = top - 7;
    uint32_t half = 1u << (drop - 1), rest = mag & ((1u << drop) - 1);
    mag >>= drop;
    if (rest > half || (rest == half && (mag & 1u)))
      mag += 1;
    mag <<= drop;
  }
  float f = (float)mag;  // exact: at most 9 significant bits
  return to_bf16(v < 0 ? -f : f);
}

}  // namespace

extern "C" {

void iron_cast_f32_bf16(const float *in, bfloat16 *out, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    out[i] = to_bf16(in[i]);
}

void iron_cast_i32_bf16(const int32_t *in, bfloat16 *out, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    out[i] = int_to_bf16(in[i]);
}

void iron_zero_f32(float *buffer, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    buffer[i] = 0.0f;
}

#if defined(DIM_M) && defined(DIM_K)
// y[row_offset + i] = sum_j a[i][j] x[j], float32 sums, one rounding.
void iron_matvec_bf16(const bfloat16 *a, const bfloat16 *x, bfloat16 *y,
                      int32_t row_offset) {
  for (int i = 0; i < DIM_M; i++) {
    float sum = 0.0f;
    for (int j = 0; j < DIM_K; j++)
      sum += (float)a[i * DIM_K + j] * (float)x[j];
    y[row_offset + i] = to_bf16(sum);
  }
}
#endif

#if defined(HEADS) && defined(GROUPS) && defined(HEAD_DIM) && defined(POSITIONS)
// Scores of one chunk of POSITIONS cache rows from position `first`:
// rows at or past `valid` are not read; their scores are 0.
void iron_gqa_scores_bf16(const bfloat16 *q, const bfloat16 *keys,
                          bfloat16 *scores, int32_t first, int32_t valid) {
  const float scale = 1.0f / __builtin_sqrtf((float)HEAD_DIM);
  const int per_group = HEADS / GROUPS;
  for (int h = 0; h < HEADS; h++)
    for (int p = 0; p < POSITIONS; p++) {
      float dot = 0.0f;
      if (first + p < valid) {
        const bfloat16 *k = keys + (p * GROUPS + h / per_group) * HEAD_DIM;
        for (int d = 0; d < HEAD_DIM; d++)
          dot += (float)q[h * HEAD_DIM + d] * (float)k[d];
      }
      scores[h * POSITIONS + p] = to_bf16(dot * scale);
    }
}

// acc[h] += the chunk's weighted values, reading nothing at or past `valid`.
void iron_gqa_context_bf16(const bfloat16 *weights, const bfloat16 *values,
                           float *acc, int32_t first, int32_t valid) {
  const int per_group = HEADS / GROUPS;
  for (int p = 0; p < POSITIONS && first + p < valid; p++)
    for (int h = 0; h < HEADS; h++) {
      const float w = (float)weights[h * POSITIONS + p];
      const bfloat16 *v = values + (p * GROUPS + h / per_group) * HEAD_DIM;
      for (int d = 0; d < HEAD_DIM; d++)
        acc[h * HEAD_DIM + d] += w * (float)v[d];
    }
}
#endif

}  // extern "C"

#if defined(ROWS) && defined(HEAD_DIM) && defined(SEQ_LEN) && defined(CAUSAL)
// Prefill attention over ROWS-row blocks, one query block against one key
// block at a time (a running softmax: max, sum, rescale), float32 inside.
extern "C" {

void iron_mha_scores(const bfloat16 *q, const bfloat16 *k, float *s,
                     int32_t q_block, int32_t k_block) {
  const float scale = 1.0f / __builtin_sqrtf((float)HEAD_DIM);
  for (int i = 0; i < ROWS; i++)
    for (int j = 0; j < ROWS; j++) {
      int query = q_block * ROWS + i, key = k_block * ROWS + j;
      if (key >= SEQ_LEN || (CAUSAL && key > query)) {
        s[i * ROWS + j] = -__builtin_inff();
        continue;
      }
      float dot = 0.0f;
      for (int d = 0; d < HEAD_DIM; d++)
        dot += (float)q[i * HEAD_DIM + d] * (float)k[j * HEAD_DIM + d];
      s[i * ROWS + j] = dot * scale;
    }
}

void iron_mha_softmax(const float *s, bfloat16 *p, float *alpha, float *state,
                      int32_t k_block) {
  float *m = state, *total = state + ROWS;
  for (int i = 0; i < ROWS; i++) {
    if (k_block == 0) {
      m[i] = -__builtin_inff();
      total[i] = 0.0f;
    }
    float top = m[i];
    for (int j = 0; j < ROWS; j++)
      top = s[i * ROWS + j] > top ? s[i * ROWS + j] : top;
    float safe = __builtin_isfinite(top) ? top : 0.0f;
    float scale = __builtin_expf(m[i] - safe), sum = 0.0f;
    for (int j = 0; j < ROWS; j++) {
      float e = __builtin_expf(s[i * ROWS + j] - safe);
      sum += e;
      p[i * ROWS + j] = to_bf16(e);
    }
    total[i] = total[i] * scale + sum;
    m[i] = top;
    alpha[i] = scale;
  }
}

void iron_mha_total(const float *state, float *total) {
  for (int i = 0; i < ROWS; i++)
    total[i] = state[ROWS + i];
}

void iron_mha_context(const bfloat16 *p, const float *alpha, const bfloat16 *v,
                      float *acc, int32_t k_block) {
  for (int i = 0; i < ROWS; i++)
    for (int d = 0; d < HEAD_DIM; d++) {
      float sum = k_block == 0 ? 0.0f : acc[i * HEAD_DIM + d] * alpha[i];
      for (int j = 0; j < ROWS; j++)
        sum += (float)p[i * ROWS + j] * (float)v[j * HEAD_DIM + d];
      acc[i * HEAD_DIM + d] = sum;
    }
}

void iron_mha_output(const float *acc, const float *total, bfloat16 *o,
                     int32_t q_block) {
  for (int i = 0; i < ROWS; i++)
    for (int d = 0; d < HEAD_DIM; d++)
      o[i * HEAD_DIM + d] = q_block * ROWS + i >= SEQ_LEN
                                ? to_bf16(0.0f)
                                : to_bf16(acc[i * HEAD_DIM + d] / total[i]);
}

}  // extern "C"
#endif
