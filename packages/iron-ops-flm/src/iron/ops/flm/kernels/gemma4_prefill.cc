// The prefill attention cores' kernels (PrefillAttention,
// PrefillSlidingAttention; iron/ops/flm/prefill.py models them), aie2p. A
// core holds one (query head, block of BQ = 4096 / head_dim rows) unit of a
// wave and folds in key blocks of BK = 2048 / head_dim rows (the keys, then
// the values, of one memtile object) with an online softmax: per row the
// running max m, sum l and float32 accumulator, the weights exp(s - m) as
// bf16 (aie::exp2), the products bf16 x bf16 exact.
#include "gemma4.h"

using namespace gemma4;

namespace {

constexpr int32_t Q_ELEMS = 4096, K_ELEMS = 2048;
constexpr int32_t MAX_KEYS = K_ELEMS / 32; // head_dim >= 32
// state words
enum { Q_SEEN = 0, BLOCK = 1, FIRST_KEY = 2, FIRST_QUERY = 3, WAVES = 4 };

// the first key position of a wave (prefill.first_key): 0 without a window,
// else the first its first query sees, down to a block, and clamped so the
// wave's key blocks end by L_end
int32_t first_key(int32_t wave, int32_t begin, int32_t end, int32_t blocks, int32_t cores,
                  int32_t group, int32_t bq, int32_t bk, int32_t window) {
  if (window == 0)
    return 0;
  const int32_t first_query = begin + wave * cores / group * bq;
  int32_t start = first_query - window + 1;
  start = start > 0 ? start / bk * bk : 0;
  const int32_t last = end - blocks * bk;
  return start < last ? start : last;
}

} // namespace

extern "C" {

// after a call: no wave begun
void gemma4_prefill_reset(int32_t *state) { state[WAVES] = 0; }

// a wave begins: the unit's first query, the wave's first key, and every
// row's m = -inf, l = 0, accumulator 0
void gemma4_prefill_begin(float *acc, float *stats, int32_t *state, int32_t head_dim,
                          int32_t core, int32_t cores, int32_t group, int32_t window,
                          int32_t begin, int32_t end, int32_t blocks, int32_t per_head) {
  const int32_t bq = Q_ELEMS / head_dim, bk = K_ELEMS / head_dim;
  const int32_t wave = state[WAVES] % per_head;
  state[FIRST_QUERY] = begin + (wave * cores + core) / group * bq;
  state[FIRST_KEY] = first_key(wave, begin, end, blocks, cores, group, bq, bk, window);
  state[Q_SEEN] = state[BLOCK] = 0;
  state[WAVES] += 1;
  for (int32_t i = 0; i < bq; i++) {
    stats[i] = -__builtin_inff();
    stats[bq + i] = 0.0f;
  }
  for (int32_t j = 0; j < Q_ELEMS; j += LANES)
    ::aie::store_v(acc + j, ::aie::zeros<float, LANES>());
}

// the wave's query blocks pass by; the core keeps the core-th
void gemma4_prefill_take_q(const bfloat16 *obj, bfloat16 *q, int32_t *state, int32_t core) {
  if (state[Q_SEEN] == core)
    for (int32_t j = 0; j < Q_ELEMS; j += LANES)
      ::aie::store_v(q + j, ::aie::load_v<LANES>(obj + j));
  state[Q_SEEN] += 1;
}

// one key block into every row: s = q . k (-inf where the query does not
// see the key), m' = max(m, s), a = exp(m - m'), p = exp(s - m'), l = l a +
// sum p in key order, acc = acc a + sum p v in key order
void gemma4_prefill_block(const bfloat16 *q, const bfloat16 *kv, float *acc, float *stats,
                          int32_t *state, int32_t head_dim, int32_t window) {
  ConvEven rounding;
  const int32_t bq = Q_ELEMS / head_dim, bk = K_ELEMS / head_dim;
  const bfloat16 *keys = kv, *values = kv + K_ELEMS;
  float *m = stats, *l = stats + bq;
  const int32_t first_query = state[FIRST_QUERY];
  const int32_t first = state[FIRST_KEY] + state[BLOCK] * bk;
  state[BLOCK] += 1;
  float s[MAX_KEYS];
  bfloat16 p[MAX_KEYS];
  for (int32_t i = 0; i < bq; i++) {
    const int32_t query = first_query + i;
    float top = m[i];
    for (int32_t t = 0; t < bk; t++) {
      const int32_t key = first + t;
      const bool seen = key <= query && (window == 0 || query - key < window);
      s[t] = seen ? dot(q + i * head_dim, keys + t * head_dim, head_dim) : -__builtin_inff();
      top = s[t] > top ? s[t] : top;
    }
    if (!__builtin_isfinite(top))
      continue; // no key seen yet: the row stays as it is
    const float alpha = __builtin_isfinite(m[i])
                            ? (float)exp_bf16(::aie::broadcast<float, LANES>(m[i] - top))[0]
                            : 0.0f;
    for (int32_t t = 0; t < bk; t += LANES) {
      floats shifted;
      for (int32_t k = 0; k < LANES; k++)
        shifted[k] = t + k < bk ? s[t + k] - top : -__builtin_inff();
      const bf16s e = exp_bf16(shifted);
      for (int32_t k = 0; k < LANES && t + k < bk; k++)
        p[t + k] = e[k];
    }
    float total = l[i] * alpha;
    for (int32_t t = 0; t < bk; t++)
      total += (float)p[t];
    l[i] = total;
    m[i] = top;
    for (int32_t d = 0; d < head_dim; d += LANES) {
      acc16 sum(times(::aie::load_v<LANES>(acc + i * head_dim + d), alpha));
      for (int32_t t = 0; t < bk; t++)
        sum = ::aie::mac(sum, ::aie::broadcast<bfloat16, LANES>(p[t]),
                         ::aie::load_v<LANES>(values + t * head_dim + d));
      ::aie::store_v(acc + i * head_dim + d, sum.to_vector<float>());
    }
  }
}

// o = bf16(acc (1 / l)), row by row
void gemma4_prefill_end(const float *acc, const float *stats, bfloat16 *o, int32_t head_dim) {
  ConvEven rounding;
  const int32_t bq = Q_ELEMS / head_dim;
  for (int32_t i = 0; i < bq; i++) {
    const float inverse = reciprocal(stats[bq + i]);
    for (int32_t d = 0; d < head_dim; d += LANES) {
      const floats row = times(::aie::load_v<LANES>(acc + i * head_dim + d), inverse);
      ::aie::store_v(o + i * head_dim + d, acc16(row).to_vector<bfloat16>());
    }
  }
}

// a block of o past the call's rows
void gemma4_prefill_zero(bfloat16 *o) {
  for (int32_t j = 0; j < Q_ELEMS; j += LANES)
    ::aie::store_v(o + j, ::aie::zeros<bfloat16, LANES>());
}

} // extern "C"
