"""GEMM's whole-array design, run on iron-design's simulator against the
reference, within the operator's own tolerance."""

from __future__ import annotations

import attrs
import pytest
from support import random_inputs, simulated

from iron.core import Device, OperatorError, compare
from iron.design import Tile, check, design_of, place, simulate
from iron.ops.gemm import GEMM

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
DTYPES = [("bf16", "bf16"), ("int8", "int32")]


def run(op: GEMM, device: Device, seed: int = 0):
    op = op.resolve(device)
    a, b = random_inputs(op, seed)
    (expected,) = op.call_reference(a, b)
    return simulated(op, (a, b)), expected, op.tolerance(device, inputs=(a, b))


@pytest.mark.parametrize("b_col_maj, c_col_maj", LAYOUTS)
@pytest.mark.parametrize("dtype_in, dtype_out", DTYPES)
def test_256_cube_in_every_layout_and_dtype_matches_the_reference(
    device, b_col_maj, c_col_maj, dtype_in, dtype_out
):
    op = GEMM(256, 256, 256, b_col_maj, c_col_maj, dtype_in=dtype_in, dtype_out=dtype_out)
    actual, expected, tolerance = run(op, device)
    verdict = compare(actual, expected, tolerance)
    assert verdict.passed, verdict.detail


@pytest.mark.parametrize(
    "params",
    [
        {"dtype_out": "float32", "tile_n": 32},  # accumulates in C itself
        {"dtype_in": "int8", "dtype_out": "bf16", "b_col_maj": True},  # int32, rounded once
    ],
)
def test_other_outputs_match_the_reference(device, params):
    actual, expected, tolerance = run(GEMM(256, 128, 256, **params), device)
    assert compare(actual, expected, tolerance).passed


def test_sizes_that_are_not_multiples_of_256(device):
    # the smallest tile rows mm.cc allows on either generation: 4 rows of 16
    op = GEMM(M=192, K=80, N=96, tile_m=16, tile_k=16, tile_n=32)
    assert op.M % 256 and op.K % 256 and op.N % 256
    for b_col_maj in (False, True):
        actual, expected, tolerance = run(attrs.evolve(op, b_col_maj=b_col_maj), device)
        assert compare(actual, expected, tolerance).passed


def test_several_row_blocks_and_column_groups_in_rounds(device):
    # 2 row blocks x 2 column groups on 2 columns: the runtime's rounds and
    # the B and C patterns' iteration dimensions are exercised
    op = GEMM(512, 128, 256, num_aie_columns=2)
    actual, expected, tolerance = run(op, device)
    assert compare(actual, expected, tolerance).passed


def test_a_corrupted_access_pattern_in_the_b_path_changes_c():
    npu2 = NPU2
    op = GEMM(256, 128, 256).resolve(npu2)
    design = design_of(op)
    fifo = design.fifo("B0_cores")
    along_k, along_n, *within = fifo.dims_to_stream
    # B's s x t blocks read column of blocks first instead of row first: a
    # legal pattern over the whole object, so only the values can tell
    swapped = (along_n, along_k, *within)
    corrupted = attrs.evolve(
        design,
        fifos=[attrs.evolve(f, dims_to_stream=swapped) if f is fifo else f for f in design.fifos],
    )
    assert check(corrupted).ok
    a, b = random_inputs(op)
    (expected,) = op.call_reference(a, b)
    tolerance = op.tolerance(npu2, inputs=(a, b))
    assert compare(simulated(op, (a, b)), expected, tolerance).passed
    assert not compare(simulated(op, (a, b), design=corrupted), expected, tolerance).passed


def test_every_core_takes_a_tile_and_b_is_read_once_per_row_block():
    op = GEMM(512, 128, 512, num_aie_columns=4).resolve(NPU1)
    design = design_of(op)
    assert len(design.workers) == 4 * 4
    a, b = random_inputs(op)
    run_ = simulate(design, {"A": a, "B": b})
    # two row blocks: B is read twice, A once per column group (2 groups)
    assert run_.traffic.tensors["B"].read == 2 * b.nbytes
    assert run_.traffic.tensors["A"].read == 2 * a.nbytes


def test_three_columns_take_the_three_blocks_of_n(device):
    op = GEMM(256, 64, 192)
    assert op.resolve(device).num_aie_columns == 3  # the most that split N in whole blocks
    actual, expected, tolerance = run(op, device)
    assert compare(actual, expected, tolerance).passed


def test_more_column_groups_than_a_pattern_holds_take_a_round_each(device):
    # 65 groups of one 32-wide block: past the shim's 64 iterations
    op = GEMM(64, 32, 65 * 32, tile_m=16, tile_k=16, tile_n=32, num_aie_columns=1)
    assert len(design_of(op.resolve(device)).tasks()) == 65 * 3
    actual, expected, tolerance = run(op, device)
    assert compare(actual, expected, tolerance).passed


def test_a_group_stride_past_the_shim_field_takes_a_round_per_group():
    # B (N, K) with K = 8192: 8 columns x 64 rows x 8192 elements between
    # groups is 2^21 words, past the shim's 20-bit stride
    op = GEMM(256, 8192, 8192, b_col_maj=True).resolve(NPU2)
    design = design_of(op)
    assert check(design).ok
    # 16 groups, each A through 4 paths, 8 B and 8 C
    assert len(design.tasks()) == 16 * (4 + 2 * 8)


def test_row_blocks_past_a_shim_dimension_are_refused():
    # fits a core (16 + 1 + 16 + 8 KiB and the stack), but 4 x 256 rows > 1023
    with pytest.raises(OperatorError, match=r"GEMM: tile_m=256: at most 255: .* wraps at 1023"):
        GEMM(1024, 64, 64, tile_m=256, tile_k=16, tile_n=16).resolve(NPU1)


@pytest.mark.parametrize(("columns", "paths"), [(1, 1), (2, 2), (3, 2), (4, 4)])
def test_a_enters_through_min_4_columns_shim_and_memtile_paths(columns, paths):
    """As mlir-aie's whole_array: path p takes 4 / paths core rows' share of
    A from column p's shim into column p's memtile; each shim reads only
    its share (the counters), and C is still A B."""
    op = GEMM(256, 64, 64 * columns, num_aie_columns=columns).resolve(NPU1)
    design = design_of(op)
    placed = place(design)
    a_paths = [f for f in placed.fifos if f.name.startswith("A_in")]
    assert [f.producer.tile for f in a_paths] == [Tile(p, 0) for p in range(paths)]
    splits = {link.name: link.tile for link in placed.links}
    assert [splits[f.consumers[0].name] for f in a_paths] == [Tile(p, 1) for p in range(paths)]
    a, b = random_inputs(op)
    run_ = simulate(design, {"A": a, "B": b})
    (expected,) = op.call_reference(a, b)
    assert compare(run_["C"], expected, op.tolerance(NPU1, inputs=(a, b))).passed
    share = a.nbytes // paths  # one column group: A read once
    shim_reads = [run_.traffic.tiles[Tile(p, 0)].read for p in range(paths)]
    b_share = b.nbytes // columns
    assert all(read == share + b_share for read in shim_reads)


def test_c_is_two_deep_where_a_core_holds_two_tiles():
    small = design_of(GEMM(192, 64, 128, tile_m=16, tile_n=32).resolve(NPU2))
    assert {f.depth for f in small.fifos if f.name.startswith("C") and "_" in f.name} == {2}
    # 64 x 64 x 64, bf16 out: A 16 KiB + B 16 KiB + accumulator 16 KiB + two C tiles
    # 16 KiB + stack exceed 64 KiB, so C stays 1 deep
    full = design_of(GEMM(256, 64, 256).resolve(NPU2))
    assert {f.depth for f in full.fifos if f.name.startswith("C") and "_" in f.name} == {1}
