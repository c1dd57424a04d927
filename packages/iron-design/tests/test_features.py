"""Features mlir-aie's users and IRON's operators use: DMA channels pinned
on fifo endpoints, barriers released with a value, every element type a
tensor, object or kernel argument may have."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from sim_designs import add_one_body, one_worker
from test_mlir import V, assert_differs, assert_matches

from iron.core.spec import IN, OUT
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Finish,
    Kernel,
    LockError,
    Memref,
    Obj,
    ObjectFifo,
    Release,
    ReleaseBarrier,
    Scalar,
    SetBarrier,
    Tensor,
    Tile,
    WaitBarrier,
    Worker,
    check,
    core,
    shim,
    shipped,
    simulate,
    to_mlir,
    usage,
)
from iron.design.simulate import DeadlockError
from iron.design.usage import MM2S, S2MM

X = np.arange(2048, dtype=np.int32) * 5 - 3


# ---- DMA channels pinned on endpoints ----------------------------------------------------


def _pinned(device, out_channel=None, in_channel=None):
    """add_one with the worker's ends pinned: `in` at the core (S2MM) on
    `in_channel`, `out` at the core (MM2S) on `out_channel`."""
    design = one_worker(device, add_one_body(1024), n=2048)
    fifos = (
        ObjectFifo("in", 1024, "i32", shim(), (core("adder", channel=in_channel),)),
        ObjectFifo("out", 1024, "i32", core("adder", channel=out_channel), (shim(),)),
    )
    return attrs.evolve(design, fifos=fifos)


def test_a_pinned_channel_is_the_one_taken_and_written(npu1, tmp_path):
    design = _pinned(npu1, out_channel=1, in_channel=1)
    assert check(design).ok
    core_use = usage(design)[Tile(0, 2)]
    assert {(c.direction, c.index, c.fifo) for c in core_use.channels} == {
        (S2MM, 1, "in"),
        (MM2S, 1, "out"),
    }
    # the dialect's attributes (AIEOps.td: prod_dma_channel, cons_dma_channels
    # with -1 for a consumer left to the lowering)
    checks = f"""
CHECK: aie.objectfifo @in(%[[SHIM:{V}]], {{%[[CORE:{V}]]}}, 2 : i32) {{cons_dma_channels = array<i32: 1>}}
CHECK: aie.objectfifo @out(%[[CORE]], {{%[[SHIM]]}}, 2 : i32) {{prod_dma_channel = 1 : i32}}
"""
    text = to_mlir(design)
    assert_matches(text, checks, tmp_path)
    assert_differs(to_mlir(_pinned(npu1, out_channel=0, in_channel=1)), checks, tmp_path)
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X + 1)


def test_an_unpinned_end_takes_a_channel_no_pin_holds(npu1):
    """Pins are reserved before the lowest free channels are handed out
    (`reservePinnedChannels`): a later pin on channel 0 moves an earlier
    unpinned end of the tile to 1."""
    design = _pinned(npu1)
    extra = ObjectFifo("side", 16, "i32", shim(), (core("adder", channel=0),))
    pinned = attrs.evolve(design, fifos=(*design.fifos, extra))
    core_use = usage(pinned)[Tile(0, 2)]
    assert {(c.index, c.fifo) for c in core_use.channels_in(S2MM)} == {(1, "in"), (0, "side")}


def test_two_ends_pinned_to_one_channel_are_refused(npu1):
    design = _pinned(npu1, in_channel=0)
    extra = ObjectFifo("side", 16, "i32", shim(), (core("adder", channel=0),))
    colliding = attrs.evolve(design, fifos=(*design.fifos, extra))
    found = [v for v in check(colliding).violations if v.rule.startswith("pinned")]
    assert {(v.subject, v.rule, v.found) for v in found} == {
        ("fifo in at core adder", "pinned S2MM channel", 0),
        ("fifo side at core adder", "pinned S2MM channel", 0),
    }


def test_a_pin_past_the_tiles_channels_is_refused(npu1):
    limit = npu1.core_dma_channels
    (v,) = check(_pinned(npu1, out_channel=limit)).violations
    assert (v.subject, v.rule, v.found, v.limit) == (
        "fifo out at core adder", "MM2S channel", limit, f"0..{limit - 1}",
    )  # fmt: skip
    assert check(_pinned(npu1, out_channel=limit - 1)).ok


# ---- barriers released with a value ------------------------------------------------------


RELEASE_ONE = (ReleaseBarrier("go", 1),)


def _gated(device, body_tail=RELEASE_ONE, sets=2):
    """One object per barrier set: the worker waits for the lock to be 1,
    adds one, and releases the lock by 1, so it cannot start again until the
    runtime sets it back (mlir-aie's wait_for_value / release_with_value)."""
    body = (WaitBarrier("go", 1), *add_one_body(1024), *body_tail)
    halves = [TAP.linear(1024, 1024 * i) for i in range(2)]
    sequence = []
    for i in range(2):
        if i < sets:
            sequence.append(SetBarrier("go", 1))
        sequence += [Fill("in", "x", halves[i]), Drain("out", "y", halves[i]), Finish()]
    return one_worker(device, body, n=2048, sequence=tuple(sequence), barriers=("go",))


def test_a_barrier_released_with_a_value_holds_the_worker_until_set_again(npu1, tmp_path):
    design = _gated(npu1)
    assert check(design).ok
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X + 1)
    with pytest.raises(DeadlockError, match=r"waits for barrier go to be 1 \(it is 2\)"):
        simulate(_gated(npu1, sets=1), {"x": X})
    checks = f"""
CHECK:      %[[LOCK:{V}]] = aie.lock(%{{{{{V}}}}}) {{init = 0 : i32}}
CHECK:      aie.core
CHECK:      aie.use_lock(%[[LOCK]], Acquire, %[[ONE:{V}]])
CHECK:      func.call @add_one_i32
CHECK:      aie.use_lock(%[[LOCK]], Release, %[[ONE]])
CHECK:      aie.runtime_sequence
CHECK:      aiex.set_lock(%[[LOCK]], 1)
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_barrier_values_stay_in_the_locks_range(npu1):
    most = npu1.max_lock_value
    (v,) = check(_gated(npu1, body_tail=(ReleaseBarrier("go", most + 1),))).violations
    assert (v.subject, v.rule, v.found, v.limit) == (
        "worker adder (releases barrier go)", "barrier value", most + 1, f"0..{most}",
    )  # fmt: skip
    # within range each time, but the lock counts up past the most it holds
    design = _gated(npu1, body_tail=(ReleaseBarrier("go", most),))
    assert check(design).ok
    with pytest.raises(LockError, match=rf"raises barrier go at \(0, 2\) to {most + 1}, above"):
        simulate(design, {"x": X})


# ---- element types -------------------------------------------------------------------------


def scale_model(x: np.ndarray, y: np.ndarray, factor: int) -> None:
    y[:] = x * np.asarray(factor).astype(x.dtype)


@pytest.mark.parametrize("dtype, value", [("u32", 2**32 - 5), ("u16", 65535), ("i16", -7)])
def test_unsigned_and_narrow_scalars_pass_their_bits(dtype, value, npu1, tmp_path):
    """A kernel scalar of an unsigned type is the signless integer of its
    width, its bits unchanged: 2^32 - 5 as a u32 is the i32 -5."""
    line = Memref((64,), dtype)
    kernel = Kernel("scale", (line, line, Scalar(dtype)), shipped("tests", "s.cc"), scale_model)
    body = (Acquire("in"), Acquire("out"), Call(kernel, (Obj("in"), Obj("out"), value)),
            Release("in"), Release("out"))  # fmt: skip
    design = Design(
        "scale",
        npu1,
        (Tensor("x", 256, dtype, IN), Tensor("y", 256, dtype, OUT)),
        (
            ObjectFifo("in", 64, dtype, shim(), (core("w"),)),
            ObjectFifo("out", 64, dtype, core("w"), (shim(),)),
        ),
        (Worker("w", body),),
        (Fill("in", "x"), Drain("out", "y")),
    )
    assert check(design).ok
    width = {"u32": 32, "u16": 16, "i16": 16}[dtype]
    signless = value - 2**width if value >= 2 ** (width - 1) else value
    mlir = {"u32": "ui32", "u16": "ui16", "i16": "i16"}[dtype]
    checks = f"""
CHECK: func.func private @scale(memref<64x{mlir}>, memref<64x{mlir}>, i{width})
CHECK: arith.constant {signless} : i{width}
"""
    assert_matches(to_mlir(design), checks, tmp_path)
    x = np.arange(256).astype(
        np.dtype({"u32": np.uint32, "u16": np.uint16, "i16": np.int16}[dtype])
    )
    expected = x * np.asarray(value).astype(x.dtype)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected)
