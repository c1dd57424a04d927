// FLMGemm's core kernels, shared by the generations (aie2/mm_fused.cc,
// aie2p/mm_fused.cc, which define the matrix multiply and tanh):
//
// - the accumulator: MM_FUSED_TILE_M x MM_FUSED_TILE_N float32, row-major,
//   which the multiply adds one A tile x B chunk product into per call;
// - the drain, iron_flm_drain_bf16: one MM_FUSED_OUT_CHUNK-value chunk of
//   the accumulator (whole rows) through the epilogue selected at run time
//   (among those MM_FUSED_EPILOGUE_MODE_MASK compiles in), clamped, rounded
//   once to bf16, its rows then zeroed for the next unit;
// - the zero chunk, iron_flm_zero_bf16: MM_FUSED_OUT_CHUNK bf16 zeros, a
//   chunk of C's rows past the call's M (up to the operator's capacity).
//
// Every conversion to bf16 (and, on aie2p, to bfp16) rounds in the core's
// mode: to nearest even with ROUND_CONV_EVEN, else toward -inf (floor, the
// mode FastFlowLM's overlay runs in); the kernels set it, never inherit it.
// The numpy models are mm_model, drain_model and zero_model in
// iron/ops/flm/design.py.
#pragma once

#include <aie_api/aie.hpp>
#include <stdint.h>

#if !defined(MM_FUSED_TILE_M) || !defined(MM_FUSED_TILE_N) || !defined(MM_FUSED_TILE_MA) ||     \
    !defined(MM_FUSED_CT_K) || !defined(MM_FUSED_OUT_CHUNK) || !defined(MM_FUSED_EPILOGUE_MODE_MASK)
#error "build with the MM_FUSED_* defines of iron.ops.flm.design"
#endif

namespace flm {

constexpr int32_t LANES = 16;
constexpr int32_t ROWS = MM_FUSED_TILE_M, COLS = MM_FUSED_TILE_N;
using floats = ::aie::vector<float, LANES>;

// The rounding mode of every conversion while one lives; the caller's mode
// is given back on return.
class Rounding {
public:
#ifdef ROUND_CONV_EVEN
  Rounding() : saved_(::aie::swap_rounding(::aie::rounding_mode::conv_even)) {}
#else
  Rounding() : saved_(::aie::swap_rounding(::aie::rounding_mode::floor)) {}
#endif
  ~Rounding() { ::aie::set_rounding(saved_); }

private:
  ::aie::rounding_mode saved_;
};

// The epilogue modes, in the order of iron.ops.flm.gemm.Epilogue (the wire
// format of the `epilogue` parameter).
enum Epilogue : int32_t { NONE = 0, GELU = 1, SILU = 2, SIGMOID = 3 };

// x c as float32 lanes (one rounding)
inline floats times(floats x, float c) { return ::aie::mul(x, c).to_vector<float>(); }

// The R x C tile at `p` of a row-major matrix `stride` elements wide, as one
// vector, rows in order (and back).
template <int32_t R, int32_t C, typename T>
inline ::aie::vector<T, R * C> load_tile(const T *p, int32_t stride) {
  ::aie::vector<T, R * C> tile;
  for (int32_t r = 0; r < R; r++)
    tile.insert(r, ::aie::load_v<C>(p + r * stride));
  return tile;
}

template <int32_t R, int32_t C, typename T>
inline void store_tile(T *p, int32_t stride, ::aie::vector<T, R * C> tile) {
  for (int32_t r = 0; r < R; r++)
    ::aie::store_v(p + r * stride, tile.template extract<C>(r));
}

// sigmoid(x c) = 0.5 + 0.5 tanh(x c / 2): x c / 2 one float32 rounding, the
// tanh of the generation (a bf16 out), the sum exact in float32
template <typename Tanh> floats sigmoid(floats x, float c, Tanh tanh_of) {
  const auto t = tanh_of(times(x, c * 0.5f));
  ::aie::accum<accfloat, LANES> s = ::aie::mul(t, (bfloat16)0.5f);
  return ::aie::add(s, ::aie::broadcast<float, LANES>(0.5f)).to_vector<float>();
}

constexpr bool compiled(Epilogue e) { return (MM_FUSED_EPILOGUE_MODE_MASK >> e) & 1; }

// The drain of one chunk: `chunk` indexes MM_FUSED_OUT_CHUNK-value chunks of
// the accumulator, whole rows each. GELU is x sigmoid(1.702 x), SiLU
// x sigmoid(x) (each product one float32 rounding); then the clamp, then
// one rounding to bf16.
template <typename Tanh>
void drain(float *acc, bfloat16 *c, int32_t chunk, int32_t mode, int32_t lo_bits, int32_t hi_bits,
           Tanh tanh_of) {
  static_assert(MM_FUSED_OUT_CHUNK % COLS == 0 && MM_FUSED_OUT_CHUNK % LANES == 0, "whole rows");
  Rounding rounding;
  float lo, hi;
  __builtin_memcpy(&lo, &lo_bits, sizeof lo);
  __builtin_memcpy(&hi, &hi_bits, sizeof hi);
  float *rows = acc + chunk * MM_FUSED_OUT_CHUNK;
  for (int32_t i = 0; i < MM_FUSED_OUT_CHUNK; i += LANES) {
    floats x = ::aie::load_v<LANES>(rows + i);
    if constexpr (compiled(GELU))
      if (mode == GELU)
        x = ::aie::mul(x, sigmoid(x, 1.702f, tanh_of)).to_vector<float>();
    if constexpr (compiled(SILU))
      if (mode == SILU)
        x = ::aie::mul(x, sigmoid(x, 1.0f, tanh_of)).to_vector<float>();
    if constexpr (compiled(SIGMOID))
      if (mode == SIGMOID)
        x = sigmoid(x, 1.0f, tanh_of);
    x = ::aie::min(::aie::max(x, lo), hi);
    ::aie::accum<accfloat, LANES> out;
    out.from_vector(x);
    ::aie::store_v(c + i, out.to_vector<bfloat16>());
    ::aie::store_v(rows + i, ::aie::zeros<float, LANES>());
  }
}

// One chunk of C's rows past the call's M: zeros, whatever the epilogue.
inline void zero(bfloat16 *c) {
  static_assert(MM_FUSED_OUT_CHUNK % LANES == 0, "whole vectors");
  for (int32_t i = 0; i < MM_FUSED_OUT_CHUNK; i += LANES)
    ::aie::store_v(c + i, ::aie::zeros<bfloat16, LANES>());
}

} // namespace flm
