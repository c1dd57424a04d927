"""LMHead: the reference against transformers' final norm, lm_head and
soft-cap in float64; the refusals; the design's check, its simulated
logits within the operator's tolerance, W read from DDR exactly once, and
a corrupted weight transfer caught."""

import attrs
import flm_gemma4_f64 as exact
import numpy as np
import pytest
from flm_gemma4 import NPU1, NPU2, close_to_exact

from iron.core import OperatorError, bf16, compare
from iron.design import Fill, check, design_of, simulate
from iron.ops.flm.lm_head import LMHead, WeightFormat, unpack_rows


def inputs(op, seed=0):
    return op.example_inputs(np.random.default_rng(seed))


def simulated(op, x, norm, W):
    blocks = (
        W
        if op.weights is WeightFormat.BF16
        else np.ascontiguousarray(W).view(np.dtype((np.void, 9))).reshape(-1)
    )
    return simulate(design_of(op), {"x": x, "norm": norm, "W": blocks})


@pytest.mark.parametrize("case", LMHead.cases, ids=lambda c: c.label)
def test_reference_is_the_float64_head_within_one_rounding(case):
    op = LMHead(**case.params)
    x, norm, W = inputs(op)
    dense = unpack_rows(W, op.vocab, op.dim, op.weights)  # what the cores read
    want = exact.lm_head(x, norm, dense, op.softcap)
    assert close_to_exact(op.reference(x, norm, W), want, np.abs(want).max()) is None


def test_the_soft_cap_bounds_the_logits_and_keeps_small_ones():
    op = LMHead(dim=256, vocab=1024, softcap=2.0)
    x, norm, W = inputs(op)
    capped = op.reference(x, norm, W).astype(np.float64)
    plain = LMHead(dim=256, vocab=1024, softcap=None).reference(x, norm, W).astype(np.float64)
    assert np.abs(capped).max() <= 2.0 < np.abs(plain).max()
    small = np.abs(plain) < 0.05
    np.testing.assert_allclose(capped[small], plain[small], rtol=0.01, atol=1e-3)


@pytest.mark.parametrize(
    "params, device, message",
    [
        ({"dim": 100, "vocab": 1024}, None, "LMHead: dim=100: a positive multiple of 256"),
        ({"dim": 256, "vocab": 1000}, NPU2, "LMHead: vocab=1000: a multiple of 128 on npu2"),
        ({"dim": 256, "vocab": 1024, "softcap": -1.0}, None, "LMHead: softcap=-1.0: positive"),
        ({"dim": 256, "vocab": 1024}, NPU1,
         "LMHead: device=npu1: the Gemma 4 kernels are aie2p-only"),
        ({"dim": 8192, "vocab": 1024}, NPU2, "LMHead: dim=8192: a core holds x and two 4-row"),
        ({"dim": 256, "vocab": 1024, "weights": "q4"}, None, "LMHead: weights='q4': bf16 or bfp16"),
    ],
)  # fmt: skip
def test_refusals_name_the_operator_parameter_and_rule(params, device, message):
    with pytest.raises((OperatorError, ValueError), match=message):
        op = LMHead(**params)
        if device is not None:
            op.resolve(device)


def test_pack_refuses_a_weight_of_another_shape():
    with pytest.raises(OperatorError, match=r"LMHead: W: shape \(1024, 256\)"):
        LMHead(dim=256, vocab=1024).pack(np.zeros((256, 1024)))


@pytest.mark.parametrize("case", LMHead.cases, ids=lambda c: c.label)
def test_design_fits_and_simulates_to_the_reference(case):
    op = LMHead(**case.params).resolve(NPU2)
    x, norm, W = inputs(op, seed=3)
    design = design_of(op)
    assert check(design).ok, str(check(design))
    run = simulated(op, x, norm, W)
    verdict = compare(
        run["logits"], op.reference(x, norm, W), op.tolerance(NPU2, inputs=(x, norm, W))
    )
    assert verdict.passed, verdict.detail
    moved = run.traffic.tensors
    # W once (its stored size), x and the norm once each, the logits once
    assert moved["W"].read == W.nbytes
    assert (moved["x"].read, moved["norm"].read) == (x.nbytes, norm.nbytes)
    assert moved["logits"].written == op.vocab * 2


def test_weight_transfers_swapped_between_columns_fail():
    """Columns 0 and 1 reading each other's rows: every tile still arrives
    whole, so only the logits tell."""
    op = LMHead(dim=256, vocab=2048).resolve(NPU2)
    x, norm, W = inputs(op)
    design = design_of(op)
    fills = [i for i, s in enumerate(design.sequence) if isinstance(s, Fill) and s.tensor == "W"]
    sequence = list(design.sequence)
    a, b = sequence[fills[0]], sequence[fills[1]]
    sequence[fills[0]] = attrs.evolve(a, tap=attrs.evolve(a.tap, offset=b.tap.offset))
    sequence[fills[1]] = attrs.evolve(b, tap=attrs.evolve(b.tap, offset=a.tap.offset))
    run = simulate(attrs.evolve(design, sequence=sequence), {"x": x, "norm": norm, "W": W})
    tolerance = op.tolerance(NPU2, inputs=(x, norm, W))
    assert not compare(run["logits"], op.reference(x, norm, W), tolerance).passed


def test_a_wrong_norm_weight_is_outside_the_tolerance():
    op = LMHead(dim=256, vocab=2048).resolve(NPU2)
    x, norm, W = inputs(op)
    run = simulated(op, x, (norm.astype(np.float32) * 1.1).astype(bf16), W)
    assert not compare(
        run["logits"], op.reference(x, norm, W), op.tolerance(NPU2, inputs=(x, norm, W))
    ).passed


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["bf16", "bfp16"])
def test_e2b_head_simulates_to_the_reference(weights):
    """Gemma 4 E2B's head: 1536 x 262144, soft-cap 30."""
    op = LMHead(dim=1536, vocab=262144, weights=weights).resolve(NPU2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(op.dim).astype(bf16)
    norm = (1 + 0.1 * rng.standard_normal(op.dim)).astype(bf16)
    W = np.empty((op.vocab, op.dim), bf16)
    for start in range(0, op.vocab, 16384):
        W[start : start + 16384] = rng.standard_normal((16384, op.dim), np.float32) * np.float32(
            2 / np.sqrt(op.dim)
        )
    W = W if weights == "bf16" else op.pack(W)
    run = simulated(op, x, norm, W)
    verdict = compare(
        run["logits"], op.reference(x, norm, W), op.tolerance(NPU2, inputs=(x, norm, W))
    )
    assert verdict.passed, verdict.detail
    assert run.traffic.tensors["W"].read == W.nbytes
