// RoPE rows for aie2 and aie2p (Peano): y = x rotated by the angle row
// [cos0, sin0, cos1, sin1, ...], `cols` a multiple of 32. Each output is
// x1 cos -/+ x2 sin: both products exact in the float32 accumulator, the
// sum rounded once to float32, then once to bf16 (to nearest even).
// mlir-aie's aie2p/rope.cc (`rope`, interleaved) rounds each product to bf16
// before the sum, so where the two terms cancel its relative error is
// unbounded; aie2 has no rope at the pin. The numpy model is rope_model in
// rows.py.
#include "iron_aie.h"

#include <utility>

namespace {

constexpr int32_t LANES = 16;
using acc16 = ::aie::accum<accfloat, LANES>;
using bf16x16 = ::aie::vector<bfloat16, LANES>;

// a * c - b * s and b * c + a * s
inline std::pair<bf16x16, bf16x16> rotate(bf16x16 a, bf16x16 b, bf16x16 c, bf16x16 s) {
  acc16 first = ::aie::mul(a, c);
  first = ::aie::msc(first, b, s);
  acc16 second = ::aie::mul(b, c);
  second = ::aie::mac(second, a, s);
  return {first.to_vector<bfloat16>(), second.to_vector<bfloat16>()};
}

} // namespace

extern "C" {

// pairs (x[2i], x[2i + 1])
void iron_rope_interleaved_bf16(const bfloat16 *x, const bfloat16 *angles, bfloat16 *y,
                                int32_t cols) {
  iron::ConvEven rounding;
  for (int32_t i = 0; i < cols; i += 2 * LANES) {
    const auto v = ::aie::load_v<2 * LANES>(x + i);
    const auto a = ::aie::load_v<2 * LANES>(angles + i);
    const auto [even, odd] = rotate(::aie::filter_even(v, 1), ::aie::filter_odd(v, 1),
                                    ::aie::filter_even(a, 1), ::aie::filter_odd(a, 1));
    const auto [low, high] = ::aie::interleave_zip(even, odd, 1);
    ::aie::store_v(y + i, ::aie::concat(low, high));
  }
}

// pairs (x[i], x[i + cols / 2])
void iron_rope_two_halves_bf16(const bfloat16 *x, const bfloat16 *angles, bfloat16 *y,
                               int32_t cols) {
  iron::ConvEven rounding;
  const int32_t half = cols / 2;
  for (int32_t i = 0; i < half; i += LANES) {
    const auto a = ::aie::load_v<2 * LANES>(angles + 2 * i);
    const auto [first, second] =
        rotate(::aie::load_v<LANES>(x + i), ::aie::load_v<LANES>(x + half + i),
               ::aie::filter_even(a, 1), ::aie::filter_odd(a, 1));
    ::aie::store_v(y + i, first);
    ::aie::store_v(y + half + i, second);
  }
}

} // extern "C"
