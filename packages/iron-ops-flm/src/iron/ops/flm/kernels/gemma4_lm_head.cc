// LMHead's core kernels (iron/ops/flm/lm_head.py, whose *_model functions
// model them), aie2p: every core loads x and the final norm's weight in
// CHUNK-value chunks, normalises x into its own bf16 copy, and multiplies
// HEAD_ROWS rows of W at a time into soft-capped bf16 logits.
#include "gemma4.h"

using namespace gemma4;

namespace {

constexpr int32_t HEAD_ROWS = 4;
// state words: the load cursor, the norm cursor; stats: sum of squares, 1/rms
enum { LOAD_AT = 0, NORM_AT = 1 };
enum { SUM = 0, INV = 1 };

// cap tanh(z / cap) (z / cap as z (1 / cap) in float32); cap_bits 0 keeps z
floats capped(floats z, int32_t cap_bits) {
  if (cap_bits == 0)
    return z;
  const float cap = bits_float(cap_bits);
  return times(tanh_of(times(z, 1.0f / cap)), cap);
}

void store_rows(floats z, bfloat16 *out, int32_t cap_bits) {
  const floats y = capped(z, cap_bits);
  const bf16s rounded = acc16(y).to_vector<bfloat16>();
  for (int32_t r = 0; r < HEAD_ROWS; r++)
    out[r] = rounded[r];
}

} // namespace

extern "C" {

// x chunk into x at the cursor; its squares added to the sum (restarted at
// the first chunk)
void gemma4_head_load(const bfloat16 *chunk, bfloat16 *x, float *stats, int32_t *state,
                      int32_t dim) {
  const int32_t at = state[LOAD_AT];
  if (at == 0)
    stats[SUM] = 0.0f;
  for (int32_t j = 0; j < CHUNK; j += LANES)
    ::aie::store_v(x + at + j, ::aie::load_v<LANES>(chunk + j));
  stats[SUM] += dot(chunk, chunk, CHUNK);
  state[LOAD_AT] = (at + CHUNK) % dim;
}

// a chunk of x, in place: bf16(x inv w), inv = 1/sqrt(sum / dim + eps) taken
// at the first chunk
void gemma4_head_norm(const bfloat16 *w, bfloat16 *x, float *stats, int32_t *state, int32_t dim,
                      int32_t eps_bits) {
  ConvEven rounding;
  const int32_t at = state[NORM_AT];
  if (at == 0)
    stats[INV] = inverse_rms(stats[SUM], dim, bits_float(eps_bits));
  for (int32_t j = 0; j < CHUNK; j += LANES) {
    const floats scaled = times(widen(::aie::load_v<LANES>(x + at + j)), stats[INV]);
    const floats y = times(scaled, widen(::aie::load_v<LANES>(w + j)));
    ::aie::store_v(x + at + j, acc16(y).to_vector<bfloat16>());
  }
  state[NORM_AT] = (at + CHUNK) % dim;
}

// HEAD_ROWS logits: each row of the tile (dim bf16) . x, soft-capped, bf16
void gemma4_head_rows_bf16(const bfloat16 *w, const bfloat16 *x, bfloat16 *out, int32_t dim,
                           int32_t cap_bits) {
  ConvEven rounding;
  floats z = ::aie::zeros<float, LANES>();
  for (int32_t r = 0; r < HEAD_ROWS; r++)
    z[r] = dot(w + r * dim, x, dim);
  store_rows(z, out, cap_bits);
}

// as gemma4_head_rows_bf16, the tile's rows as bfp16ebs8 blocks
void gemma4_head_rows_bfp16(const bfp16ebs8 *w, const bfloat16 *x, bfloat16 *out, int32_t dim,
                            int32_t cap_bits) {
  ConvEven rounding;
  const uint8_t *bytes = reinterpret_cast<const uint8_t *>(w);
  floats z = ::aie::zeros<float, LANES>();
  for (int32_t r = 0; r < HEAD_ROWS; r++)
    z[r] = dot_blocks(bytes + r * dim / 8 * 9, x, dim);
  store_rows(z, out, cap_bits);
}

} // extern "C"
