// What the kernels of iron.ops.gemm share: the rounding mode they run in,
// the order 16 float32 lanes are added in, and 8 x 8 tiles of a row-major
// matrix (the block an 8x8x8 aie::mmul takes).
#pragma once

#include <aie_api/aie.hpp>
#include <stdint.h>

namespace iron {

// Every float -> bf16 (and bf16 -> bfp16) conversion while one lives rounds
// to nearest even; the caller's mode is given back on return. A core boots
// in floor (toward -inf).
class ConvEven {
public:
  ConvEven() : saved_(::aie::swap_rounding(::aie::rounding_mode::conv_even)) {}
  ~ConvEven() { ::aie::set_rounding(saved_); }

private:
  ::aie::rounding_mode saved_;
};

// The sum of a float32 vector's 16 lanes in a fixed order: lanes k and k + 8
// added, then k and k + 4 of those, and so on (the numpy models add in this
// order too).
inline float sum_lanes(::aie::vector<float, 16> v) {
  float lane[16];
  for (int k = 0; k < 16; k++)
    lane[k] = v[k];
  for (int width = 8; width >= 1; width /= 2)
    for (int k = 0; k < width; k++)
      lane[k] += lane[k + width];
  return lane[0];
}

// The 8 x 8 tile at `p` of a row-major matrix `stride` elements wide, as one
// vector, rows in order.
template <typename T>
inline ::aie::vector<T, 64> load_8x8(const T *p, int32_t stride) {
  ::aie::vector<T, 64> tile;
  for (int32_t r = 0; r < 8; r++)
    tile.insert(r, ::aie::load_v<8>(p + r * stride));
  return tile;
}

template <typename T>
inline void store_8x8(T *p, int32_t stride, ::aie::vector<T, 64> tile) {
  for (int32_t r = 0; r < 8; r++)
    ::aie::store_v(p + r * stride, tile.template extract<8>(r));
}

} // namespace iron
