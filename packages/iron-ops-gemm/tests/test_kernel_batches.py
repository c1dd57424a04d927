"""The batch form of iron_matvec_bf16's model (a replay hands it runs of
calls) against the model call by call, bit for bit, and GEMV's design
replayed against a fresh run of it."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from support import random_inputs

from iron.core import bf16
from iron.design import Simulator, design_of, simulate
from iron.design.kernel_batch import check_batch
from iron.design.replay import CALL, FLUSH
from iron.ops.gemm import GEMV
from iron.ops.gemm.core_kernels import matvec_model, scores_model


def bf16_values(rng, n: int) -> np.ndarray:
    """bf16 over many magnitudes and signs, with infinities, NaN and zeros,
    so sums cancel, overflow and round at every scale."""
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)
    special = rng.random(n)
    values[special < 0.01] = np.inf
    values[(special >= 0.01) & (special < 0.02)] = -np.inf
    values[(special >= 0.02) & (special < 0.025)] = np.nan
    values[(special >= 0.025) & (special < 0.05)] = 0.0
    return values.astype(bf16)


@pytest.mark.parametrize("rows, k", [(1, 16), (2, 256), (4, 64), (8, 128), (2, 2048)])
@pytest.mark.parametrize("seed", [0, 1])
def test_matvec_batch_form_is_the_model_bit_for_bit(rows, k, seed):
    rng = np.random.default_rng(seed)
    out_rows = 4 * rows
    calls = []
    for _ in range(3):  # three y objects, each filled by out_rows / rows calls
        x = bf16_values(rng, k)
        y = np.zeros(out_rows, bf16)
        for offset in range(0, out_rows, rows):
            calls.append((bf16_values(rng, rows * k), x, y, offset))
    with np.errstate(all="ignore"):  # inf - inf and 0 x inf are part of the test
        check_batch(functools.partial(matvec_model, rows=rows, k=k), calls)


@pytest.mark.parametrize("heads, groups, head_dim, positions", [(4, 2, 64, 32), (8, 8, 16, 16)])
@pytest.mark.parametrize("chunks", ["every kind", "none whole"])
def test_scores_batch_form_is_the_model_bit_for_bit(heads, groups, head_dim, positions, chunks):
    rng = np.random.default_rng(heads)
    model = functools.partial(
        scores_model, heads=heads, groups=groups, head_dim=head_dim, positions=positions,
        scale=0.125,
    )  # fmt: skip
    calls = []
    windows = {  # (first, valid): live rows, all of them, some, none
        "every kind": [(0, 1), (0, positions), (positions, 2 * positions - 3), (64, 10), (0, 0)],
        "none whole": [(0, 3), (positions, positions + 5), (2 * positions, 0), (0, 1)],
    }[chunks]
    for first, valid in windows:
        q = bf16_values(rng, heads * head_dim)
        keys = bf16_values(rng, positions * groups * head_dim)
        calls.append((q, keys, np.full(heads * positions, np.nan, bf16), first, valid))
    with np.errstate(all="ignore"):
        check_batch(model, calls)


def test_gemv_replays_batched_and_equals_a_fresh_run(device):
    op = GEMV(M=512, K=256).resolve(device)
    design = design_of(op)
    simulator = Simulator(design)
    for seed in range(3):
        a, x = random_inputs(op, seed=seed)
        replayed, fresh = simulator.run({"A": a, "x": x}), simulate(design, {"A": a, "x": x})
        assert replayed["y"].view(np.uint16).tolist() == fresh["y"].view(np.uint16).tolist()
    (record,) = simulator._replays.values()
    assert not any(event[0] == CALL for event in record.program)  # every call batched
    assert sum(event[0] == FLUSH for event in record.program) == 1
