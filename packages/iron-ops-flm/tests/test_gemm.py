"""FLMGemm the operator: its rules and refusals, tunables, the shared
configuration, and its reference and tolerance against float64."""

import math

import attrs
import numpy as np
import pytest

from iron.core import Device, OperatorError, compare
from iron.ops.flm import packing
from iron.ops.flm.gemm import Epilogue, FLMGemm, l1_fit
from iron.ops.flm.packing import BFormat, Rounding

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")

REFUSALS = [
    (
        dict(M=100, K=512, N=512),
        None,
        "FLMGemm: max_M=100: a positive multiple of 64 (one core's rows)",
    ),
    (
        dict(M=320, K=512, N=512),
        NPU2,
        "FLMGemm: max_M=320: a multiple of 256 on npu2 (64 rows x 4 compute rows)",
    ),
    (
        dict(M=320, K=512, N=512, max_M=1024),
        NPU2,
        "FLMGemm: M=320: a positive multiple of 256 on npu2 (64 rows x 4 compute rows)",
    ),
    (dict(M=0, K=512, N=512, max_M=256), None, "FLMGemm: M=0: a positive multiple of 64"),
    (dict(M=512, K=512, N=512, max_M=256), None, "FLMGemm: M=512: at most max_M=256 (A's rows)"),
    (dict(K=512, N=512), None, "FLMGemm: max_M: give the capacity max_M, or M"),
    (dict(M=256, K=1000, N=512), None, "FLMGemm: K=1000: a positive multiple of 512 (one k-block)"),
    (dict(M=256, K=512, N=0), None, "FLMGemm: N=0: positive"),
    (dict(M=256, K=512, N=1000, tile_n=64), None, "FLMGemm: N=1000: a multiple of tile_n=64"),
    (
        dict(M=256, K=512, N=512, tile_n=96),
        None,
        "FLMGemm: tile_n=96: one of 16, 32, 64, 128 (verified (tile_n, ct_k) pairs "
        "16:16, 32:32, 64:128, 128:32)",
    ),
    (
        dict(M=256, K=512, N=512, tile_n=64, ct_k=64),
        None,
        "FLMGemm: ct_k=64: (64, 64) is not a verified (tile_n, ct_k) pair (16:16, 32:32, 64:128, "
        "128:32); others miscompute silently on hardware",
    ),
    (
        dict(M=256, K=512, N=512, tile_ma=48),
        None,
        "FLMGemm: tile_ma=48: divides 64 and is a multiple of 16",
    ),
    (
        dict(M=256, K=1024, N=512, b_format="bf16", tile_ma=64),
        NPU1,
        "FLMGemm: tile_ma=64: does not fit npu1's 65536-byte core memory at tile_n=64, ct_k=128, "
        "even with single-buffered B",
    ),
    (
        dict(M=256, K=1024, N=512),
        NPU1,
        "FLMGemm: b_format='bfp16': bfp16 needs block-float hardware, which npu1 lacks; use 'bf16'",
    ),
    (
        dict(M=256, K=512, N=512, epilogue="silu", epilogue_modes=("none", "gelu")),
        None,
        "FLMGemm: epilogue='silu': one of the epilogue_modes compiled in (none, gelu)",
    ),
    (
        dict(M=256, K=512, N=512, epilogue="relu"),
        None,
        "FLMGemm: epilogue='relu': one of none, gelu, silu, sigmoid",
    ),
    (
        dict(M=256, K=512, N=512, rounding="nearest"),
        None,
        "FLMGemm: rounding='nearest': one of conv_even, floor",
    ),
    (
        dict(M=256, K=512, N=512, clamp=(2, -2)),
        None,
        "FLMGemm: clamp=(2.0, -2.0): (lo, hi) with lo <= hi, neither NaN",
    ),
    (dict(M=256, K=512, N=512, clamp=(0, float("nan"))), None, "FLMGemm: clamp=(0.0, nan)"),
    (dict(M=256, K=512, N=512, clamp=3), None, "FLMGemm: clamp=3: None or a pair (lo, hi)"),
]


@pytest.mark.parametrize("params, device, message", REFUSALS, ids=lambda v: str(v)[:40])
def test_refusals_name_the_parameter_and_the_rule(params, device, message):
    with pytest.raises(OperatorError) as refusal:
        op = FLMGemm(**params)
        if device is not None:
            op.resolve(device)
    assert str(refusal.value).startswith(message)


def test_device_facts_need_a_device():
    op = FLMGemm(M=256, K=1024, N=512)
    for ask in (op.configuration, op.pool, op.program):
        with pytest.raises(OperatorError, match="FLMGemm: device: needs a device"):
            ask()
    with pytest.raises(OperatorError, match="B's layout depends on tile_n and ct_k"):
        op.pack_b(np.zeros((1024, 512)))
    with pytest.raises(OperatorError, match=r"B: shape \(512, 512\), expected \(1024, 512\)"):
        op.resolve(NPU2).pack_b(np.zeros((512, 512)))
    with pytest.raises(OperatorError, match="tile_n=None: unset; construct without device="):
        FLMGemm(M=256, K=1024, N=512, device=NPU2)
    with pytest.raises(OperatorError, match="the error budget is per architecture"):
        op.tolerance()


def tunables(op):
    return op.tile_n, op.ct_k, op.tile_ma


def test_tunables_follow_the_device_and_k():
    assert tunables(FLMGemm(M=256, K=512, N=1024).resolve(NPU2)) == (128, 32, 64)
    assert tunables(FLMGemm(M=256, K=512, N=576).resolve(NPU2)) == (64, 128, 32)  # N refuses 128
    assert tunables(FLMGemm(M=256, K=1024, N=1024).resolve(NPU2)) == (64, 128, 32)
    assert tunables(FLMGemm(M=256, K=512, N=1024, b_format="bf16").resolve(NPU1)) == (64, 128, 32)
    only_none = FLMGemm(M=256, K=512, N=1024, b_format="bf16", epilogue_modes=["none"])
    assert only_none.resolve(NPU1).tile_ma == 16  # no activation LUT to reserve
    assert tunables(FLMGemm(M=256, K=1024, N=1024, tile_n=32).resolve(NPU2)) == (32, 32, 64)


def test_l1_fit_defaults():
    # (tile_ma, L1 B depth): IRON's expected defaults
    assert l1_fit(NPU2, 64, 128, BFormat.BFP16, True) == (32, 2)
    assert l1_fit(NPU2, 128, 32, BFormat.BFP16, True) == (64, 2)
    assert l1_fit(NPU1, 64, 128, BFormat.BF16, True) == (32, 1)
    assert l1_fit(NPU1, 128, 32, BFormat.BF16, True) == (32, 2)
    assert l1_fit(NPU1, 64, 128, BFormat.BF16, False) == (16, 2)
    assert l1_fit(NPU2, 64, 128, BFormat.BFP16, True, tile_ma=64) == (64, 1)
    assert l1_fit(NPU1, 64, 128, BFormat.BF16, True, tile_ma=64) is None


def test_one_configuration_serves_every_shape():
    shapes = [(512, 1024, 1024), (2048, 2048, 8192), (256, 8192, 2048)]
    variants = [dict(), dict(epilogue="silu"), dict(epilogue="gelu", clamp=(-4, 4))]
    ops = [
        FLMGemm(**dict(zip("MKN", shape)), **v).resolve(NPU2) for shape in shapes for v in variants
    ]
    assert {op.configuration() for op in ops} == {
        "FLM_GEMM_tn64_ck128_ma32_mc1_emf_conv_even_bfp16_npu2"
    }
    assert len({op.identity() for op in ops}) == len(ops)
    assert FLMGemm(M=512, K=1024, N=1024).configuration(NPU2) == ops[0].configuration()
    others = {
        FLMGemm(M=512, K=1024, N=1024, rounding="floor").configuration(NPU2),
        FLMGemm(M=512, K=1024, N=1024, tile_n=32).configuration(NPU2),
        FLMGemm(M=512, K=1024, N=1024, epilogue_modes=("none", "silu")).configuration(NPU2),
        FLMGemm(M=512, K=1024, N=1024, b_format="bf16").configuration(NPU1),
        FLMGemm(M=512, K=1024, N=1024).configuration(Device.from_name("npu2", columns=4)),
    }
    assert others == {
        "FLM_GEMM_tn64_ck128_ma32_mc1_emf_floor_bfp16_npu2",
        "FLM_GEMM_tn32_ck32_ma64_mc1_emf_conv_even_bfp16_npu2",
        "FLM_GEMM_tn64_ck128_ma32_mc1_em5_conv_even_bfp16_npu2",
        "FLM_GEMM_tn64_ck128_ma32_mc1_emf_conv_even_bf16_npu1",
        "FLM_GEMM_tn64_ck128_ma32_mc1_emf_conv_even_bfp16_npu2x4",
    }


def test_arg_specs():
    specs = FLMGemm(M=256, K=1024, N=512).resolve(NPU2).arg_specs()
    assert [s.describe() for s in specs] == [
        ["A", [256, 1024], "bf16", "in"],
        ["B", [1024 * 512 // 8, 9], "uint8", "in"],
        ["C", [256, 512], "bf16", "out"],
    ]
    bf16_specs = FLMGemm(M=256, K=1024, N=512, b_format="bf16").arg_specs()
    assert bf16_specs[1].describe() == ["B", [1024 * 512], "bf16", "in"]


def float64_epilogue(x, epilogue):
    def sigmoid(z):
        return 1 / (1 + np.exp(-z))

    if epilogue is Epilogue.GELU:
        return x * sigmoid(1.702 * x)
    if epilogue is Epilogue.SILU:
        return x * sigmoid(x)
    return sigmoid(x) if epilogue is Epilogue.SIGMOID else x


@pytest.mark.parametrize("epilogue", list(Epilogue))
@pytest.mark.parametrize("rounding", list(Rounding))
def test_reference_against_float64(epilogue, rounding):
    clamp = (-0.125, 5.0) if epilogue is Epilogue.SILU else None
    op = FLMGemm(M=256, K=1536, N=320, epilogue=epilogue, rounding=rounding, clamp=clamp).resolve(
        NPU2
    )
    a, b = op.example_inputs(np.random.default_rng(1))
    dense = op.unpack_b(b).astype(np.float64)
    exact = float64_epilogue(a.astype(np.float64) @ dense, epilogue)
    if clamp:
        exact = np.clip(exact, *clamp)
    got = op.reference(a, b).astype(np.float64)
    slack = 1e-6 * op.K * np.abs(a.astype(np.float64)).mean() * np.abs(dense).mean()
    if rounding is Rounding.CONV_EVEN:  # within half a bf16 ulp (2**-8 relative)
        assert (np.abs(got - exact) <= 2**-8 * np.abs(exact) + slack).all()
    else:  # toward -inf, by less than one ulp
        assert (got <= exact + slack).all()
        assert (exact - got <= 2**-7 * np.abs(exact) + slack).all()
    if clamp:
        assert got.min() == clamp[0] and got.max() == clamp[1]


def test_tolerance_tracks_the_accumulated_mass():
    op = FLMGemm(M=256, K=1024, N=512).resolve(NPU2)
    a, b = op.example_inputs(np.random.default_rng(2))
    dense = op.unpack_b(b)
    mass = 1024 * np.abs(a.astype(np.float64)).mean() * np.abs(dense.astype(np.float64)).mean()
    tolerance = op.tolerance(NPU2, inputs=(a, b))
    assert tolerance.rtol == 0.04 and math.isclose(tolerance.atol, 0.004 * mass, rel_tol=1e-6)
    assert math.isclose(op.tolerance(NPU2, inputs=(a, dense)).atol, tolerance.atol)
    # the default is the example inputs' expected mass: K * 4 sqrt(2/pi) * 2
    default = op.tolerance(NPU2).atol
    assert math.isclose(default, 0.004 * 1024 * 4 * math.sqrt(2 / math.pi) * 2)
    assert math.isclose(default, tolerance.atol, rel_tol=0.02)
    assert math.isclose(
        FLMGemm(M=256, K=1024, N=512, rounding="floor").tolerance(NPU2).atol, default * 0.05 / 0.004
    )
    assert math.isclose(
        FLMGemm(M=256, K=1024, N=512, b_format="bf16").tolerance(NPU1).atol,
        default * 0.0002 / 0.004,
    )
    silu = FLMGemm(M=256, K=1024, N=512, epilogue="silu").resolve(NPU2)
    assert math.isclose(silu.tolerance().atol, 0.004 * 1024 * 0.5 * math.sqrt(2 / math.pi) * 0.25)


def test_tolerance_rejects_a_misread_b():
    op = FLMGemm(M=256, K=1024, N=512).resolve(NPU2)
    a, b = op.example_inputs(np.random.default_rng(3))
    expected = op.reference(a, b)
    misread = attrs.evolve(op, tile_n=32, ct_k=32).reference(a, b)  # the same bytes, another order
    assert not compare(misread, expected, op.tolerance(NPU2, inputs=(a, b)))
    assert compare(expected, expected, op.tolerance(NPU2, inputs=(a, b)))


def test_pack_b_uses_the_resolved_layout_and_rounding():
    rng = np.random.default_rng(4)
    B = (rng.standard_normal((1024, 256)) * 4).astype(np.float32)
    packed = {}
    for rounding in Rounding:
        op = FLMGemm(M=256, K=1024, N=256, rounding=rounding).resolve(NPU2)
        packed[rounding] = op.pack_b(B)
        assert np.array_equal(packed[rounding], packing.pack_b(B, 64, 128, "bfp16", rounding))
    assert not np.array_equal(packed[Rounding.FLOOR], packed[Rounding.CONV_EVEN])
    bf16 = FLMGemm(M=256, K=1024, N=256, b_format="bf16", tile_n=128).resolve(NPU1)
    assert np.array_equal(bf16.pack_b(B), packing.pack_b(B, 128, 32, "bf16"))
