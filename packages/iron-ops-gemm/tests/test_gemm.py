import re
import tracemalloc

import numpy as np
import pytest
from support import unfaithful_fraction

from iron.core import Device, OperatorError, Tolerance, bf16, compare, dtype_name
from iron.design.block_float import quantize
from iron.ops.gemm import gemm
from iron.ops.gemm.gemm import GEMM, INT8_MAX_K

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def specs(op):
    return [(s.name, s.shape, dtype_name(s.dtype), s.direction.value) for s in op.arg_specs()]


# ---- shapes, columns, identity ----------------------------------------------------------


def test_the_rows_iron_pinned():
    assert specs(GEMM(M=256, K=64, N=512)) == [
        ("A", (256, 64), "bf16", "in"),
        ("B", (64, 512), "bf16", "in"),
        ("C", (256, 512), "bf16", "out"),
    ]
    assert specs(GEMM(M=256, K=64, N=512, b_col_maj=True))[1] == ("B", (512, 64), "bf16", "in")
    assert specs(GEMM(M=256, K=64, N=512, c_col_maj=True))[2] == ("C", (512, 256), "bf16", "out")
    f32 = GEMM(M=512, K=256, N=512, dtype_out="float32")
    assert specs(f32)[2] == ("C", (512, 512), "float32", "out")


def test_default_columns_are_the_most_that_split_n_within_the_budget():
    assert GEMM(256, 64, 256).resolve(NPU2).num_aie_columns == 4  # IRON's own check
    assert GEMM(256, 64, 256).resolve(NPU1).num_aie_columns == 4
    assert GEMM(256, 64, 512).resolve(NPU2).num_aie_columns == 8
    assert GEMM(256, 64, 512).resolve(NPU1).num_aie_columns == 4
    assert GEMM(256, 64, 512).resolve(Device.from_name("npu2", columns=2)).num_aie_columns == 2
    # 192 = 3 x 64: three columns (A enters at column 0 and reaches every row)
    assert GEMM(256, 64, 192).resolve(NPU2).num_aie_columns == 3
    assert GEMM(256, 64, 320, tile_n=32).resolve(NPU2).num_aie_columns == 5


def test_dtypes_are_part_of_identity():
    shapes = {"M": 256, "K": 64, "N": 512, "num_aie_columns": 4}
    ops = [
        GEMM(**shapes),
        GEMM(**shapes, dtype_out="float32"),
        GEMM(**shapes, dtype_in="int8", dtype_out="int32"),
        GEMM(**shapes, dtype_in="int8", dtype_out="bf16"),
    ]
    assert len({op.identity() for op in ops}) == 4
    assert "dtype_in=int8, dtype_out=int32" in ops[2].identity_text()


# ---- references against float64 ----------------------------------------------------------


@pytest.mark.parametrize("b_col_maj", [False, True])
@pytest.mark.parametrize("c_col_maj", [False, True])
def test_bf16_reference_is_the_float64_product_rounded_once_in_every_layout(b_col_maj, c_col_maj):
    rng = np.random.default_rng(1)
    M, K, N = 256, 192, 128  # all different: a misread layout cannot fit
    a = rng.standard_normal((M, K)).astype(bf16)
    b = rng.standard_normal((K, N)).astype(bf16)  # the logical (K, N)
    stored = np.ascontiguousarray(b.T) if b_col_maj else b
    (c,) = GEMM(M, K, N, b_col_maj=b_col_maj, c_col_maj=c_col_maj).call_reference(a, stored)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    exact = exact.T if c_col_maj else exact
    assert c.shape == exact.shape and c.dtype == bf16 and c.flags.c_contiguous
    assert unfaithful_fraction(c, exact) <= 1e-3


@pytest.mark.parametrize("b_col_maj", [False, True])
@pytest.mark.parametrize("dtype_in", ["bf16", "int8"])
def test_reference_upcasts_a_block_of_columns_at_a_time(monkeypatch, b_col_maj, dtype_in):
    rng = np.random.default_rng(5)
    M, K, N = 256, 64, 320
    if dtype_in == "int8":
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, (K, N), dtype=np.int8)
        op = GEMM(M, K, N, b_col_maj=b_col_maj, dtype_in="int8", dtype_out="int32")
    else:
        a, b = rng.standard_normal((M, K)).astype(bf16), rng.standard_normal((K, N)).astype(bf16)
        op = GEMM(M, K, N, b_col_maj=b_col_maj)
    # 48 float64 columns per block: 7 blocks, the last one short (96 bf16 ones in float32)
    monkeypatch.setattr(gemm, "UPCAST_BYTES", 48 * 8 * K)
    (c,) = op.call_reference(a, np.ascontiguousarray(b.T) if b_col_maj else b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if dtype_in == "int8":
        np.testing.assert_array_equal(c, exact.astype(np.int64))
    else:
        assert unfaithful_fraction(c, exact) <= 1e-3


def test_reference_memory_is_bounded_by_the_block_not_the_weight():
    rng = np.random.default_rng(6)
    M, K, N = 256, 2048, 8192
    a = rng.standard_normal((M, K), dtype=np.float32).astype(bf16)
    b = rng.standard_normal((N, K), dtype=np.float32).astype(bf16)  # 32 MiB, as shipped
    tracemalloc.start()
    try:
        GEMM(M, K, N, b_col_maj=True).call_reference(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A in float32 (2 MiB), the float32 product and its bf16 copy (12 MiB), one
    # block of B; B upcast whole would add 64 MiB
    assert peak < M * K * 4 + M * N * 6 + 2 * gemm.UPCAST_BYTES


def test_float32_output_is_not_rounded_to_bf16():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((256, 64)).astype(bf16), rng.standard_normal((64, 128)).astype(bf16)
    (c,) = GEMM(256, 64, 128, dtype_out="float32").call_reference(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert c.dtype == np.float32
    np.testing.assert_allclose(c, exact, rtol=1e-5, atol=1e-5)  # float32 accumulation only
    assert np.mean(c != c.astype(bf16).astype(np.float32)) > 0.9  # bf16 would lose these bits


@pytest.mark.parametrize("b_col_maj", [False, True])
def test_int8_accumulates_exactly_in_int32(b_col_maj):
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (256, 192), dtype=np.int8)
    b = rng.integers(-128, 128, (192, 64), dtype=np.int8)
    stored = np.ascontiguousarray(b.T) if b_col_maj else b
    op = GEMM(256, 192, 64, b_col_maj=b_col_maj, dtype_in="int8", dtype_out="int32")
    (c,) = op.call_reference(a, stored)
    assert c.dtype == np.int32
    np.testing.assert_array_equal(c, np.einsum("mk,kn->mn", a.astype(np.int64), b.astype(np.int64)))
    assert op.tolerance(NPU2) == Tolerance.exact()


def test_int8_to_bf16_rounds_the_int32_sum_once():
    # a sum of 2^24 + 2^16 + 1: just above the midpoint between the bf16 values
    # 2^24 and 2^24 + 2^17, so it rounds up; through float32 it would first
    # become the midpoint 2^24 + 2^16 and then round (to even) down to 2^24
    K = 1088
    a = np.zeros((256, K), np.int8)
    b = np.zeros((K, 64), np.int8)
    a[0, :1028], b[:1028, 0] = -128, -128  # 1028 x 2^14 = 2^24 + 2^16
    a[0, 1028], b[1028, 0] = 1, 1
    (c,) = GEMM(256, K, 64, dtype_in="int8", dtype_out="bf16").call_reference(a, b)
    assert float(c[0, 0]) == 2**24 + 2**17
    assert float(np.float32(2**24 + 2**16 + 1).astype(bf16)) == 2**24  # what a plain cast gives
    assert np.all(c.astype(np.float32)[1:] == 0) and np.all(c.astype(np.float32)[0, 1:] == 0)


def test_bfp16_emulation_keeps_8_bit_mantissas_under_each_blocks_exponent():
    block = np.array([1.5, 0.01, -0.3, 3.0, 0.0, -2.999, 1 / 3, 100 / 64], np.float32)
    # the largest, 3.0, sets the step: 2^(1 - 6) = 1/32
    expected = np.array([48, 0, -10, 96, 0, -96, 11, 50], np.float32) / 32
    x = np.stack([block, 4 * block])  # a second row: its own exponent along axis 1
    np.testing.assert_array_equal(quantize(x, axis=1), np.stack([expected, 4 * expected]))
    np.testing.assert_array_equal(quantize(x.T, axis=0), np.stack([expected, 4 * expected]).T)
    assert quantize(np.full(8, 255.0), axis=0)[0] == 254  # clipped to 127 steps of 2


# ---- tolerance -------------------------------------------------------------------------------


def device_like(a, b):
    """A plausible npu2 result: inputs through bfp16, float32 accumulation
    in another order (per 64-deep slice), one rounding to bf16."""
    qa, qb = quantize(a, axis=1), quantize(b, axis=0)
    acc = sum(qa[:, k : k + 64] @ qb[k : k + 64] for k in range(0, a.shape[1], 64))
    return acc.astype(bf16)


def test_tolerance_floor_is_the_products_mass_and_defaults_to_unit_normal_data():
    op = GEMM(256, 128, 64)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((256, 128)), rng.standard_normal((128, 64))
    mass = 128 * np.mean(np.abs(a)) * np.mean(np.abs(b))
    assert op.tolerance(NPU2, inputs=(a, b)).atol == pytest.approx(1e-2 * mass)
    assert op.tolerance(NPU1, inputs=(a, b)).atol == pytest.approx(2e-4 * mass)
    assert op.tolerance(NPU2, inputs=(10 * a, b)).atol == pytest.approx(1e-1 * mass)
    assert op.tolerance(NPU2).atol == pytest.approx(1e-2 * 128 * 2 / np.pi)
    assert op.tolerance(NPU2).rtol == op.tolerance(NPU1).rtol == 0.04
    assert op.tolerance() == op.tolerance(NPU2)  # an unknown device gets the looser budget
    garbage = a.copy()
    garbage[0, :3] = [np.nan, np.inf, -np.inf]
    assert np.isfinite(op.tolerance(NPU2, inputs=(garbage, b)).atol)
    assert op.tolerance(NPU2, inputs=(garbage, b)).atol == pytest.approx(
        op.tolerance(NPU2, inputs=(a, b)).atol, rel=0.01
    )


def test_tolerance_passes_a_device_like_result_through_cancellation():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 64)).astype(bf16)
    w = rng.standard_normal((64, 128)).astype(bf16)
    delta = (0.01 * rng.standard_normal((64, 128))).astype(np.float32)
    a = np.concatenate([x, -x], axis=1)  # C = x @ w - x @ (w + delta): nearly all cancels
    b = np.concatenate([w, (w.astype(np.float32) + delta).astype(bf16)], axis=0)
    op = GEMM(256, 128, 128)
    (reference,) = op.call_reference(a, b)
    device = device_like(a, b)
    assert compare(device, reference, op.tolerance(NPU2, inputs=(a, b)))
    assert not compare(device, reference, Tolerance.relative(0.04))  # the floor is needed


def test_tolerance_rejects_garbage():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 128)).astype(bf16)
    b = rng.standard_normal((128, 128)).astype(bf16)
    op = GEMM(256, 128, 128)
    tolerance = op.tolerance(NPU2, inputs=(a, b))
    (reference,) = op.call_reference(a, b)
    assert compare(device_like(a, b), reference, tolerance)
    (b_misread,) = GEMM(256, 128, 128, b_col_maj=True).call_reference(a, b)
    for wrong in (np.zeros_like(reference), np.roll(reference, 1, axis=0), b_misread):
        verdict = compare(wrong, reference, tolerance)
        assert not verdict and verdict.n_mismatch > 0.9 * reference.size


# ---- refusals --------------------------------------------------------------------------------

REFUSALS = [
    ({"M": 0, "K": 64, "N": 64}, None, "GEMM: M=0: at least 1"),
    ({"M": 256, "K": 64, "N": 64, "dtype_in": "float32"}, None, "GEMM: dtype_in=.*float32.*: bf16 or int8"),
    ({"M": 256, "K": 64, "N": 64, "dtype_out": "int8"}, None,
     "GEMM: dtype_out=.*int8.*: at least as wide as dtype_in=bf16"),
    ({"M": 256, "K": 64, "N": 64, "dtype_out": "int32"}, None,
     "GEMM: dtype_out=.*int32.*: one of bf16, float32 for bf16 in"),
    ({"M": 256, "K": 64, "N": 64, "dtype_in": "int8", "dtype_out": "float32"}, None,
     "GEMM: dtype_out=.*float32.*: one of int32, bf16 for int8 in"),
    ({"M": 256, "K": 131072, "N": 64, "dtype_in": "int8", "dtype_out": "int32"}, None,
     f"GEMM: K=131072: at most {INT8_MAX_K} for int8: .* int32 accumulator"),
    ({"M": 256, "K": 64, "N": 64, "tile_m": 12}, None,
     re.escape("GEMM: tile_m=12: aie2/mm.cc matmul_bf16_f32 needs tile_m % 16 == 0 (aie2/mm.cc, "
               "matmul_vectorized_4x8x4_bf16_f32 (r = 4): static_assert(m % (4 * r) == 0);)")),
    ({"M": 256, "K": 64, "N": 64, "tile_k": 12}, None,
     r"GEMM: tile_k=12: aie2/mm.cc matmul_bf16_f32 needs tile_k % 8 == 0 .*static_assert\(k % s"),
    ({"M": 256, "K": 64, "N": 64, "tile_n": 12}, None,
     r"GEMM: tile_n=12: aie2/mm.cc matmul_bf16_f32 needs tile_n % 16 == 0 .*\(n % \(4 \* t\)"),
    ({"M": 256, "K": 64, "N": 96, "tile_n": 24}, NPU2,
     r"GEMM: tile_n=24: aie2p/mm.cc matmul_bf16_f32 needs tile_n % 16 == 0 .*\(t = 8\)"),
    ({"M": 256, "K": 64, "N": 96, "tile_n": 24, "dtype_in": "int8", "dtype_out": "int32"}, None,
     r"GEMM: tile_n=24: aie2/mm.cc matmul_i8_i32 needs tile_n % 16 == 0 .*4x8x8_i8_i32 \(t = 8\)"),
    ({"M": 96, "K": 64, "N": 64, "tile_m": 8}, NPU2,
     r"GEMM: tile_m=8: aie2p/mm.cc matmul_bf16_f32 needs tile_m % 16 == 0 .*\(r = 8\)"),
    ({"M": 320, "K": 64, "N": 64}, None, "GEMM: M=320: a multiple of tile_m x 4 = 256"),
    ({"M": 256, "K": 100, "N": 64}, None, "GEMM: K=100: a multiple of tile_k=64"),
    ({"M": 256, "K": 64, "N": 96}, None, "GEMM: N=96: a multiple of tile_n=64"),
    ({"M": 256, "K": 64, "N": 256, "num_aie_columns": 8}, None,
     "GEMM: N=256: a multiple of tile_n x num_aie_columns = 512"),
    ({"M": 256, "K": 64, "N": 512, "num_aie_columns": 8}, NPU1,
     "GEMM: num_aie_columns=8: at most the 4 columns of npu1"),
    ({"M": 256, "K": 64, "N": 512, "dtype_out": "float32"}, NPU2,
     re.escape("GEMM: tile_m x tile_k x tile_n = 64x64x64: one core's buffers take 68864 bytes "
               "(A 16384 + B 16384 + C 32768 + stack 3328); a core of npu2 holds 65536")),
]  # fmt: skip


@pytest.mark.parametrize("params, device, message", REFUSALS, ids=lambda v: None)
def test_refusals_name_the_operator_parameter_and_rule(params, device, message):
    with pytest.raises(OperatorError, match=message):
        GEMM(**params, device=device)


def test_8_row_tiles_are_refused_on_both_generations_naming_mm_cc_and_its_assert():
    """aie2's mm.cc static-asserts 16-row multiples too: its bf16 kernel
    expands the 4x8x4 mmul 4 x 4 times, its int8 kernel the 4x8x8 one 4 x 2
    (an 8-row tile did not compile for npu1)."""
    for dtypes, symbol in (({}, "matmul_bf16_f32"),
                           ({"dtype_in": "int8", "dtype_out": "int32"}, "matmul_i8_i32")):  # fmt: skip
        for device, arch in ((NPU1, "aie2"), (NPU2, "aie2p")):
            with pytest.raises(
                OperatorError, match=f"tile_m=8: {arch}/mm.cc {symbol} needs tile_m % 16"
            ):
                GEMM(96, 64, 64, tile_m=8, **dtypes, device=device)
