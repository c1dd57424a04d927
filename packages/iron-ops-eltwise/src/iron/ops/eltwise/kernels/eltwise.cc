// Line kernels of iron.ops.eltwise's streaming designs, for aie2 and aie2p
// (compiled with Peano). Each takes its line length n at run time (any even
// count), computes in float and stores bf16 once per output; the numpy
// models in iron/ops/eltwise/line_kernels.py state the same arithmetic.
//
// Float scalars arrive as the int32 bits of a float32: a design passes
// kernel scalars as integer constants.
#include <aie_api/aie.hpp>
#include <stdint.h>

namespace {

inline float from_bits(int32_t bits) {
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}

inline bfloat16 store(float value) { return (bfloat16)value; }

} // namespace

extern "C" {

void iron_add_bf16(const bfloat16 *a, const bfloat16 *b, bfloat16 *y,
                   int32_t n) {
  for (int32_t i = 0; i < n; i++)
    y[i] = store((float)a[i] + (float)b[i]);
}

void iron_mul_bf16(const bfloat16 *a, const bfloat16 *b, bfloat16 *y,
                   int32_t n) {
  for (int32_t i = 0; i < n; i++)
    y[i] = store((float)a[i] * (float)b[i]);
}

// max(x, 0) as numpy's maximum: -0 gives +0, NaN stays NaN
void iron_relu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    y[i] = !((float)x[i] <= 0.0f) ? x[i] : store(0.0f);
}

// out = factor * x + y, the factor a float32
void iron_axpy_bf16(const bfloat16 *x, const bfloat16 *y, bfloat16 *out,
                    int32_t n, int32_t factor_bits) {
  const float factor = from_bits(factor_bits);
  for (int32_t i = 0; i < n; i++)
    out[i] = store(factor * (float)x[i] + (float)y[i]);
}

// y = x where x >= 0, alpha * x elsewhere, alpha a float32
void iron_leaky_relu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n,
                          int32_t alpha_bits) {
  const float alpha = from_bits(alpha_bits);
  for (int32_t i = 0; i < n; i++) {
    const float v = (float)x[i];
    y[i] = v >= 0.0f ? x[i] : store(alpha * v);
  }
}

// y = min(max(x, lo), hi), the bounds float32
void iron_clamp_bf16(const bfloat16 *x, bfloat16 *y, int32_t n, int32_t lo_bits,
                     int32_t hi_bits) {
  const float lo = from_bits(lo_bits), hi = from_bits(hi_bits);
  for (int32_t i = 0; i < n; i++) {
    const float v = (float)x[i];
    y[i] = store(v < lo ? lo : (v > hi ? hi : v));
  }
}

// One tile: n / 2 bytes of unsigned 4-bit codes (element 2k in the low
// nibble), then n / group little-endian bf16 scales; y = code * scale, exact
// in float and rounded once.
void iron_dequant_u4_bf16(const uint8_t *packed, bfloat16 *y, int32_t n,
                          int32_t group) {
  const uint8_t *scales = packed + n / 2;
  for (int32_t g = 0; g < n / group; g++) {
    uint16_t bits = (uint16_t)(scales[2 * g] | (scales[2 * g + 1] << 8));
    const float scale = from_bits((int32_t)bits << 16);
    for (int32_t k = g * group; k < (g + 1) * group; k++) {
      const uint8_t code = (packed[k / 2] >> (4 * (k % 2))) & 0x0F;
      y[k] = store((float)code * scale);
    }
  }
}

} // extern "C"
