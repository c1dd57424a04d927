// Narrowing casts to bf16 and a float32 zero fill for iron.ops.gemm's
// designs, aie2 and aie2p (Peano): mlir-aie's tree at iron-design's pin has
// no f32 -> bf16 cast for either generation, nor an int32 one. Each output
// is rounded once, to nearest even; the numpy models are cast_model and
// cast_columns_model in iron/ops/gemm/core_kernels.py.
#include "iron_gemm.h"

namespace {

constexpr int32_t LANES = 16;
using bf16x16 = ::aie::vector<bfloat16, LANES>;

bf16x16 narrow(::aie::vector<float, LANES> v) {
  ::aie::accum<accfloat, LANES> acc;
  acc.from_vector(v);
  return acc.to_vector<bfloat16>();
}

// int32 lanes as float32 values that round to bf16 as the int32 itself would
// (int32 -> float32 -> bf16 would round twice). Below 2^24 an int32 is exact
// in float32. Above, bf16's 8 significant bits put the rounding position at
// bit 16 or higher, where of the bits below only whether any is set matters:
// bits 0..7 are replaced by one sticky bit at bit 7, which leaves at most 24
// significant bits (7 to 30), exact in float32. |v| < 2^31: the GEMM keeps
// K products of at most 2^14 below it.
::aie::vector<float, LANES> bf16_exact(::aie::vector<int32_t, LANES> v) {
  const auto zero = ::aie::zeros<int32_t, LANES>();
  const auto magnitude = ::aie::abs(v);
  const auto kept = ::aie::bit_and(magnitude, (int32_t)0x7fffff00);
  const auto sticky = ::aie::ne(::aie::bit_and(magnitude, (int32_t)0xff), zero);
  const auto folded = ::aie::select(kept, ::aie::bit_or(kept, (int32_t)0x80), sticky);
  const auto big = ::aie::ge(magnitude, ::aie::broadcast<int32_t, LANES>(1 << 24));
  const auto value = ::aie::to_float<float>(::aie::select(magnitude, folded, big), 0);
  return ::aie::select(value, ::aie::neg(value), ::aie::lt(v, zero));
}

bf16x16 to_bf16(const float *src) { return narrow(::aie::load_v<LANES>(src)); }
bf16x16 to_bf16(const int32_t *src) { return narrow(bf16_exact(::aie::load_v<LANES>(src))); }

// n a multiple of 16
template <typename T> void cast_line(const T *src, bfloat16 *dst, int32_t n) {
  iron::ConvEven rounding;
  for (int32_t i = 0; i < n; i += LANES)
    ::aie::store_v(dst + i, to_bf16(src + i));
}

} // namespace

extern "C" {

void iron_cast_f32_bf16(const float *src, bfloat16 *dst, int32_t n) { cast_line(src, dst, n); }

void iron_cast_i32_bf16(const int32_t *src, bfloat16 *dst, int32_t n) { cast_line(src, dst, n); }

void iron_zero_f32(float *buffer, int32_t n) {
  const auto zeros = ::aie::zeros<float, LANES>();
  for (int32_t i = 0; i < n; i += LANES)
    ::aie::store_v(buffer + i, zeros);
}

} // extern "C"

#if defined(DIM_M) && defined(DIM_N) && defined(BLOCK_R) && defined(BLOCK_T)
// A DIM_M x DIM_N tile held as BLOCK_R x BLOCK_T blocks (blocks and elements
// row-major, as mm.cc's matmul writes C) cast to bf16 with every block
// transposed and the blocks ordered along M first: the tile's columns, in
// the layout mm.cc's C_COL_MAJ would write, which the memtile reads out.
namespace {

constexpr int32_t R = BLOCK_R, T = BLOCK_T, SIZE = R * T;
static_assert(SIZE % LANES == 0 && DIM_M % R == 0 && DIM_N % T == 0, "whole blocks");

template <typename S> void cast_columns(const S *src, bfloat16 *dst) {
  iron::ConvEven rounding;
  for (int32_t z = 0; z < DIM_M / R; z++)
    for (int32_t j = 0; j < DIM_N / T; j++) {
      ::aie::vector<bfloat16, SIZE> block;
      for (int32_t q = 0; q < SIZE / LANES; q++)
        block.insert(q, to_bf16(src + (z * (DIM_N / T) + j) * SIZE + q * LANES));
      ::aie::store_v(dst + (j * (DIM_M / R) + z) * SIZE, ::aie::transpose(block, R, T));
    }
}

} // namespace

extern "C" {

void iron_cast_f32_bf16_cols(const float *src, bfloat16 *dst) { cast_columns(src, dst); }

void iron_cast_i32_bf16_cols(const int32_t *src, bfloat16 *dst) { cast_columns(src, dst); }

} // extern "C"
#endif
