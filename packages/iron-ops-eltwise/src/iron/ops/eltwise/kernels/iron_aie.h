// What the kernels of iron.ops.eltwise share: the rounding mode they run in,
// float scalars passed as int32 bits, and a float32 split into bf16 parts
// (a core multiplies bf16 by bf16 into a float32 accumulator; a float32
// factor is the sum of three bf16 parts, each product exact).
#pragma once

#include <aie_api/aie.hpp>
#include <stdint.h>

namespace iron {

// Every float -> bf16 conversion while one lives rounds to nearest even; the
// caller's mode is given back on return. A core boots in floor (toward -inf),
// which a numpy model would have to follow; these kernels never depend on it.
class ConvEven {
public:
  ConvEven() : saved_(::aie::swap_rounding(::aie::rounding_mode::conv_even)) {}
  ~ConvEven() { ::aie::set_rounding(saved_); }

private:
  ::aie::rounding_mode saved_;
};

// A float32 scalar passed as its int32 bits (a design passes kernel scalars
// as integer constants).
inline float from_bits(int32_t bits) {
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}

// v = hi + mid + lo exactly, each part a bf16: hi keeps the top 8
// significant bits (rounded), mid the next 8 of what is left, lo the rest.
// x * hi + x * mid is exact in float32 (at most 24 significant bits), so a
// multiply-accumulate of the three rounds x * v once, as float32 would.
struct Bf16Parts {
  bfloat16 hi, mid, lo;
};

inline Bf16Parts split(float v) {
  const bfloat16 hi = (bfloat16)v;
  const float rest = v - (float)hi;
  const bfloat16 mid = (bfloat16)rest;
  return {hi, mid, (bfloat16)(rest - (float)mid)};
}

// x * v over one vector, as an accumulator: one rounding to float32.
template <unsigned N>
inline ::aie::accum<accfloat, N> times(::aie::vector<bfloat16, N> x,
                                       Bf16Parts v) {
  ::aie::accum<accfloat, N> acc = ::aie::mul(x, v.hi);
  acc = ::aie::mac(acc, x, v.mid);
  return ::aie::mac(acc, x, v.lo);
}

// The sum of a float32 vector's 16 lanes in a fixed order: lanes k and k + 8
// added, then k and k + 4 of those, and so on (the numpy models add in
// this order too).
inline float sum_lanes(::aie::vector<float, 16> v) {
  float lane[16];
  for (int k = 0; k < 16; k++)
    lane[k] = v[k];
  for (int width = 8; width >= 1; width /= 2)
    for (int k = 0; k < width; k++)
      lane[k] += lane[k + width];
  return lane[0];
}

} // namespace iron
