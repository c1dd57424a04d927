// The sized activation kernels of iron.ops.eltwise (tanh, sigmoid, SiLU,
// GELU), written once over the one thing the generations do differently:
// tanh. Each includer (aie2/activation.cc, aie2p/activation.cc) defines
//
//   ::aie::vector<bfloat16, 16> tanh_of(::aie::accum<accfloat, 16> z);
//
// and the four extern "C" kernels over it. A line is n elements, n a
// multiple of 16: whole vectors. Every bf16 a kernel stores is rounded to nearest
// even; the numpy models in iron/ops/eltwise/line_kernels.py state the same
// steps.
#pragma once

#include "iron_aie.h"

namespace iron::activation {

constexpr int32_t LANES = 16;
using bf16x16 = ::aie::vector<bfloat16, LANES>;
using acc16 = ::aie::accum<accfloat, LANES>;

// tanh(sqrt(2/pi) (x + 0.044715 x^3)) is tanh(x q) with q = a + b x^2: a =
// sqrt(2/pi) as a float32, b = sqrt(2/pi) 0.044715 as a bf16 (0.03564453125)
constexpr float GELU_A = 0.7978845608f;
constexpr float GELU_B = 0.03564453125f;

template <typename Tanh> void tanh_line(const bfloat16 *x, bfloat16 *y, int32_t n, Tanh tanh_of) {
  ConvEven rounding;
  for (int32_t i = 0; i < n; i += LANES)
    ::aie::store_v(y + i, tanh_of(acc16(::aie::load_v<LANES>(x + i))));
}

// t = tanh(x / 2) (x / 2 exact), then 0.5 + 0.5 t rounded once
template <typename Tanh>
void sigmoid_line(const bfloat16 *x, bfloat16 *y, int32_t n, Tanh tanh_of) {
  ConvEven rounding;
  const bf16x16 half = ::aie::broadcast<bfloat16, LANES>(0.5f);
  for (int32_t i = 0; i < n; i += LANES) {
    const bf16x16 t = tanh_of(::aie::mul(::aie::load_v<LANES>(x + i), half));
    acc16 s = ::aie::mul(t, half);
    s = ::aie::add(s, ::aie::broadcast<float, LANES>(0.5f));
    ::aie::store_v(y + i, s.to_vector<bfloat16>());
  }
}

// x sigmoid(x) = h + h t with h = x / 2 (a bf16, exact) and t = tanh(h):
// h t is exact in float32, the sum rounds once to float32, then to bf16
template <typename Tanh> void silu_line(const bfloat16 *x, bfloat16 *y, int32_t n, Tanh tanh_of) {
  ConvEven rounding;
  const bf16x16 half = ::aie::broadcast<bfloat16, LANES>(0.5f);
  for (int32_t i = 0; i < n; i += LANES) {
    const bf16x16 h = ::aie::mul(::aie::load_v<LANES>(x + i), half).to_vector<bfloat16>();
    acc16 out = ::aie::mul(h, tanh_of(acc16(h)));
    out = ::aie::add(out, h);
    ::aie::store_v(y + i, out.to_vector<bfloat16>());
  }
}

// x^2 rounded to bf16; q = a + b x^2 rounded to bf16; z = x q (tanh_of rounds
// it to bf16 on aie2, takes the float32 on aie2p); then h + h tanh(z) as in
// silu_line, h = x / 2
template <typename Tanh> void gelu_line(const bfloat16 *x, bfloat16 *y, int32_t n, Tanh tanh_of) {
  ConvEven rounding;
  const bf16x16 half = ::aie::broadcast<bfloat16, LANES>(0.5f);
  const bf16x16 b = ::aie::broadcast<bfloat16, LANES>(GELU_B);
  const ::aie::vector<float, LANES> a = ::aie::broadcast<float, LANES>(GELU_A);
  for (int32_t i = 0; i < n; i += LANES) {
    const bf16x16 v = ::aie::load_v<LANES>(x + i);
    const bf16x16 square = ::aie::mul(v, v).to_vector<bfloat16>();
    const bf16x16 q = ::aie::add(::aie::mul(square, b), a).to_vector<bfloat16>();
    const bf16x16 t = tanh_of(::aie::mul(v, q));
    const bf16x16 h = ::aie::mul(v, half).to_vector<bfloat16>();
    acc16 out = ::aie::mul(h, t);
    out = ::aie::add(out, h);
    ::aie::store_v(y + i, out.to_vector<bfloat16>());
  }
}

} // namespace iron::activation
