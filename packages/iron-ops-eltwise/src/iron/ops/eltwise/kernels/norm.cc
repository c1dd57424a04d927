// RMSNorm and LayerNorm rows: on aie2 (npu1), which mlir-aie's kernel tree
// at iron-design's pin lacks (it has aie2p/rms_norm.cc and
// aie2p/layer_norm.cc only, and aie2 sources never fall back to aie2p), and
// on both generations for an eps other than the 1e-5 those two compile in.
// eps is IRON_NORM_EPS (a float literal; 1e-5f unless the build defines
// it: one object per eps), no affine; 16 float32 lanes accumulate the sums, added in
// iron::sum_lanes' order; the inverse root is aie::invsqrt; each output is
// rounded once to bf16 (x times the inverse through its three bf16 parts).
// The numpy models are rms_norm_model and layer_norm_model in rows.py.
#include "iron_aie.h"

#ifndef IRON_NORM_EPS
#define IRON_NORM_EPS 1e-5f
#endif

namespace {

constexpr int32_t LANES = 16;
constexpr float EPS = IRON_NORM_EPS;
using acc16 = ::aie::accum<accfloat, LANES>;

} // namespace

extern "C" {

// y = x / sqrt(mean(x^2) + eps) over one row of `cols` (any count: the last
// cols % 16 one by one, their squares added after the lanes' sum)
void iron_rms_norm_bf16(const bfloat16 *x, bfloat16 *y, int32_t cols) {
  iron::ConvEven rounding;
  const int32_t whole = cols / LANES * LANES;
  acc16 squares = ::aie::zeros<accfloat, LANES>();
  for (int32_t i = 0; i < whole; i += LANES) {
    const auto v = ::aie::load_v<LANES>(x + i);
    squares = ::aie::mac(squares, v, v);
  }
  float sum = iron::sum_lanes(squares.to_vector<float>());
  for (int32_t i = whole; i < cols; i++)
    sum += (float)x[i] * (float)x[i];
  const float inverse = ::aie::invsqrt(sum / (float)cols + EPS);
  const iron::Bf16Parts parts = iron::split(inverse);
  for (int32_t i = 0; i < whole; i += LANES)
    ::aie::store_v(y + i, iron::times(::aie::load_v<LANES>(x + i), parts).to_vector<bfloat16>());
  for (int32_t i = whole; i < cols; i++)
    y[i] = (bfloat16)((float)x[i] * inverse);
}

// y = (x - mean) / sqrt(var + eps), var = mean(x^2) - mean^2 (at least 0),
// over one row of `cols`, a multiple of 16; each output is x * inverse less
// mean * inverse in the float32 accumulator, then one rounding
void iron_layer_norm_bf16(const bfloat16 *x, bfloat16 *y, int32_t cols) {
  iron::ConvEven rounding;
  acc16 sums = ::aie::zeros<accfloat, LANES>();
  acc16 squares = ::aie::zeros<accfloat, LANES>();
  for (int32_t i = 0; i < cols; i += LANES) {
    const auto v = ::aie::load_v<LANES>(x + i);
    sums = ::aie::add(sums, v);
    squares = ::aie::mac(squares, v, v);
  }
  const float mean = iron::sum_lanes(sums.to_vector<float>()) / (float)cols;
  const float mean_square = mean * mean; // its own statement: never fused
  float variance = iron::sum_lanes(squares.to_vector<float>()) / (float)cols - mean_square;
  variance = variance > 0.0f ? variance : 0.0f;
  const float inverse = ::aie::invsqrt(variance + EPS);
  const iron::Bf16Parts parts = iron::split(inverse);
  const auto shift = ::aie::broadcast<float, LANES>(mean * inverse);
  for (int32_t i = 0; i < cols; i += LANES) {
    auto acc = iron::times(::aie::load_v<LANES>(x + i), parts);
    ::aie::store_v(y + i, ::aie::sub(acc, shift).to_vector<bfloat16>());
  }
}

} // extern "C"
