// DecodeLayer's core kernels (iron/ops/flm/decode_design.py models each as
// <name>_model), aie2p. Four kinds of core:
//
// - projection cores: the input vector in CHUNK-value chunks into x, then
//   ROWS x CHUNK weight tiles (bf16, or bfp16ebs8 blocks) times x into a
//   float32 accumulator, a round's rows passed down the chain of cores; for
//   the MLP, bf16(GELU(gate) x up) kept and sent back round by round;
// - the hub: the float32 residual, the norms (1/sqrt(mean(x^2) + eps), then
//   x inv w), the relays between stages, GELU x the per-layer input, the
//   layer scalar;
// - the rope core: the q/k/v heads normed (q_norm, k_norm, v unweighted)
//   and rotated by a RoPE table row [cos | sin], each rounded to bf16;
// - the attention core: per KV head, an online softmax over the keys, one
//   head-chunk of a key or value at a time.
//
// Sizes that differ between layer types come as scalars (the design's
// parameter words); a core's cursors live in its int32 state.
#include "gemma4.h"

using namespace gemma4;

namespace {

// state words of a projection core, the hub, the rope core, the attention core
enum { LOAD = 0, KCHUNK = 1, GLU = 2, SEND = 3 };
enum { CURSOR = 0, CTX = 1 };
enum { SUM = 0, INV = 1, SUM_T = 2, INV_T = 3, SCALAR = 4 };
enum { TAKE = 0, VEC = 1, EMIT = 2 };
enum { QTAKE = 0, KCUR = 1, VCUR = 2, OUTCUR = 3 };

void copy_f32(const float *from, float *to, int32_t n) {
  for (int32_t j = 0; j < n; j += LANES)
    ::aie::store_v(to + j, ::aie::load_v<LANES>(from + j));
}

void copy_bf16(const bfloat16 *from, bfloat16 *to, int32_t n) {
  for (int32_t j = 0; j < n; j += LANES)
    ::aie::store_v(to + j, ::aie::load_v<LANES>(from + j));
}

void store_bf16(bfloat16 *to, floats v) { ::aie::store_v(to, acc16(v).to_vector<bfloat16>()); }

// the next CHUNK of a vector of `size` values, wrapping
int32_t advance(int32_t *state, int32_t size) {
  const int32_t at = state[CURSOR];
  state[CURSOR] = (at + CHUNK) % size;
  return at;
}

// the sum of squares of float32 values (16 lanes, each square rounded, then
// added)
float squares(const float *v, int32_t n) { return dot(v, v, n); }

// out[i] = x[i] inv w[i] over n values, (x inv) rounded first
void normed(const float *x, float inv, const bfloat16 *w, float *out, int32_t n) {
  for (int32_t j = 0; j < n; j += LANES)
    ::aie::store_v(out + j, times(times(::aie::load_v<LANES>(x + j), inv),
                                  widen(::aie::load_v<LANES>(w + j))));
}

} // namespace

extern "C" {

// ---- projection cores ----

void gemma4_gemv_load(const bfloat16 *chunk, bfloat16 *x, int32_t *state, int32_t chunks) {
  const int32_t j = state[LOAD];
  copy_bf16(chunk, x + j * CHUNK, CHUNK);
  state[LOAD] = (j + 1) % chunks;
}

// acc rows of `slot` = (first k-chunk) or += tile . x's k-chunk
void gemma4_gemv_bf16(const bfloat16 *w, const bfloat16 *x, float *acc, int32_t slot,
                      int32_t *state, int32_t chunks) {
  const int32_t j = state[KCHUNK];
  float *rows = acc + slot * ROWS;
  for (int32_t i = 0; i < ROWS; i++) {
    const float part = dot(w + i * CHUNK, x + j * CHUNK, CHUNK);
    rows[i] = j == 0 ? part : rows[i] + part;
  }
  state[KCHUNK] = (j + 1) % chunks;
}

void gemma4_gemv_bfp16(const bfp16ebs8 *w, const bfloat16 *x, float *acc, int32_t slot,
                       int32_t *state, int32_t chunks) {
  const uint8_t *bytes = reinterpret_cast<const uint8_t *>(w);
  const int32_t j = state[KCHUNK];
  float *rows = acc + slot * ROWS;
  for (int32_t i = 0; i < ROWS; i++) {
    const float part = dot_blocks(bytes + i * CHUNK / 8 * 9, x + j * CHUNK, CHUNK);
    rows[i] = j == 0 ? part : rows[i] + part;
  }
  state[KCHUNK] = (j + 1) % chunks;
}

void gemma4_chain_first(float *out, const float *acc) { copy_f32(acc, out, ROWS); }

// what the cores before sent, this core's rows at `place`
void gemma4_chain(const float *upstream, float *out, const float *acc, int32_t place) {
  copy_f32(upstream, out, CHUNK);
  copy_f32(acc, out + place * ROWS, ROWS);
}

// bf16(gelu(gate) x up) of a round's gate (slot 0) and up (slot 1) rows
void gemma4_glu(const float *acc, float *m, int32_t *state, int32_t rounds) {
  ConvEven rounding;
  const int32_t i = state[GLU];
  for (int32_t r = 0; r < ROWS; r += LANES) {
    const floats y = times(gelu(::aie::load_v<LANES>(acc + r)), ::aie::load_v<LANES>(acc + ROWS + r));
    ::aie::store_v(m + i * ROWS + r, widen(acc16(y).to_vector<bfloat16>()));
  }
  state[GLU] = (i + 1) % rounds;
}

void gemma4_chain_m_first(float *out, const float *m, int32_t *state, int32_t rounds) {
  const int32_t i = state[SEND];
  copy_f32(m + i * ROWS, out, ROWS);
  state[SEND] = (i + 1) % rounds;
}

void gemma4_chain_m(const float *upstream, float *out, const float *m, int32_t place,
                    int32_t *state, int32_t rounds) {
  const int32_t i = state[SEND];
  copy_f32(upstream, out, CHUNK);
  copy_f32(m + i * ROWS, out + place * ROWS, ROWS);
  state[SEND] = (i + 1) % rounds;
}

// ---- the hub ----

void gemma4_hub_load(const bfloat16 *chunk, float *resid, float *stats, int32_t *state,
                     int32_t hidden) {
  const int32_t at = advance(state, hidden);
  if (at == 0)
    stats[SUM] = 0.0f;
  for (int32_t j = 0; j < CHUNK; j += LANES)
    ::aie::store_v(resid + at + j, widen(::aie::load_v<LANES>(chunk + j)));
  stats[SUM] += dot(chunk, chunk, CHUNK);
}

// a chunk of bf16(resid inv w), inv taken at the first chunk
void gemma4_hub_norm(const float *resid, const bfloat16 *w, bfloat16 *out, float *stats,
                     int32_t *state, int32_t eps_bits, int32_t hidden) {
  ConvEven rounding;
  const int32_t at = advance(state, hidden);
  if (at == 0)
    stats[INV] = inverse_rms(stats[SUM], hidden, bits_float(eps_bits));
  float normed_chunk[CHUNK];
  normed(resid + at, stats[INV], w, normed_chunk, CHUNK);
  for (int32_t j = 0; j < CHUNK; j += LANES)
    store_bf16(out + j, ::aie::load_v<LANES>(normed_chunk + j));
}

void gemma4_hub_copy(const float *g, float *out) { copy_f32(g, out, CHUNK); }

// a head-chunk of the context into the input chunk
void gemma4_hub_ctx(const bfloat16 *ctx, bfloat16 *out, int32_t *state, int32_t head_chunk) {
  const int32_t at = state[CTX];
  copy_bf16(ctx, out + at, head_chunk);
  state[CTX] = (at + head_chunk) % CHUNK;
}

// a round of a projection's outputs into t; their squares summed
void gemma4_hub_take(const float *g, float *t, float *stats, int32_t *state, int32_t hidden) {
  const int32_t at = advance(state, hidden);
  if (at == 0)
    stats[SUM_T] = 0.0f;
  copy_f32(g, t + at, CHUNK);
  stats[SUM_T] += squares(g, CHUNK);
}

// resid += t inv_t w over a chunk; the new residual's squares summed
void gemma4_hub_residual(const float *t, const bfloat16 *w, float *resid, float *stats,
                         int32_t *state, int32_t eps_bits, int32_t hidden) {
  const int32_t at = advance(state, hidden);
  if (at == 0) {
    stats[INV_T] = inverse_rms(stats[SUM_T], hidden, bits_float(eps_bits));
    stats[SUM] = 0.0f;
  }
  float branch[CHUNK];
  normed(t + at, stats[INV_T], w, branch, CHUNK);
  for (int32_t j = 0; j < CHUNK; j += LANES)
    ::aie::store_v(resid + at + j,
                   ::aie::add(::aie::load_v<LANES>(resid + at + j), ::aie::load_v<LANES>(branch + j)));
  stats[SUM] += squares(resid + at, CHUNK);
}

void gemma4_hub_relay(const float *g, bfloat16 *out) {
  ConvEven rounding;
  for (int32_t j = 0; j < CHUNK; j += LANES)
    store_bf16(out + j, ::aie::load_v<LANES>(g + j));
}

void gemma4_hub_out(const float *resid, bfloat16 *out, int32_t *state, int32_t hidden) {
  ConvEven rounding;
  const int32_t at = advance(state, hidden);
  for (int32_t j = 0; j < CHUNK; j += LANES)
    store_bf16(out + j, ::aie::load_v<LANES>(resid + at + j));
}

// bf16(gelu(the per-layer gate) x the token's per-layer input)
void gemma4_hub_per_layer(const float *g, const bfloat16 *ple, bfloat16 *out) {
  ConvEven rounding;
  for (int32_t j = 0; j < CHUNK; j += LANES)
    store_bf16(out + j, times(gelu(::aie::load_v<LANES>(g + j)), widen(::aie::load_v<LANES>(ple + j))));
}

void gemma4_hub_scalar(const bfloat16 *chunk, float *stats) { stats[SCALAR] = (float)chunk[0]; }

// y = bf16((resid + t inv_t w) x the layer scalar), a chunk
void gemma4_hub_final(const float *t, const bfloat16 *w, const float *resid, bfloat16 *y,
                      float *stats, int32_t *state, int32_t eps_bits, int32_t hidden) {
  ConvEven rounding;
  const int32_t at = advance(state, hidden);
  if (at == 0)
    stats[INV_T] = inverse_rms(stats[SUM_T], hidden, bits_float(eps_bits));
  float branch[CHUNK];
  normed(t + at, stats[INV_T], w, branch, CHUNK);
  for (int32_t j = 0; j < CHUNK; j += LANES) {
    const floats r = ::aie::add(::aie::load_v<LANES>(resid + at + j), ::aie::load_v<LANES>(branch + j));
    store_bf16(y + j, times(r, stats[SCALAR]));
  }
}

void gemma4_hub_final_plain(const float *resid, bfloat16 *y, float *stats, int32_t *state,
                            int32_t hidden) {
  ConvEven rounding;
  const int32_t at = advance(state, hidden);
  for (int32_t j = 0; j < CHUNK; j += LANES)
    store_bf16(y + j, times(::aie::load_v<LANES>(resid + at + j), stats[SCALAR]));
}

// ---- the rope core ----

void gemma4_rope_take(const float *obj, float *buf, int32_t *state, int32_t rounds) {
  const int32_t i = state[TAKE];
  copy_f32(obj, buf + i * CHUNK, CHUNK);
  state[TAKE] = (i + 1) % rounds;
}

void gemma4_rope_vector(const bfloat16 *obj, bfloat16 *vecs, int32_t *state, int32_t count,
                        int32_t head_chunk) {
  const int32_t i = state[VEC];
  copy_bf16(obj, vecs + i * head_chunk, head_chunk);
  state[VEC] = (i + 1) % count;
}

// one head of `dim` values in place: seg inv (w), rotated by cos/sin when
// asked, rounded to bf16
static void prepare_head(float *seg, const bfloat16 *w, const bfloat16 *cos, const bfloat16 *sin,
                         bool rotate, int32_t dim, float eps) {
  const float inv = inverse_rms(squares(seg, dim), dim, eps);
  for (int32_t j = 0; j < dim; j += LANES) {
    floats v = times(::aie::load_v<LANES>(seg + j), inv);
    if (w != nullptr)
      v = times(v, widen(::aie::load_v<LANES>(w + j)));
    ::aie::store_v(seg + j, v);
  }
  const int32_t half = dim / 2;
  for (int32_t j = 0; j < half && rotate; j += LANES) {
    const floats first = ::aie::load_v<LANES>(seg + j), second = ::aie::load_v<LANES>(seg + half + j);
    const floats c = widen(::aie::load_v<LANES>(cos + j)), s = widen(::aie::load_v<LANES>(sin + j));
    ::aie::store_v(seg + j, ::aie::sub(times(first, c), times(second, s)));
    ::aie::store_v(seg + half + j, ::aie::add(times(second, c), times(first, s)));
  }
  for (int32_t j = 0; j < dim; j += LANES)
    ::aie::store_v(seg + j, widen(acc16(::aie::load_v<LANES>(seg + j)).to_vector<bfloat16>()));
}

// q's heads normed (q_norm) and rotated; with a new key and value, k's
// normed (k_norm) and rotated and v's normed; vecs = [q_norm | k_norm | cos | sin]
void gemma4_rope_prepare(float *buf, const bfloat16 *vecs, int32_t *state, int32_t dim,
                         int32_t kv_new, int32_t eps_bits, int32_t heads, int32_t kv_heads) {
  ConvEven rounding;
  const float eps = bits_float(eps_bits);
  const bfloat16 *q_norm = vecs, *k_norm = vecs + dim, *cos = vecs + 2 * dim;
  const bfloat16 *sin = cos + dim / 2;
  for (int32_t h = 0; h < heads; h++)
    prepare_head(buf + h * dim, q_norm, cos, sin, true, dim, eps);
  for (int32_t g = 0; g < kv_heads && kv_new; g++) {
    prepare_head(buf + (heads + g) * dim, k_norm, cos, sin, true, dim, eps);
    prepare_head(buf + (heads + kv_heads + g) * dim, nullptr, cos, sin, false, dim, eps);
  }
  state[EMIT] = 0;
}

void gemma4_rope_emit(const float *buf, bfloat16 *out, int32_t *state, int32_t head_chunk) {
  ConvEven rounding;
  const int32_t i = state[EMIT];
  for (int32_t j = 0; j < head_chunk; j += LANES)
    store_bf16(out + j, ::aie::load_v<LANES>(buf + i * head_chunk + j));
  state[EMIT] = i + 1;
}

void gemma4_rope_emit_both(const float *buf, bfloat16 *out, bfloat16 *copy, int32_t *state,
                           int32_t head_chunk) {
  ConvEven rounding;
  const int32_t i = state[EMIT];
  for (int32_t j = 0; j < head_chunk; j += LANES) {
    store_bf16(out + j, ::aie::load_v<LANES>(buf + i * head_chunk + j));
    store_bf16(copy + j, ::aie::load_v<LANES>(buf + i * head_chunk + j));
  }
  state[EMIT] = i + 1;
}

// ---- the attention core ----

// a head-chunk of the group's queries; at the first, the group's m = -inf,
// l = 0 and accumulator 0
void gemma4_attention_take_q(const bfloat16 *obj, bfloat16 *q, float *acc, float *stats,
                             int32_t *state, int32_t count, int32_t head_chunk, int32_t group,
                             int32_t size) {
  const int32_t i = state[QTAKE];
  if (i == 0) {
    for (int32_t h = 0; h < group; h++) {
      stats[h] = -__builtin_inff();
      stats[group + h] = 0.0f;
    }
    for (int32_t j = 0; j < size; j += LANES)
      ::aie::store_v(acc + j, ::aie::zeros<float, LANES>());
  }
  copy_bf16(obj, q + i * head_chunk, head_chunk);
  state[QTAKE] = (i + 1) % count;
}

// every query head's score against a head-chunk of a key, summed over the chunks
void gemma4_attention_score(const bfloat16 *k, const bfloat16 *q, float *scores, int32_t *state,
                            int32_t dim, int32_t head_chunk, int32_t group) {
  const int32_t at = state[KCUR] * head_chunk;
  for (int32_t h = 0; h < group; h++) {
    const float part = dot(q + h * dim + at, k, head_chunk);
    scores[h] = at == 0 ? part : scores[h] + part;
  }
  state[KCUR] = (state[KCUR] + 1) % (dim / head_chunk);
}

// one key's step, the group's heads as lanes: m' = max(m, s), a = exp(m -
// m') (0 where nothing was seen yet), p = exp(s - m') (bf16), l = l a + p
void gemma4_attention_softmax(const float *scores, float *stats, int32_t group) {
  ConvEven rounding;
  float *m = stats, *l = stats + group, *alpha = stats + 2 * group, *p = stats + 3 * group;
  ::aie::vector<float, LANES> s = ::aie::zeros<float, LANES>(), old = s, sum = s;
  for (int32_t h = 0; h < group; h++) {
    s[h] = scores[h];
    old[h] = __builtin_isfinite(m[h]) ? m[h] : scores[h];
    sum[h] = l[h];
  }
  const ::aie::vector<float, LANES> top = ::aie::max(s, old);
  const bf16s a = exp_bf16(::aie::sub(old, top)), e = exp_bf16(::aie::sub(s, top));
  for (int32_t h = 0; h < group; h++) {
    alpha[h] = __builtin_isfinite(m[h]) ? (float)a[h] : 0.0f;
    p[h] = (float)e[h];
    l[h] = sum[h] * alpha[h] + p[h];
    m[h] = top[h];
  }
}

// acc = acc a + p v over a head-chunk of each head's row
void gemma4_attention_value(const bfloat16 *v, float *acc, const float *stats, int32_t *state,
                            int32_t dim, int32_t head_chunk, int32_t group) {
  const float *alpha = stats + 2 * group, *p = stats + 3 * group;
  const int32_t at = state[VCUR] * head_chunk;
  for (int32_t h = 0; h < group; h++)
    for (int32_t j = 0; j < head_chunk; j += LANES) {
      float *row = acc + h * dim + at + j;
      acc16 sum(times(::aie::load_v<LANES>(row), alpha[h]));
      sum = ::aie::mac(sum, ::aie::broadcast<bfloat16, LANES>((bfloat16)p[h]),
                       ::aie::load_v<LANES>(v + j));
      ::aie::store_v(row, sum.to_vector<float>());
    }
  state[VCUR] = (state[VCUR] + 1) % (dim / head_chunk);
}

// a head-chunk of the context: bf16(acc (1 / l))
void gemma4_attention_out(const float *acc, const float *stats, bfloat16 *ctx, int32_t *state,
                          int32_t dim, int32_t count, int32_t head_chunk, int32_t group) {
  ConvEven rounding;
  const int32_t i = state[OUTCUR], at = i * head_chunk;
  const float inverse = reciprocal(stats[group + at / dim]);
  for (int32_t j = 0; j < head_chunk; j += LANES)
    store_bf16(ctx + j, times(::aie::load_v<LANES>(acc + at + j), inverse));
  state[OUTCUR] = (i + 1) % count;
}

} // extern "C"
