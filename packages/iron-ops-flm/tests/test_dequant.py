"""DequantBFP: q4nx decoding against a blob written byte by byte from the
layer table, its output against FLMGemm's own packing of the weights, and
its design, simulated, against its reference."""

import attrs
import ml_dtypes
import numpy as np
import pytest

from iron.core import Device, OperatorError
from iron.core.numerics import round_to_bf16
from iron.design import CoverageError, Drain, check, design_of, simulate
from iron.ops.flm.dequant import DequantBFP, dequantize, q4nx_size, random_q4nx
from iron.ops.flm.gemm import FLMGemm

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def write_q4nx(codes, scales, mins):
    """A q4nx blob, one byte at a time, following the layer table: codes
    (K, N) in 0..15, scales and mins (K/32, N) bf16."""
    K, N = codes.shape
    blob = bytearray()
    for n0 in range(0, N, 32):  # blocks row-major: (N/32) x (K/256)
        for k0 in range(0, K, 256):
            for table in (scales, mins):  # [8 k-groups][32 n], bf16 little endian
                blob += table[k0 // 32 : k0 // 32 + 8, n0 : n0 + 32].tobytes()
            for half in range(2):  # n step 16
                for k in range(k0, k0 + 256):  # a slice per k
                    for byte in range(8):  # n step 2, low nibble first
                        n = n0 + 16 * half + 2 * byte
                        blob.append(int(codes[k, n]) | int(codes[k, n + 1]) << 4)
    return np.frombuffer(bytes(blob), np.uint8)


def test_dequantize_reads_the_layer_table():
    rng = np.random.default_rng(0)
    K, N = 512, 64
    codes = rng.integers(0, 16, (K, N))
    scales = rng.uniform(0.002, 0.05, (K // 32, N)).astype(ml_dtypes.bfloat16)
    mins = rng.uniform(-0.4, 0.4, (K // 32, N)).astype(ml_dtypes.bfloat16)
    blob = write_q4nx(codes, scales, mins)
    assert blob.size == q4nx_size(K, N) == 5 * N * K // 8
    group = np.arange(K) // 32
    exact = mins.astype(np.float64)[group] + scales.astype(np.float64)[group] * codes
    got = dequantize(blob, K, N)
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (K, N)
    # float32 min + scale * code, then bf16 toward -inf: at most one bf16 ulp
    # below the exact value, never above (beyond float32's own rounding)
    got = got.astype(np.float64)
    assert (got <= exact + 1e-7 * np.abs(exact)).all()
    assert (exact - got <= 2**-7 * np.abs(exact) + 1e-7).all()
    assert np.array_equal(got, round_to_bf16(exact.astype(np.float32), floor=True).astype(float))


@pytest.mark.parametrize("K, N", [(1024, 128), (1536, 640), (2048, 256), (4096, 64)])
def test_output_is_byte_for_byte_flmgemms_packing(K, N):
    op = DequantBFP(K, N).resolve(NPU2)
    (blob,) = op.example_inputs(np.random.default_rng(K + N))
    (out,) = op.call_reference(blob)
    gemm = FLMGemm(M=256, K=K, N=N, rounding="floor").resolve(NPU2)  # the GEMM these weights feed
    assert gemm.tile_n == 64
    assert out.shape == gemm.arg_specs()[1].shape
    assert np.array_equal(out, gemm.pack_b(dequantize(blob, K, N)))


def test_random_q4nx_is_a_valid_blob():
    blob = random_q4nx(np.random.default_rng(1), 1024, 64)
    weights = dequantize(blob, 1024, 64).astype(np.float32)
    assert blob.size == q4nx_size(1024, 64)
    # bf16 scales in [0.002, 0.05] and mins in [-0.4, 0.4], each within a bf16 ulp
    assert weights.min() >= -0.41 and weights.max() <= 0.41 + 15 * 0.0502
    assert len(np.unique(weights)) > 1000


REFUSALS = [
    (
        dict(K=512, N=128),
        None,
        "DequantBFP: K=512: not 512: FLMGemm reads a single k-block at "
        "tile_n=128, in another order than this operator writes",
    ),
    (dict(K=1000, N=128), None, "DequantBFP: K=1000: a positive multiple of 512"),
    (dict(K=1024, N=96), None, "DequantBFP: N=96: a positive multiple of 64"),
    (
        dict(K=1024, N=128),
        NPU1,
        "DequantBFP: device=npu1: bfp16ebs8 needs block-float hardware (npu2)",
    ),
]


@pytest.mark.parametrize("params, device, message", REFUSALS, ids=lambda v: str(v)[:30])
def test_refusals(params, device, message):
    with pytest.raises(OperatorError) as refusal:
        op = DequantBFP(**params)
        if device is not None:
            op.resolve(device)
    assert str(refusal.value) == message


def test_a_blob_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match=r"a q4nx \(1024, 128\) matrix is 81920 bytes, got 100"):
        DequantBFP(1024, 128).reference(np.zeros(100, np.uint8))


# ---- the design ----------------------------------------------------------------------


@pytest.mark.parametrize("case", DequantBFP.cases, ids=lambda case: case.label)
def test_design_fits_npu2_and_npu1_refuses_by_rule(case):
    assert check(design_of(DequantBFP(**case.params).resolve(NPU2))).ok
    with pytest.raises(OperatorError, match="bfp16ebs8 needs block-float hardware"):
        DequantBFP(**case.params).resolve(Device.from_name("npu1"))


@pytest.mark.parametrize("K, N", [(1024, 128), (1536, 640), (2048, 256)])
def test_simulated_design_writes_the_reference_byte_for_byte(K, N):
    op = DequantBFP(K, N).resolve(NPU2)
    (q,) = op.example_inputs(np.random.default_rng(3))
    run = simulate(design_of(op), {"q": q})
    out = run["B"].view(np.uint8).reshape(-1, 9)
    assert np.array_equal(out, op.reference(q))
    # q read once (5NK/8 bytes), B written once (K*N/8 blocks of 9 bytes)
    assert run.traffic.tensors["q"].read == 5 * N * K // 8
    assert run.traffic.tensors["B"].written == K * N // 8 * 9


def test_a_wrong_drain_offset_is_caught():
    op = DequantBFP(1024, 128).resolve(NPU2)
    design = design_of(op)
    first = next(i for i, s in enumerate(design.sequence) if isinstance(s, Drain))
    drain = design.sequence[first]
    moved = attrs.evolve(drain, tap=attrs.evolve(drain.tap, offset=drain.tap.offset + 128))
    broken = attrs.evolve(
        design, sequence=(*design.sequence[:first], moved, *design.sequence[first + 1 :])
    )
    with pytest.raises(CoverageError, match="out tensor B"):
        simulate(broken, {"q": op.example_inputs(np.random.default_rng(0))[0]})
