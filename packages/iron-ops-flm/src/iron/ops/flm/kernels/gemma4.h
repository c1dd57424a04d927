// What the Gemma 4 kernels of iron.ops.flm share (gemma4_lm_head.cc,
// gemma4_prefill.cc, gemma4_decode.cc), aie2p only: the rounding mode, the
// order 16 float32 lanes are added in, dot products, 1/sqrt and 1/x, tanh,
// GELU and exp, and bfp16ebs8 blocks. iron/ops/flm/kernel_math.py models
// each step in numpy.
//
// - A dot product runs on 16 float32 lanes: lane l takes the exact products
//   of elements l, l + 16, ... in order, then the lanes are added halves
//   first (sum_lanes).
// - tanh is the [7/6] Pade approximant over float32 vectors, its input
//   clamped to +-4.97 (error below 1e-4), not aie::tanh, whose error on
//   aie2p IRON measured at up to 0.038 (1.1 of a logit after a soft-cap of 30).
// - exp is aie::exp2 of x log2(e), a bf16 out.
// - 1/sqrt and 1/x are the core's estimates with one Newton step.
// - Float scalars arrive as the int32 bits of a float32 (a design passes
//   kernel scalars as integers).
#pragma once

#include <aie_api/aie.hpp>
#include <stdint.h>

namespace gemma4 {

constexpr int32_t LANES = 16;
// vectors between stages move in chunks of CHUNK values; a projection tile
// is ROWS rows of CHUNK (iron.ops.flm.decode_layer)
constexpr int32_t CHUNK = 256, ROWS = 16;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float TANH_CLAMP = 4.97f;
constexpr float GELU_A = 0.7978845608028654f, GELU_B = 0.044715f;

using floats = ::aie::vector<float, LANES>;
using bf16s = ::aie::vector<bfloat16, LANES>;
using acc16 = ::aie::accum<accfloat, LANES>;

// Every float -> bf16 conversion while one lives rounds to nearest even; a
// core boots in floor (toward -inf). The caller's mode is given back.
class ConvEven {
public:
  ConvEven() : saved_(::aie::swap_rounding(::aie::rounding_mode::conv_even)) {}
  ~ConvEven() { ::aie::set_rounding(saved_); }

private:
  ::aie::rounding_mode saved_;
};

inline float bits_float(int32_t bits) {
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}

// the 16 lanes added halves first: k + 8, then k + 4, ...
inline float sum_lanes(floats v) {
  float lane[LANES];
  for (int32_t k = 0; k < LANES; k++)
    lane[k] = v[k];
  for (int32_t width = LANES / 2; width >= 1; width /= 2)
    for (int32_t k = 0; k < width; k++)
      lane[k] += lane[k + width];
  return lane[0];
}

// a . b over n elements (a multiple of 16)
template <typename T> inline float dot(const T *a, const T *b, int32_t n) {
  acc16 acc = ::aie::zeros<accfloat, LANES>();
  for (int32_t j = 0; j < n; j += LANES)
    acc = ::aie::mac(acc, ::aie::load_v<LANES>(a + j), ::aie::load_v<LANES>(b + j));
  return sum_lanes(acc.template to_vector<float>());
}

inline floats times(floats a, floats b) { return ::aie::mul(a, b).to_vector<float>(); }
inline floats times(floats a, float b) { return ::aie::mul(a, b).to_vector<float>(); }
inline floats widen(bf16s v) { return acc16(v).to_vector<float>(); }

inline float rsqrt(float x) {
  const float r = ::aie::invsqrt(x);
  return r * (1.5f - 0.5f * x * r * r);
}

inline float reciprocal(float x) {
  const float r = ::aie::inv(x);
  return r * (2.0f - x * r);
}

inline floats reciprocal(floats x) {
  const floats r = ::aie::inv(x);
  return times(r, ::aie::sub(::aie::broadcast<float, LANES>(2.0f), times(x, r)));
}

// 1 / sqrt(sum / n + eps)
inline float inverse_rms(float sum, int32_t n, float eps) { return rsqrt(sum / (float)n + eps); }

// x (135135 + 17325 x^2 + 378 x^4 + x^6) / (135135 + 62370 x^2 + 3150 x^4 +
// 28 x^6), x clamped to +-TANH_CLAMP, Horner in float32
inline floats tanh_of(floats x) {
  x = ::aie::min(::aie::max(x, -TANH_CLAMP), TANH_CLAMP);
  const floats x2 = times(x, x);
  floats p = ::aie::add(x2, 378.0f);
  p = ::aie::add(times(x2, p), 17325.0f);
  p = times(x, ::aie::add(times(x2, p), 135135.0f));
  floats q = ::aie::add(times(x2, 28.0f), 3150.0f);
  q = ::aie::add(times(x2, q), 62370.0f);
  q = ::aie::add(times(x2, q), 135135.0f);
  return times(p, reciprocal(q));
}

// 0.5 x (1 + tanh(a (x + b x^3)))
inline floats gelu(floats x) {
  const floats cube = times(times(x, x), x);
  const floats inner = times(::aie::add(x, times(cube, GELU_B)), GELU_A);
  return times(times(x, 0.5f), ::aie::add(tanh_of(inner), 1.0f));
}

// exp(x) as bf16: aie::exp2 of the float32 product x log2(e)
inline bf16s exp_bf16(floats x) { return ::aie::exp2<bfloat16>(times(x, LOG2E)); }

// 16 values of a row of bfp16ebs8 blocks (2 blocks of 9 bytes: the shared
// exponent E, then 8 int8 mantissas m, each m 2^(E - 133)), exactly
inline floats unpack_blocks(const uint8_t *blocks) {
  floats out;
  for (int32_t b = 0; b < 2; b++) {
    const int32_t e = blocks[9 * b];
    const int32_t bits = e >= 7 ? (e - 6) << 23 : 1 << (e + 16); // 2^(E - 133)
    const float scale = bits_float(bits);
    for (int32_t i = 0; i < 8; i++)
      out[8 * b + i] = (float)(int8_t)blocks[9 * b + 1 + i] * scale;
  }
  return out;
}

// a row of n values stored as bfp16ebs8 blocks . a bf16 vector
inline float dot_blocks(const uint8_t *blocks, const bfloat16 *x, int32_t n) {
  acc16 acc = ::aie::zeros<accfloat, LANES>();
  for (int32_t j = 0; j < n; j += LANES)
    acc = ::aie::mac(acc, unpack_blocks(blocks + j / 8 * 9), widen(::aie::load_v<LANES>(x + j)));
  return sum_lanes(acc.to_vector<float>());
}

} // namespace gemma4
