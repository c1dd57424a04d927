"""The data movers' designs (MemCopy, StridedCopy, Repeat, Transpose): each
declared case fits npu1 and npu2, and the simulator running the design moves
random bit patterns exactly where the operator's reference puts them."""

import attrs
import numpy as np
import pytest

from iron.core import Device
from iron.design import TAP, Drain, Fill, TransferError, check, design_of, simulate, to_mlir
from iron.design.testing import filecheck
from iron.ops.eltwise import MemCopy, Repeat, StridedCopy, Transpose

MOVERS = (MemCopy, StridedCopy, Repeat, Transpose)
CASES = [
    pytest.param(cls, case, device, id=f"{cls.__name__}-{case.label}-{device}")
    for cls in MOVERS
    for case in cls.cases
    for device in ("npu1", "npu2")
]


def resolved(cls, case, device):
    return cls(**case.params).resolve(Device.from_name(device))


def random_bits(spec, rng):
    """Every bit pattern of the element width, NaNs and all: a mover that
    converted or reordered anything would show."""
    width = spec.dtype.itemsize
    raw = rng.integers(0, 1 << (8 * width), size=spec.shape, dtype=np.uint64)
    return raw.astype(f"u{width}").view(spec.dtype)


def bits(array):
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def inputs(op, seed=0):
    rng = np.random.default_rng(seed)
    return {spec.name: random_bits(spec, rng) for spec in op.arg_specs() if spec.reads}


def offsets(op, **per_call):
    """StridedCopy's per-call offsets (the design's runtime parameters)."""
    if isinstance(op, StridedCopy):
        return {"in_offset": 0, "out_offset": 0, **per_call}
    return {}


def expected(op, given, **per_call):
    return op.reference(*given.values(), **offsets(op, **per_call))


@pytest.mark.parametrize("cls, case, device", CASES)
def test_the_design_fits_the_device(cls, case, device):
    design = design_of(resolved(cls, case, device))
    report = check(design)
    assert report.ok, "\n".join(map(str, report.violations))
    # DMA only, but for the byte shuffle inside Transpose's 8 x 8 blocks
    kernels = {k.symbol for k in design.kernels}
    assert kernels == ({"iron_transpose_8x8_bf16"} if cls is Transpose else set())


@pytest.mark.parametrize("cls, case, device", CASES)
def test_the_simulated_design_is_bit_exact(cls, case, device):
    op = resolved(cls, case, device)
    given = inputs(op)
    run = simulate(design_of(op), given, offsets(op))
    assert (bits(run["y"]) == bits(expected(op, given))).all()


def test_strided_copy_lands_at_its_per_call_offsets():
    """One design serves every position: one position's keys into rows 0, 5
    and 15 of a 16-row cache, the offset a runtime parameter; the rest of
    the cache keeps its bits."""
    op = resolved(StridedCopy, StridedCopy.cases[1], "npu2")
    design = design_of(op)
    assert design.params == ("in_offset", "out_offset")
    given = inputs(op, seed=3)
    for row in (0, 5, 15):
        run = simulate(design, given, offsets(op, out_offset=row * 512))
        assert (bits(run["y"]) == bits(expected(op, given, out_offset=row * 512))).all()
        assert (bits(run["y"][: row * 512]) == bits(given["y"][: row * 512])).all()


def test_strided_copy_reads_from_its_in_offset():
    op = StridedCopy(input_buffer_size=2048, output_buffer_size=1024, sizes=(16, 32),
                     strides=(128, 1)).resolve(Device.from_name("npu1"))  # fmt: skip
    given = inputs(op, seed=4)
    run = simulate(design_of(op), given, offsets(op, in_offset=64))
    assert (bits(run["y"]) == bits(expected(op, given, in_offset=64))).all()
    assert (bits(run["y"]) != bits(expected(op, given, in_offset=0))).any()


def test_an_offset_that_is_not_a_whole_word_is_a_transfer_error():
    """mlir-aie rounds such an offset down to the word: a wrong row, silently."""
    op = resolved(StridedCopy, StridedCopy.cases[1], "npu2")
    with pytest.raises(TransferError, match="out_offset=3 elements is 6 B"):
        simulate(design_of(op), inputs(op), offsets(op, out_offset=3))


# ---- the simulator runs the transfers: change one and the output changes -------------


def interleaved(tap: TAP) -> TAP:
    """The same elements, the even-numbered first: a one-dimensional run
    becomes two dimensions with doubled inner stride."""
    ((count,), (stride,)) = tap.sizes, tap.strides
    return TAP(tap.offset, (2, count // 2), (stride, 2 * stride))


def halved_outer_stride(tap: TAP) -> TAP:
    return TAP(tap.offset, tap.sizes, (tap.strides[0] // 2, *tap.strides[1:]))


def tiled(tap: TAP) -> TAP:
    """Repeat's drain laid out as np.tile (copy after copy) instead of
    np.repeat (each row's copies together)."""
    _, rows, count, run = tap.sizes
    cols = count * run
    return TAP(tap.offset, tap.sizes, (rows * cols, cols, run, 1))


def with_transfer(design, kind, change):
    """`design` with the first `kind` (Fill or Drain) statement's TAP changed."""
    index = next(i for i, s in enumerate(design.sequence) if isinstance(s, kind))
    sequence = list(design.sequence)
    sequence[index] = attrs.evolve(sequence[index], tap=change(sequence[index].tap))
    return attrs.evolve(design, sequence=tuple(sequence))


MUTATIONS = {
    MemCopy: (Fill, interleaved),
    StridedCopy: (Fill, lambda tap: interleaved(tap) if len(tap.sizes) == 1 else halved_outer_stride(tap)),
    Repeat: (Drain, tiled),
    # tiles half a tile apart, rows a tile's width apart: rows no longer from x's rows
    Transpose: (Fill, lambda tap: TAP(tap.offset, tap.sizes,
                                      (tap.strides[0] // 2, tap.strides[1], tap.sizes[3], 1))),
}  # fmt: skip


@pytest.mark.parametrize("cls, case, device", CASES)
def test_a_changed_transfer_changes_the_output(cls, case, device):
    op = resolved(cls, case, device)
    given = inputs(op, seed=1)
    kind, change = MUTATIONS[cls]
    run = simulate(with_transfer(design_of(op), kind, change), given, offsets(op))
    assert (bits(run["y"]) != bits(expected(op, given))).any()


def test_a_moved_offset_changes_the_output():
    op = resolved(StridedCopy, StridedCopy.cases[1], "npu1")
    given = inputs(op, seed=2)
    moved = with_transfer(design_of(op), Drain, lambda tap: attrs.evolve(tap, offset=512))
    assert (bits(simulate(moved, given, offsets(op))["y"]) != bits(expected(op, given))).any()


# ---- the MLIR of one mover ------------------------------------------------------------

REPEAT_CHECKS = r"""
CHECK:      aie.device(npu1) @main {
CHECK-DAG:  %[[SHIM:.+]] = aie.tile(0, 0)
CHECK-DAG:  %[[MEM:.+]] = aie.tile(0, 1)
CHECK-NOT:  aie.core
CHECK:      aie.objectfifo @[[IN:[a-z0-9_]+]](%[[SHIM]], {%[[MEM]]}, 2 : i32) : !aie.objectfifo<memref<64xbf16>>
CHECK-NEXT: aie.objectfifo @[[OUT:[a-z0-9_]+]](%[[MEM]], {%[[SHIM]]}, 2 : i32) : !aie.objectfifo<memref<64xbf16>>
CHECK-NEXT: aie.objectfifo.link [@[[IN]]] -> [@[[OUT]]]([] [])
CHECK-NOT:  func.func
CHECK:      aie.runtime_sequence @sequence(%[[X:.+]]: memref<8x64xbf16>, %[[Y:.+]]: memref<32x64xbf16>) {
CHECK:      aiex.dma_configure_task_for @[[IN]] {
CHECK-NEXT: aie.dma_bd(%[[X]] : memref<8x64xbf16> offset = 0 len = 512 sizes = [4, 8, 1, 64] strides = [0, 64, 64, 1])
CHECK:      } {repeat_count = 3 : i32}
CHECK:      %[[DRAIN:.+]] = aiex.dma_configure_task_for @[[OUT]] {
CHECK-NEXT: aie.dma_bd(%[[Y]] : memref<32x64xbf16> offset = 0 len = 512 sizes = [4, 8, 1, 64] strides = [64, 256, 64, 1])
CHECK:      } {issue_token = true, repeat_count = 3 : i32}
CHECK:      aiex.dma_await_task(%[[DRAIN]])
"""


def test_repeat_mlir_is_a_memtile_forward_with_the_fill_and_drain_patterns(tmp_path):
    """The fill re-reads x four times (outer stride 0, the shim's iteration
    dimension: repeat_count 3 after the first pass); the drain interleaves."""
    op = Repeat(rows=8, cols=64, repeat=4).resolve(Device.from_name("npu1"))
    code, output = filecheck(to_mlir(design_of(op)), REPEAT_CHECKS, tmp_path)
    assert code == 0, output


def test_the_repeat_checks_notice_a_wrong_pattern(tmp_path):
    op = Repeat(rows=8, cols=64, repeat=4).resolve(Device.from_name("npu1"))
    wrong = with_transfer(design_of(op), Drain, tiled)
    assert filecheck(to_mlir(wrong), REPEAT_CHECKS, tmp_path)[0] != 0


def test_bf16_cannot_be_transposed_by_access_patterns_alone():
    """Why Transpose's design runs a kernel: a memtile reordering an 8 x 8
    bf16 tile column by column breaks the DMA's 4-byte word."""
    from iron.core import IN, OUT
    from iron.design import Design, ObjectFifo, Tensor, forward, memtile, shim

    tile = (8, 8)
    design = Design(
        "transpose_bf16",
        Device.from_name("npu2"),
        (Tensor("x", tile, "bf16", IN), Tensor("y", tile, "bf16", OUT)),
        fifos=(
            ObjectFifo("in", (64,), "bf16", shim(), (memtile("fwd"),)),
            ObjectFifo(
                "out", (64,), "bf16", memtile("fwd"), (shim(),), dims_to_stream=((8, 1), (8, 8))
            ),
        ),
        workers=(),
        links=(forward("fwd", "in", "out"),),
        sequence=(Fill("in", "x", TAP.linear(64)), Drain("out", "y", TAP.linear(64))),
    )
    problems = [str(v) for v in check(design).violations]
    assert any("2-byte elements move as whole 4-byte words" in p for p in problems), problems


SWEEP = [
    Repeat(rows=2, cols=cols, repeat=times)
    for cols in (2, 1024, 2046, 4096, 3 * 2046, 1023 * 2 * 5)
    for times in (1, 64)
] + [
    StridedCopy(input_buffer_size=n, output_buffer_size=n, sizes=(n,), strides=(1,))
    for n in (2, 2 * 20011, 1 << 18)
] + [MemCopy(size=1 << 16, num_channels=2)] + [
    Transpose(M=8, N=8),
    Transpose(M=24, N=40),
    Transpose(M=512, N=256, num_channels=2),
    Transpose(M=96, N=128, tile_m=96, tile_n=32, num_aie_columns=4),
]  # fmt: skip


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", SWEEP, ids=repr)
def test_a_mover_fits_and_is_exact_beyond_its_cases(op, device):
    op = op.resolve(Device.from_name(device))
    design = design_of(op)
    report = check(design)
    assert report.ok, "\n".join(map(str, report.violations))
    given = inputs(op)
    assert (bits(simulate(design, given, offsets(op))["y"]) == bits(expected(op, given))).all()


FULL_ARRAY = [
    MemCopy(size=1 << 16),
    MemCopy(size=1 << 16, num_channels=2),
    Transpose(M=1024, N=2048, num_channels=2),
]


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", FULL_ARRAY, ids=repr)
def test_a_mover_on_every_column_fits(op, device):
    report = check(design_of(op.resolve(Device.from_name(device))))
    assert report.ok, "\n".join(map(str, report.violations))


@pytest.mark.slow
@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", FULL_ARRAY, ids=repr)
def test_a_mover_on_every_column_is_exact(op, device):
    op = op.resolve(Device.from_name(device))
    given = inputs(op, seed=7)
    assert (
        bits(simulate(design_of(op), given, offsets(op))["y"]) == bits(expected(op, given))
    ).all()


STRIDED_COPY_CHECKS = r"""
CHECK-DAG:  aiex.scratchpad_parameter @in_offset : i32
CHECK-DAG:  aiex.scratchpad_parameter @out_offset : i32
CHECK:      aie.runtime_sequence @sequence(%[[X:.+]]: memref<512xbf16>, %[[Y:.+]]: memref<8192xbf16>) {
CHECK:      aiex.sync_scratchpad_parameters_from_host
CHECK:      aie.dma_bd(%[[X]] : memref<512xbf16> offset = 0 len = 512 {{.*}}) {offset_parameter = @in_offset}
CHECK:      aie.dma_bd(%[[Y]] : memref<8192xbf16> offset = 0 len = 512 {{.*}}) {offset_parameter = @out_offset}
"""


def test_strided_copy_mlir_patches_both_offsets_from_the_scratchpad(tmp_path):
    """mlir-aie's offset_parameter: the word is added to the shim BD's address
    at each call, so the compiled program serves every cache row."""
    op = resolved(StridedCopy, StridedCopy.cases[1], "npu2")
    code, output = filecheck(to_mlir(design_of(op)), STRIDED_COPY_CHECKS, tmp_path)
    assert code == 0, output
    fixed = attrs.evolve(
        design_of(op),
        sequence=[
            attrs.evolve(s, offset_param=None) if isinstance(s, Drain) else s
            for s in design_of(op).sequence
        ],
    )
    assert filecheck(to_mlir(fixed), STRIDED_COPY_CHECKS, tmp_path)[0] != 0
