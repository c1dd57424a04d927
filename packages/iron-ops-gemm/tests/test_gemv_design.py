"""GEMV's design, run on iron-design's simulator against the reference,
within the operator's own tolerance."""

from __future__ import annotations

import pytest
from support import random_inputs, simulated

from iron.core import compare
from iron.design import check, design_of, simulate
from iron.ops.gemm import GEMV


@pytest.mark.parametrize("num_batches", [1, 3])
def test_2048_by_512_matches_the_reference(device, num_batches):
    op = GEMV(M=2048, K=512, num_batches=num_batches).resolve(device)
    a, x = random_inputs(op)
    (expected,) = op.call_reference(a, x)
    verdict = compare(simulated(op, (a, x)), expected, op.tolerance(device, inputs=(a, x)))
    assert verdict.passed, verdict.detail


def test_odd_output_tiles_travel_in_pairs(device):
    # one row per call and per output tile, as Llama's down projection runs
    op = GEMV(M=64, K=256, tile_size_input=1, tile_size_output=1, num_aie_columns=2)
    op = op.resolve(device)
    a, x = random_inputs(op)
    (expected,) = op.call_reference(a, x)
    assert compare(simulated(op, (a, x)), expected, op.tolerance(device, inputs=(a, x))).passed


def test_x_enters_once_and_every_row_of_a_once(device):
    op = GEMV(M=256, K=128, num_batches=2).resolve(device)
    a, x = random_inputs(op)
    run = simulate(design_of(op), {"A": a, "x": x})
    assert run.traffic.tensors["x"].read == x.nbytes
    assert run.traffic.tensors["A"].read == a.nbytes
    assert len(design_of(op).workers) == op.num_aie_columns


def test_more_batches_than_a_pattern_iterates_run_in_rounds(device):
    op = GEMV(M=64, K=64, num_batches=130, num_aie_columns=2).resolve(device)
    design = design_of(op)
    # 130 = 5 x 26: rounds of 26, the most batches within 64 iterations that
    # divide them; each round fills x, and fills A and drains y per column
    assert len(design.tasks()) == 5 * (1 + 2 * 2)
    a, x = random_inputs(op)
    (expected,) = op.call_reference(a, x)
    assert compare(simulated(op, (a, x)), expected, op.tolerance(device, inputs=(a, x))).passed


def test_batches_past_the_shim_stride_take_a_round_each(device):
    # a batch of A is 4096 x 8192 elements, 2^24 words: past the 20-bit stride
    op = GEMV(M=4096, K=8192, num_batches=2).resolve(device)
    design = design_of(op)
    assert check(design).ok
    assert len(design.tasks()) == 2 * (1 + 2 * op.num_aie_columns)
