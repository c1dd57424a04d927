import re
import tracemalloc

import attrs
import numpy as np
import pytest
from support import unfaithful_fraction

from iron.core import Device, OperatorError, bf16, compare, dtype_name
from iron.ops.gemm import gemv
from iron.ops.gemm.gemv import GEMV

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def shapes(op):
    return [(s.name, s.shape, dtype_name(s.dtype), s.direction.value) for s in op.arg_specs()]


def test_the_rows_iron_pinned_and_no_batch_dimension_for_one_batch():
    assert shapes(GEMV(M=256, K=64)) == [
        ("A", (256, 64), "bf16", "in"),
        ("x", (64,), "bf16", "in"),
        ("y", (256,), "bf16", "out"),
    ]
    assert [s[1] for s in shapes(GEMV(M=256, K=64, num_batches=4))] == [
        (4, 256, 64),
        (4, 64),
        (4, 256),
    ]
    assert [s[1] for s in shapes(GEMV(M=256, K=64, num_batches=1))] == [(256, 64), (64,), (256,)]


@pytest.mark.parametrize("batches", [1, 3])
def test_reference_is_the_float64_product_rounded_once(batches):
    rng = np.random.default_rng(10)
    M, K = 96, 160
    lead = (batches,) if batches > 1 else ()
    A = rng.standard_normal((*lead, M, K)).astype(bf16)
    x = rng.standard_normal((*lead, K)).astype(bf16)
    (y,) = GEMV(M, K, num_batches=batches).call_reference(A, x)
    exact = np.einsum("...mk,...k->...m", A.astype(np.float64), x.astype(np.float64))
    assert y.shape == (*lead, M) and y.dtype == bf16
    assert unfaithful_fraction(y, exact) <= 1e-3
    if batches > 1:  # each batch uses its own vector, not the first one
        (first_only,) = GEMV(M, K).call_reference(A[1], x[0])
        assert not np.array_equal(y[1], first_only)


@pytest.mark.parametrize("batches", [1, 3])
def test_reference_upcasts_a_block_of_rows_at_a_time(monkeypatch, batches):
    rng = np.random.default_rng(12)
    M, K = 100, 64
    lead = (batches,) if batches > 1 else ()
    A = rng.standard_normal((*lead, M, K)).astype(bf16)
    x = rng.standard_normal((*lead, K)).astype(bf16)
    # 7 rows of every batch per block: 15 blocks, the last one short
    monkeypatch.setattr(gemv, "UPCAST_BYTES", 7 * 4 * K * batches)
    (y,) = GEMV(M, K, num_batches=batches).call_reference(A, x)
    exact = np.einsum("...mk,...k->...m", A.astype(np.float64), x.astype(np.float64))
    assert unfaithful_fraction(y, exact) <= 1e-3


def test_reference_memory_is_bounded_by_the_block_not_the_weight():
    rng = np.random.default_rng(13)
    A = rng.standard_normal((8192, 2048), dtype=np.float32).astype(bf16)  # 32 MiB
    x = rng.standard_normal(2048).astype(bf16)
    tracemalloc.start()
    try:
        GEMV(8192, 2048).call_reference(A, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A upcast whole would take 64 MiB
    assert peak < 2 * gemv.UPCAST_BYTES + 8192 * 6


def test_defaults_two_rows_per_call_where_they_fit_else_one():
    gate = GEMV(M=8192, K=2048).resolve(NPU2)
    assert (gate.tile_size_input, gate.tile_size_output, gate.num_aie_columns) == (2, 2, 8)
    # two rows of A at K = 8192 take 64 KiB double buffered: a core holds 64 KiB in all
    down = GEMV(M=2048, K=8192).resolve(NPU2)
    assert (down.tile_size_input, down.tile_size_output) == (1, 1)
    # an odd output tile cannot be filled two rows at a time
    assert GEMV(M=2040, K=64, tile_size_output=3).resolve(NPU1).tile_size_input == 1
    assert GEMV(M=256, K=64).resolve(NPU1).num_aie_columns == 4
    # the most columns that leave each a whole number of output tiles: 40 rows in tiles of 2
    assert GEMV(M=40, K=64).resolve(NPU2).num_aie_columns == 5


def test_tolerance_floor_is_the_products_mass():
    rng = np.random.default_rng(11)
    A, x = rng.standard_normal((64, 256)), rng.standard_normal(256)
    op = GEMV(64, 256)
    mass = 256 * np.mean(np.abs(A)) * np.mean(np.abs(x))
    assert op.tolerance(NPU1, inputs=(A, x)).atol == pytest.approx(2e-4 * mass)
    assert op.tolerance(NPU2, inputs=(A, 3 * x)).atol == pytest.approx(6e-4 * mass)
    (y,) = op.call_reference(A.astype(bf16), x.astype(bf16))
    wrong = np.roll(y, 1)
    assert not compare(wrong, y, op.tolerance(NPU2, inputs=(A, x)))


REFUSALS = [
    ({"M": 0, "K": 64}, None, "GEMV: M=0: at least 1"),
    ({"M": 64, "K": 64, "num_batches": 0}, None, "GEMV: num_batches=0: at least 1"),
    ({"M": 64, "K": 40}, None, "GEMV: K=40: a positive multiple of 16 .*16-lane vectors"),
    ({"M": 64, "K": 8}, None, "GEMV: K=8: a positive multiple of 16"),
    ({"M": 64, "K": 64, "tile_size_input": 0}, None, "GEMV: tile_size_input=0: at least 1"),
    ({"M": 64, "K": 64, "tile_size_output": 0}, None, "GEMV: tile_size_output=0: at least 1"),
    ({"M": 64, "K": 64, "tile_size_input": 4, "tile_size_output": 6}, None,
     "GEMV: tile_size_output=6: a multiple of tile_size_input=4"),
    ({"M": 100, "K": 64, "num_aie_columns": 8}, None,
     "GEMV: M=100: must split evenly over num_aie_columns=8"),
    ({"M": 256, "K": 64, "num_aie_columns": 4, "tile_size_output": 48}, None,
     re.escape("GEMV: tile_size_output=48: must divide the 64 rows of each column (M / num_aie_columns)")),
    ({"M": 256, "K": 64, "num_aie_columns": 8}, NPU1,
     "GEMV: num_aie_columns=8: at most the 4 columns of npu1"),
    ({"M": 2048, "K": 8192, "tile_size_input": 2}, NPU2,
     re.escape("GEMV: tile_size_input=2: one core's buffers take 82952 bytes "
               "(A 65536 + x 16384 + y 8 + stack 1024); a core of npu2 holds 65536")),
]  # fmt: skip


# a device whose shim tiles have one DMA channel each way: A and x of 8 columns
# would need 16 streams out of 8
ONE_CHANNEL = attrs.evolve(NPU2, name="npu2-one-channel", shim_dma_channels=1)
REFUSALS.append(
    (
        {"M": 256, "K": 64, "num_aie_columns": 8},
        ONE_CHANNEL,
        re.escape(
            "GEMV: num_aie_columns=8: 16 shim DMA streams ((8 columns x 2 streams) x 1 channels) "
            "exceed the 8 of npu2-one-channel at 8 columns"
        ),
    )
)


def test_default_columns_stay_within_the_shim_budget():
    assert GEMV(M=256, K=64).resolve(ONE_CHANNEL).num_aie_columns == 4


@pytest.mark.parametrize("params, device, message", REFUSALS, ids=lambda v: None)
def test_refusals_name_the_operator_parameter_and_rule(params, device, message):
    with pytest.raises(OperatorError, match=message):
        op = GEMV(**params)
        if device is not None:
            op.resolve(device)
