// Line kernels of iron.ops.eltwise's streaming designs, for aie2 and aie2p
// (Peano). Each takes its line length n at run time (any even count): whole
// vectors of 16 lanes, then the last n % 16 elements one by one with the
// same arithmetic. Every result is computed in float32 and rounded to bf16
// once, to nearest even; the numpy models in iron/ops/eltwise/line_kernels.py
// state the same arithmetic.
#include "iron_aie.h"

namespace {

constexpr int32_t LANES = 16;
using bf16x16 = ::aie::vector<bfloat16, LANES>;

} // namespace

extern "C" {

void iron_add_bf16(const bfloat16 *a, const bfloat16 *b, bfloat16 *y,
                   int32_t n) {
  iron::ConvEven rounding;
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    ::aie::accum<accfloat, LANES> sum(::aie::load_v<LANES>(a + i));
    sum = ::aie::add(sum, ::aie::load_v<LANES>(b + i));
    ::aie::store_v(y + i, sum.to_vector<bfloat16>());
  }
  for (; i < n; i++)
    y[i] = (bfloat16)((float)a[i] + (float)b[i]);
}

void iron_mul_bf16(const bfloat16 *a, const bfloat16 *b, bfloat16 *y,
                   int32_t n) {
  iron::ConvEven rounding;
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    auto product = ::aie::mul(::aie::load_v<LANES>(a + i), ::aie::load_v<LANES>(b + i));
    ::aie::store_v(y + i, product.to_vector<bfloat16>());
  }
  for (; i < n; i++)
    y[i] = (bfloat16)((float)a[i] * (float)b[i]);
}

// max(x, 0): no rounding
void iron_relu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n) {
  const bf16x16 zeros = ::aie::zeros<bfloat16, LANES>();
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES)
    ::aie::store_v(y + i, ::aie::max(::aie::load_v<LANES>(x + i), zeros));
  for (; i < n; i++)
    y[i] = !((float)x[i] <= 0.0f) ? x[i] : (bfloat16)0.0f;
}

// out = factor * x + y: factor * x rounded once to float32 (the factor's
// three bf16 parts), then + y, then one rounding to bf16
void iron_axpy_bf16(const bfloat16 *x, const bfloat16 *y, bfloat16 *out,
                    int32_t n, int32_t factor_bits) {
  iron::ConvEven rounding;
  const float factor = iron::from_bits(factor_bits);
  const iron::Bf16Parts parts = iron::split(factor);
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    auto acc = iron::times(::aie::load_v<LANES>(x + i), parts);
    acc = ::aie::add(acc, ::aie::load_v<LANES>(y + i));
    ::aie::store_v(out + i, acc.to_vector<bfloat16>());
  }
  for (; i < n; i++) {
    const float scaled = factor * (float)x[i]; // its own statement: never fused
    out[i] = (bfloat16)(scaled + (float)y[i]);
  }
}

// y = x where x >= 0, else alpha * x (rounded once)
void iron_leaky_relu_bf16(const bfloat16 *x, bfloat16 *y, int32_t n,
                          int32_t alpha_bits) {
  iron::ConvEven rounding;
  const float alpha = iron::from_bits(alpha_bits);
  const iron::Bf16Parts parts = iron::split(alpha);
  const bf16x16 zeros = ::aie::zeros<bfloat16, LANES>();
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    const bf16x16 v = ::aie::load_v<LANES>(x + i);
    const bf16x16 scaled = iron::times(v, parts).to_vector<bfloat16>();
    ::aie::store_v(y + i, ::aie::select(scaled, v, ::aie::ge(v, zeros)));
  }
  for (; i < n; i++) {
    const float v = (float)x[i];
    y[i] = v >= 0.0f ? x[i] : (bfloat16)(alpha * v);
  }
}

// y = min(max(x, lo), hi). The bounds are rounded to bf16 first: for a bf16
// x that gives the bf16 of the float32 clip (no bf16 lies between a bound
// and its rounding)
void iron_clamp_bf16(const bfloat16 *x, bfloat16 *y, int32_t n, int32_t lo_bits,
                     int32_t hi_bits) {
  iron::ConvEven rounding;
  const bfloat16 lo = (bfloat16)iron::from_bits(lo_bits);
  const bfloat16 hi = (bfloat16)iron::from_bits(hi_bits);
  const bf16x16 los = ::aie::broadcast<bfloat16, LANES>(lo);
  const bf16x16 his = ::aie::broadcast<bfloat16, LANES>(hi);
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES)
    ::aie::store_v(y + i, ::aie::min(::aie::max(::aie::load_v<LANES>(x + i), los), his));
  for (; i < n; i++) {
    const float v = (float)x[i];
    y[i] = v < (float)lo ? lo : (v > (float)hi ? hi : x[i]);
  }
}

// One tile: n / 2 bytes of unsigned 4-bit codes (element 2k in the low
// nibble), then n / group little-endian bf16 scales; y = code * scale,
// rounded once. A code c becomes the bf16 128 + c (bits 0x4300 | c, exact),
// so (128 + c) * scale - 128 * scale is c * scale, exact in the float32
// accumulator. Groups of 32 or more (a multiple of 32) go 32 codes at a time;
// smaller groups one element at a time.
void iron_dequant_u4_bf16(const uint8_t *packed, bfloat16 *y, int32_t n,
                          int32_t group) {
  iron::ConvEven rounding;
  const uint8_t *scales = packed + n / 2;
  const ::aie::vector<uint16_t, 32> bias = ::aie::broadcast<uint16_t, 32>(0x4300);
  const bf16x16 one_two_eight = ::aie::broadcast<bfloat16, LANES>(128.0f);
  for (int32_t g = 0; g < n / group; g++) {
    const uint16_t bits = (uint16_t)(scales[2 * g] | (scales[2 * g + 1] << 8));
    bfloat16 scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    int32_t k = g * group;
    if (group % 32 == 0) {
      const bf16x16 scale_v = ::aie::broadcast<bfloat16, LANES>(scale);
      for (; k < (g + 1) * group; k += 32) {
        const ::aie::vector<uint8_t, 16> bytes = ::aie::load_v<16>(packed + k / 2);
        const auto wide = ::aie::unpack(bytes); // 16 x uint16
        const auto low = ::aie::bit_and(wide, (uint16_t)0x0F);
        const auto high = ::aie::downshift(wide, 4);
        const auto [even, odd] = ::aie::interleave_zip(low, high, 1);
        const ::aie::vector<uint16_t, 32> codes = ::aie::concat(even, odd);
        const auto values = ::aie::bit_or(codes, bias).cast_to<bfloat16>();
        for (int half = 0; half < 2; half++) {
          const bf16x16 v = values.extract<LANES>(half);
          auto acc = ::aie::mul(v, scale_v);
          acc = ::aie::msc(acc, one_two_eight, scale_v);
          ::aie::store_v(y + k + half * LANES, acc.to_vector<bfloat16>());
        }
      }
    } else {
      for (; k < (g + 1) * group; k++) {
        const uint8_t code = (packed[k / 2] >> (4 * (k % 2))) & 0x0F;
        y[k] = (bfloat16)((float)code * (float)scale);
      }
    }
  }
}

} // extern "C"
