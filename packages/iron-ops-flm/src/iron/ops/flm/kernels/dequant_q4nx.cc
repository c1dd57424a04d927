// DequantBFP's kernel, aie2p (npu2): one q4nx block (5120 bytes: 512 of bf16
// scales and 512 of bf16 mins, each [8 k-groups][32 n], then 4096 of 4-bit
// codes: two halves of 16 n, each 256 k of 8 bytes, the even n in the low
// nibble) to its 1024 bfp16ebs8 blocks in FLMGemm's packed order (k-slice of
// 128, n/8, k/8, n%8). A value is min + scale * code in float32 (one
// rounding: scale * code is exact), rounded to bf16 and then to bfp16 toward
// -inf, the rounding FastFlowLM's dequant uses: the kernel sets floor rather
// than inherit the core's mode. The numpy model is
// iron.ops.flm.dequant.encode_block.
#include <aie_api/aie.hpp>
#include <stdint.h>
#include <utility>

namespace {

constexpr int32_t N = 32, K = 256, GROUP_K = 32, SLICE_K = 128;
constexpr int32_t SCALES = 0, MINS = 512, CODES = 1024, HALF = 2048; // byte offsets

// the 32 codes of one row's 16 bytes (n 0..15 then 16..31, the even n in
// the low nibble) as bf16 values 128 + code (bits 0x4300 | code: exact)
::aie::vector<bfloat16, N> codes_of(::aie::vector<uint8_t, 16> bytes) {
  const auto wide = ::aie::unpack(bytes);
  const auto [even, odd] =
      ::aie::interleave_zip(::aie::bit_and(wide, (uint16_t)0x0F), ::aie::downshift(wide, 4), 1);
  const auto codes = ::aie::concat(even, odd);
  return ::aie::bit_or(codes, ::aie::broadcast<uint16_t, N>(0x4300)).cast_to<bfloat16>();
}

// rows k and k + 1 (k even): 16 bytes of each half, zipped 8 bytes at a time
std::pair<::aie::vector<uint8_t, 16>, ::aie::vector<uint8_t, 16>> rows_of(const uint8_t *block,
                                                                         int32_t k) {
  const auto low = ::aie::load_v<16>(block + CODES + k * 8);         // n 0..15, k and k + 1
  const auto high = ::aie::load_v<16>(block + CODES + HALF + k * 8); // n 16..31
  return ::aie::interleave_zip(low, high, 8);
}

} // namespace

extern "C" {

void iron_flm_dequant_q4nx(const uint8_t *block, bfp16ebs8 *out) {
  const ::aie::rounding_mode saved = ::aie::swap_rounding(::aie::rounding_mode::floor);
  const auto *scales = (const bfloat16 *)(block + SCALES);
  const auto *mins = (const bfloat16 *)(block + MINS);
  const auto one_two_eight = ::aie::broadcast<bfloat16, N>(128.0f);
  ::aie::block_vector_output_buffer_stream<bfp16ebs8, 64> stream(out);
  for (int32_t slice = 0; slice < K / SLICE_K; slice++)
    for (int32_t k8 = 0; k8 < SLICE_K / 8; k8++) {
      // 8 k x 32 n values, one vector per k
      ::aie::vector<bfloat16, N> values[8];
      for (int32_t j = 0; j < 8; j += 2) {
        const int32_t k = slice * SLICE_K + k8 * 8 + j, g = k / GROUP_K; // k, k + 1: one group
        const auto scale = ::aie::load_v<N>(scales + g * N);
        const auto low = ::aie::load_v<N>(mins + g * N);
        const auto [row, next] = rows_of(block, k);
        for (const auto &[bytes, at] : {std::pair{row, j}, std::pair{next, j + 1}}) {
          ::aie::accum<accfloat, N> v = ::aie::mul(codes_of(bytes), scale);
          v = ::aie::msc(v, one_two_eight, scale); // code * scale, exact
          v = ::aie::add(v, low);
          values[at] = v.to_vector<bfloat16>();
        }
      }
      // each n/8 group: an 8 k x 8 n tile, transposed to 8 n x 8 k, is 8
      // blocks of 8 k of one n: the next 72 bytes of this k-slice's n/8 run
      for (int32_t n8 = 0; n8 < N / 8; n8++) {
        ::aie::vector<bfloat16, 64> tile;
        for (int32_t j = 0; j < 8; j++)
          tile.insert(j, values[j].extract<8>(n8));
        ::aie::accum<accfloat, 64> blocks(::aie::transpose(tile, 8, 8));
        stream.seek(((slice * (N / 8) + n8) * (SLICE_K / 8) + k8));
        stream << blocks.to_vector<bfp16ebs8>();
      }
    }
  ::aie::set_rounding(saved);
}

} // extern "C"
