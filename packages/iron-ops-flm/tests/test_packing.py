"""bf16 rounding, the bfp16ebs8 format and B's packed layout, against
hand-worked blocks and independent float64 / index arithmetic."""

import ml_dtypes
import numpy as np
import pytest

from iron.ops.flm.packing import (
    BFormat,
    Rounding,
    from_bfp16ebs8,
    pack_b,
    packed_b_size,
    read_chunk,
    to_bfp16ebs8,
    unpack_b,
)

CONV_EVEN, FLOOR = Rounding.CONV_EVEN, Rounding.FLOOR


def u8(values):
    return [v & 0xFF for v in values]


# Each block: values, then the bytes [E, m0..m7] worked by hand for
# (CONV_EVEN, FLOOR); a mantissa m is worth m * 2**(E - 133).
HAND_WORKED = {
    # E = 127 (1.984375 = 1 + 63/64): one unit is 1/64, every value exact
    "one exponent": (
        [1.0, -1.0, 0.75, 1.984375, 0.5, -0.25, 0.0, 1.5],
        u8([127, 64, -64, 48, 127, 32, -16, 0, 96]),
        u8([127, 64, -64, 48, 127, 32, -16, 0, 96]),
    ),
    # E = 129 (5.0 and 7.96875 lie in [4, 8)): one unit is 1/16.
    # 7.96875 = 127.5 units: half to even gives 128, saturated to 127.
    # -3.03125 = -48.5: even -48, floor -49.  0.09375 = 1.5: 2 / 1.
    # -0.03125 = -0.5: even 0, floor -1.  1.046875 = 16.75: 17 / 16.
    # 0.1015625 = 1.625: 2 / 1.
    "mixed exponents, negatives, ties": (
        [5.0, 7.96875, -3.03125, 0.09375, -0.03125, 1.046875, -2.0, 0.1015625],
        u8([129, 80, 127, -48, 2, 0, 17, -32, 2]),
        u8([129, 80, 127, -49, 1, -1, 16, -32, 1]),
    ),
    # E = 127; 2**-40 is 40 binades below (a shift of 57), 2**-30 is 30
    # below: gone, except that floor takes a negative one to -1
    "shift of 32 or more": (
        [1.0, -(2.0**-40), 2.0**-40, -(2.0**-30), 2.0**-30, -0.0, 0.5, -1.0],
        u8([127, 64, 0, 0, 0, 0, 0, 32, -64]),
        u8([127, 64, -1, 0, -1, 0, 0, 32, -64]),
    ),
    # -127.5 units rounds to -128 either way (in range); +127.5 saturates
    "saturation": (
        [-1.9921875, 1.9921875, 0, 0, 0, 0, 0, 0],
        u8([127, -128, 127, 0, 0, 0, 0, 0, 0]),
        u8([127, -128, 127, 0, 0, 0, 0, 0, 0]),
    ),
    "zeros": ([0.0] * 8, [0] * 9, [0] * 9),
}


@pytest.mark.parametrize("name", HAND_WORKED)
@pytest.mark.parametrize("rounding", [CONV_EVEN, FLOOR])
def test_bfp16_encodes_hand_worked_blocks(name, rounding):
    values, conv_even, floor = HAND_WORKED[name]
    expected = conv_even if rounding is CONV_EVEN else floor
    block = to_bfp16ebs8(np.array(values, np.float32), rounding)
    assert block.shape == (1, 9)
    assert block[0].tolist() == expected


def test_bfp16_decodes_hand_worked_blocks():
    block = np.array([[129, 80, 127, 0xD0, 2, 0, 17, 0xE0, 2]], np.uint8)
    expected = np.array([80, 127, -48, 2, 0, 17, -32, 2]) / 16.0
    assert from_bfp16ebs8(block).tolist() == expected.tolist()


def canonical_blocks(rng, n):
    """Blocks whose values re-encode to the same bytes: the largest
    magnitude is at least 64 units (else a smaller E would be chosen) and
    no mantissa is -128 (-2**(E-126) belongs to binade E + 1)."""
    blocks = np.empty((n, 9), np.uint8)
    blocks[:, 0] = rng.integers(8, 255, n)
    mantissas = rng.integers(-127, 128, (n, 8))
    top = rng.integers(0, 8, n)
    mantissas[np.arange(n), top] = rng.choice([-1, 1], n) * rng.integers(64, 128, n)
    blocks[:, 1:] = mantissas.astype(np.int8).view(np.uint8)
    return blocks


@pytest.mark.parametrize("rounding", [CONV_EVEN, FLOOR])
def test_bfp16_round_trip_is_bit_exact_on_representable_values(rounding):
    blocks = canonical_blocks(np.random.default_rng(7), 20000)
    values = from_bfp16ebs8(blocks)
    assert np.array_equal(to_bfp16ebs8(values, rounding).reshape(-1, 9), blocks)


def test_minus_128_moves_to_the_next_binade():
    block = np.array([[130, 0x80, 0, 0, 0, 0, 0, 0, 0]], np.uint8)  # -128 * 2**-3 = -16
    assert from_bfp16ebs8(block)[0] == -16.0
    assert to_bfp16ebs8(from_bfp16ebs8(block))[0].tolist() == u8([131, -64, 0, 0, 0, 0, 0, 0, 0])


def spread_values(rng, shape):
    """Normal values whose scales span 2**-20..2**20, so blocks mix exponents."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 21, shape))).astype(np.float32)


@pytest.mark.parametrize("rounding", [CONV_EVEN, FLOOR])
def test_bfp16_equals_rounding_each_value_onto_the_blocks_unit(rounding):
    """The shift-and-round definition against its meaning: m = round(v /
    2**(E-133)) clipped to int8, computed in float64 from the block's
    largest exponent (np.frexp, not bit fields)."""
    values = spread_values(np.random.default_rng(3), (4096, 8))
    _, exponents = np.frexp(values.astype(np.float64))  # v = f * 2**e, f in [0.5, 1)
    unit = np.exp2(exponents.max(axis=1, keepdims=True) - 1 - 6.0)  # biased E - 133
    scaled = values / unit
    mantissa = np.rint(scaled) if rounding is CONV_EVEN else np.floor(scaled)
    expected = np.clip(mantissa, -128, 127).astype(np.int8)
    blocks = to_bfp16ebs8(values, rounding).reshape(-1, 9)
    assert np.array_equal(blocks[:, 1:].view(np.int8), expected)


def test_bfp16_error_bounds():
    """Documented bounds: CONV_EVEN within half a unit (a full unit where it
    saturates), FLOOR never above the value and less than a unit below."""
    values = spread_values(np.random.default_rng(5), (8192, 8))
    unit = np.exp2(to_bfp16ebs8(values)[..., 0].astype(np.float64) - 133)
    error = {}
    for rounding in (CONV_EVEN, FLOOR):
        decoded = from_bfp16ebs8(to_bfp16ebs8(values, rounding)).reshape(values.shape)
        error[rounding] = (values.astype(np.float64) - decoded) / unit
    assert np.abs(error[CONV_EVEN]).max() <= 1.0
    saturated = values / unit >= 127.5
    assert np.abs(error[CONV_EVEN][~saturated]).max() <= 0.5
    assert error[FLOOR].min() >= 0 and error[FLOOR].max() < 1


def test_bfp16_refuses_inf_nan_and_ragged_blocks():
    with pytest.raises(ValueError, match="Inf and NaN"):
        to_bfp16ebs8(np.array([1, 2, 3, np.inf, 0, 0, 0, 0], np.float32))
    with pytest.raises(ValueError, match="multiple of 8"):
        to_bfp16ebs8(np.ones(12, np.float32))
    with pytest.raises(ValueError, match="9 bytes"):
        from_bfp16ebs8(np.zeros((2, 8), np.uint8))


def packed_position(k, n, K, tile_n, ct_k):
    """Where pack_b puts B[k, n]: the element index (bf16) or the block
    index and the position inside it (bfp16), from the layout's definition."""
    cb, kb, ks = n // tile_n, k // 512, k % 512 // ct_k
    tb, i, s, t = n % tile_n // 8, k % ct_k // 8, k % 8, n % 8
    sub_tile = (((cb * (K // 512) + kb) * (512 // ct_k) + ks) * (tile_n // 8) + tb) * (
        ct_k // 8
    ) + i
    return sub_tile * 64 + s * 8 + t, sub_tile * 8 + t, s


@pytest.mark.parametrize("tile_n, ct_k", [(16, 16), (32, 32), (64, 128), (128, 32)])
def test_pack_b_layout_against_index_arithmetic(tile_n, ct_k):
    K, N = 1024, 2 * tile_n
    k, n = np.meshgrid(np.arange(K), np.arange(N), indexing="ij")
    B = (k % 8 + 8 * (n % 16)).astype(np.float32)  # small integers: exact in both formats
    element, block, inside = packed_position(k, n, K, tile_n, ct_k)

    flat = pack_b(B, tile_n, ct_k, BFormat.BF16)
    assert flat.shape == (K * N,) and flat.nbytes == packed_b_size(K, N, BFormat.BF16)
    assert np.array_equal(flat[element].astype(np.float32), B)

    blocks = pack_b(B, tile_n, ct_k, BFormat.BFP16)
    assert blocks.shape == (K * N // 8, 9) and blocks.nbytes == packed_b_size(K, N)
    decoded = from_bfp16ebs8(blocks).reshape(-1, 8)
    assert np.array_equal(decoded[block, inside], B)


@pytest.mark.parametrize("b_format", list(BFormat))
def test_unpack_b_inverts_pack_b_and_read_chunk_reads_one_k_slice(b_format):
    rng = np.random.default_rng(11)
    K, N, tile_n, ct_k = 1536, 256, 64, 128
    B = (rng.random((K, N)) * 4).astype(ml_dtypes.bfloat16)
    packed = pack_b(B, tile_n, ct_k, b_format)
    values = unpack_b(packed, K, N, tile_n, ct_k, b_format)
    if b_format is BFormat.BF16:
        assert np.array_equal(values, B.astype(np.float32))
    else:  # 8 consecutive k of one n share an exponent
        groups = B.astype(np.float32).T.reshape(N, K // 8, 8)
        expected = from_bfp16ebs8(to_bfp16ebs8(groups)).reshape(N, K).T
        assert np.array_equal(values, expected)
    chunk_elems = len(packed) // (K // ct_k * N // tile_n)
    # column block 0, k-block 1, k-slice 2: k 512 + 256 .. 512 + 384
    chunk = packed[(4 + 2) * chunk_elems : (4 + 3) * chunk_elems]
    assert np.array_equal(read_chunk(chunk, tile_n, ct_k, b_format), values[768:896, :tile_n])


def test_pack_b_refuses_shapes_that_do_not_tile():
    with pytest.raises(ValueError, match="does not tile"):
        pack_b(np.zeros((500, 64)), 64, 128)
    with pytest.raises(ValueError, match="does not tile"):
        pack_b(np.zeros((512, 96)), 64, 128)
