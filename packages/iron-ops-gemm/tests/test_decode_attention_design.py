"""GQAScores' and GQAContext's designs: one design per cache shape, the
per-call valid length a runtime parameter."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from support import random_inputs, simulated

from iron.core import OperatorError, compare
from iron.design import design_of
from iron.ops.gemm import DecodeAttention, GQAContext, GQAScores

POSITIONS = (1, 77, 256)  # the first, one inside a chunk, the whole cache


@pytest.mark.parametrize("cls", [GQAScores, GQAContext])
def test_one_design_serves_three_positions(device, cls):
    op = cls(heads=8, kv_heads=2, head_dim=64, max_seq_len=256).resolve(device)
    design = design_of(op)
    first, cache = random_inputs(op, seed=3)
    for valid in POSITIONS:
        # valid is not compiled in: the design for any position is this one
        assert design_of(attrs.evolve(op, valid=valid)).digest() == design.digest()
        # what lies past the valid prefix is garbage the design must never read
        stale_cache, stale_first = cache.copy(), first.copy()
        stale_cache[valid:] = np.nan
        if cls is GQAContext:
            stale_first[:, valid:] = np.nan
        inputs = (stale_first, stale_cache)
        (expected,) = op.call_reference(*inputs, valid=valid)
        actual = simulated(op, inputs, {"valid": valid}, design=design)
        tolerance = attrs.evolve(op, valid=valid).tolerance(device, inputs=inputs)
        verdict = compare(actual, expected, tolerance)
        assert verdict.passed, (valid, verdict.detail)


def test_the_composite_expands_into_its_parts_designs_and_they_chain(device):
    """Scores -> softmax -> context, each step its part's design on the
    simulator at one position: they compose to the composite's answer."""
    attention = DecodeAttention(heads=8, kv_heads=2, head_dim=64, max_seq_len=128).resolve(device)
    designs = attention.designs()
    assert list(designs) == ["scores", "softmax", "context"]  # Softmax's is iron-ops-eltwise's
    parts = attention.parts()
    q, keys = random_inputs(parts["scores"], seed=5)
    _, values = random_inputs(parts["context"], seed=6)
    # a decode position whose valid length is not a whole vector of the
    # softmax kernel (32 lanes, 16 on npu1): its design masks the tail
    valid = {"valid": 50}
    scores = simulated(parts["scores"], (q, keys), valid, designs["scores"])
    weights = simulated(parts["softmax"], (scores,), valid, designs["softmax"])
    context = simulated(parts["context"], (weights, values), valid, designs["context"])
    # each step within its own operator's tolerance, on what the step before gave it
    steps = [
        ("scores", (q, keys), scores),
        ("softmax", (scores,), weights),
        ("context", (weights, values), context),
    ]
    for role, inputs, actual in steps:
        part = attrs.evolve(parts[role], **valid)
        (expected,) = part.call_reference(*inputs, **valid)
        verdict = compare(actual, expected, part.tolerance(device, inputs=inputs))
        assert verdict.passed, (role, verdict.detail)


def test_a_design_needs_the_valid_parameter(device):
    from iron.design import simulate

    op = GQAScores(heads=4, kv_heads=1, head_dim=32, max_seq_len=64).resolve(device)
    q, keys = random_inputs(op)
    with pytest.raises(Exception, match="valid"):
        simulate(design_of(op), {"q": q, "keys": keys})


@pytest.mark.parametrize("cls", [GQAScores, GQAContext])
def test_many_groups_per_column_take_smaller_chunks(device, cls):
    # 8 groups on one column: 64 positions of them would not fit a core twice
    op = cls(heads=16, kv_heads=8, head_dim=64, max_seq_len=64, num_aie_columns=1).resolve(device)
    assert op.chunk == 16
    first, cache = random_inputs(op)
    (expected,) = op.call_reference(first, cache, valid=40)
    actual = simulated(op, (first, cache), {"valid": 40})
    tolerance = attrs.evolve(op, valid=40).tolerance(device, inputs=(first, cache))
    assert compare(actual, expected, tolerance).passed


def test_a_column_whose_chunks_cannot_fit_a_core_is_refused(device):
    with pytest.raises(OperatorError, match=r"GQAScores: heads=64: 64 query heads and 32 KV"):
        GQAScores(heads=64, kv_heads=32, head_dim=512, max_seq_len=64, num_aie_columns=1).resolve(
            device
        )
