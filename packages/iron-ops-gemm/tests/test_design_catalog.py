"""Every declared case's design fits its device (or the operator refuses the
case with its rule), and so does every gemm-family operator at Llama 3.2
1B's shapes on npu2."""

from __future__ import annotations

import pytest
from support import random_inputs, simulated

from iron.core import Device, OperatorError, compare
from iron.design import check, design_of, has_design, to_mlir
from iron.design.operators import catalog_designs
from iron.ops.gemm import (
    GEMM,
    GEMV,
    MHA,
    DecodeAttention,
    GQAContext,
    GQAScores,
    SwiGLUDecode,
    SwiGLUPrefill,
)

NPU2 = Device.from_name("npu2")
DESIGNED = {"GEMM", "GEMV", "GQAScores", "GQAContext", "MHA"}


def test_every_case_fits_its_device_or_is_refused_with_the_rule(device):
    seen = set()
    for entry in catalog_designs(device, family="gemm"):
        seen.add(entry.operator)
        if entry.design is None:
            assert entry.refusal.startswith(f"{entry.operator}: "), entry.refusal
            continue
        report = check(entry.design)
        assert report.ok, str(report)
    assert seen >= DESIGNED


# Llama 3.2 1B: hidden 2048, 32 heads over 8 KV heads of 64, intermediate
# 8192, vocab 128256; prompts of 256 and 2048 rows, a 2048-position cache
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 2048, 32, 8, 64, 8192, 128256


def llama_operators():
    """The gemm-family operators iron.llama's graph records, as it builds them."""
    kv = KV_HEADS * HEAD_DIM
    for rows in (256, 2048):
        for out, in_ in ((HEADS * HEAD_DIM, HIDDEN), (kv, HIDDEN), (HIDDEN, HEADS * HEAD_DIM)):
            yield GEMM(M=rows, K=in_, N=out, b_col_maj=True)
        yield SwiGLUPrefill(rows, HIDDEN, FFN)
        pipelines = next(p for p in (8, 4, 2, 1) if rows % (64 * p) == 0)  # as the graph picks
        yield MHA(HEADS, rows, HEAD_DIM, KV_HEADS, heads_interleaved=True, num_pipelines=pipelines)
    for out, in_ in ((HEADS * HEAD_DIM, HIDDEN), (kv, HIDDEN), (HIDDEN, HEADS * HEAD_DIM)):
        yield GEMV(M=out, K=in_)
    yield SwiGLUDecode(HIDDEN, FFN)
    yield GEMV(M=VOCAB, K=HIDDEN)  # the output head
    yield DecodeAttention(HEADS, KV_HEADS, HEAD_DIM, 2048)


@pytest.mark.parametrize("op", list(llama_operators()), ids=str)
def test_llama_shapes_fit_npu2(op):
    op = op.resolve(NPU2)
    designs = op.designs() if hasattr(op, "designs") else {"": design_of(op)}
    assert designs
    for design in designs.values():
        report = check(design)
        assert report.ok, str(report)


@pytest.mark.parametrize(
    "op",
    [
        # Llama's prefill projection, scaled down 8x in K and N (and 2048 -> 256 rows)
        GEMM(M=256, K=256, N=512, b_col_maj=True),
        # the decode q projection and the down projection, scaled down 4x
        GEMV(M=512, K=512),
        GEMV(M=512, K=2048, tile_size_input=1, tile_size_output=1),
    ],
    ids=str,
)
def test_llama_shapes_scaled_down_match_the_reference(op):
    op = op.resolve(NPU2)
    inputs = random_inputs(op)
    (expected,) = op.call_reference(*inputs)
    verdict = compare(simulated(op, inputs), expected, op.tolerance(NPU2, inputs=inputs))
    assert verdict.passed, verdict.detail


def test_llama_decode_q_projection_and_attention_at_full_size():
    op = GEMV(M=HEADS * HEAD_DIM, K=HIDDEN).resolve(NPU2)
    inputs = random_inputs(op)
    (expected,) = op.call_reference(*inputs)
    assert compare(simulated(op, inputs), expected, op.tolerance(NPU2, inputs=inputs)).passed
    for cls in (GQAScores, GQAContext):
        op = cls(HEADS, KV_HEADS, HEAD_DIM, 2048).resolve(NPU2)
        inputs = random_inputs(op)
        (expected,) = op.call_reference(*inputs, valid=1000)
        tolerance = cls(HEADS, KV_HEADS, HEAD_DIM, 2048, valid=1000).tolerance(NPU2, inputs=inputs)
        assert compare(simulated(op, inputs, {"valid": 1000}), expected, tolerance).passed


LLAMA_PROJECTIONS = [
    *(GEMM(M=256, K=k, N=n, b_col_maj=True) for k, n in ((2048, 2048), (2048, 512), (2048, 8192),
                                                       (8192, 2048))),
    *(GEMV(M=m, K=k) for m, k in ((512, 2048), (8192, 2048), (2048, 8192), (VOCAB, HIDDEN))),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("op", LLAMA_PROJECTIONS, ids=str)
def test_llama_projections_at_full_size_match_the_reference(op):
    # a 256-row prompt's GEMMs and one token's GEMVs, the output head included
    op = op.resolve(NPU2)
    inputs = random_inputs(op)
    (expected,) = op.call_reference(*inputs)
    verdict = compare(simulated(op, inputs), expected, op.tolerance(NPU2, inputs=inputs))
    assert verdict.passed, verdict.detail


def test_llama_decode_attention_scaled_down_to_a_256_position_cache():
    # 32 heads over 8 KV heads of 64, as Llama, over 256 positions instead of 2048
    for cls in (GQAScores, GQAContext):
        op = cls(HEADS, KV_HEADS, HEAD_DIM, 256).resolve(NPU2)
        inputs = random_inputs(op)
        (expected,) = op.call_reference(*inputs, valid=200)
        actual = simulated(op, inputs, {"valid": 200})
        tolerance = cls(HEADS, KV_HEADS, HEAD_DIM, 256, valid=200).tolerance(NPU2, inputs=inputs)
        assert compare(actual, expected, tolerance).passed


def test_composites_have_no_design_of_their_own_and_name_their_parts():
    for composite in (SwiGLUDecode(256, 512), SwiGLUPrefill(256, 128, 512)):
        assert not has_design(type(composite))
        designs = composite.resolve(NPU2).designs()
        # SiLU's and the product's designs are iron-ops-eltwise's
        assert list(designs) == ["gate", "up", "silu", "mul", "down"]
        assert all(check(design).ok for design in designs.values())
    with pytest.raises(OperatorError, match="resolve the composite"):
        SwiGLUDecode(256, 512).designs()


def test_every_case_emits_mlir_calling_its_kernels(device):
    for entry in catalog_designs(device, family="gemm"):
        if entry.design is None:
            continue
        text = to_mlir(entry.design)
        for kernel in entry.design.kernels:
            assert f"func.call @{kernel.symbol}(" in text, (entry.operator, kernel.symbol)
