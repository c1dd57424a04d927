"""The batch forms of the add and mul line models (a replay hands them runs
of calls) against the models call by call, bit for bit, and
ElementwiseAdd's design replayed against a fresh run of it."""

from __future__ import annotations

import numpy as np
import pytest

from iron.core import Device, bf16
from iron.design import Simulator, design_of, simulate
from iron.design.kernel_batch import check_batch
from iron.design.replay import CALL
from iron.ops.eltwise import ElementwiseAdd
from iron.ops.eltwise.line_kernels import FIXED_LINE, add_model, mul_model


def bf16_values(rng, n: int) -> np.ndarray:
    """bf16 over many magnitudes and signs, with infinities, NaN and zeros:
    sums and products that cancel, overflow, underflow and tie."""
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 31, n)
    special = rng.random(n)
    values[special < 0.01] = np.inf
    values[(special >= 0.01) & (special < 0.02)] = -np.inf
    values[(special >= 0.02) & (special < 0.025)] = np.nan
    values[(special >= 0.025) & (special < 0.05)] = 0.0
    return values.astype(bf16)


@pytest.mark.parametrize("model", [add_model, mul_model])
@pytest.mark.parametrize("line, count", [(16, 16), (256, 256), (256, 200), (1024, None)])
@pytest.mark.parametrize("seed", [0, 1])
def test_line_batch_forms_are_the_models_bit_for_bit(model, line, count, seed):
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(5):
        a, b, y = bf16_values(rng, line), bf16_values(rng, line), np.zeros(line, bf16)
        calls.append((a, b, y) if count is None else (a, b, y, count))
    assert count is not None or line == FIXED_LINE  # mlir-aie's kernel takes no count
    with np.errstate(all="ignore"):  # inf - inf and 0 x inf are part of the test
        check_batch(model, calls)


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_elementwise_add_replays_batched_and_equals_a_fresh_run(device):
    op = ElementwiseAdd(size=2**14).resolve(Device.from_name(device))
    design = design_of(op)
    simulator = Simulator(design)
    rng = np.random.default_rng(0)
    for _ in range(3):
        given = {"a": bf16_values(rng, 2**14), "b": bf16_values(rng, 2**14)}
        with np.errstate(all="ignore"):
            replayed, fresh = simulator.run(given), simulate(design, given)
        assert replayed["y"].view(np.uint16).tolist() == fresh["y"].view(np.uint16).tolist()
    (record,) = simulator._replays.values()
    assert not any(event[0] == CALL for event in record.program)  # every call batched
