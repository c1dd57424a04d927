"""The runtime sequence as mlir-aie runs it, one rule in check, simulate
and the emitter alike:

- a channel queues `task_queue_depth` tasks and mlir-aie at the pin inserts
  no wait for room (`AIEDMATasksToNPU` lowers a start to `npu.push_queue`),
  so a push onto a full queue is lost on hardware; the lowering awaits the
  channel's oldest waited task first, and only a push with no such task to
  wait for is refused;
- an await takes its channel's next completion token (`npu.sync`), so the
  tokens of one channel are awaited in push order;
- a group's finish awaits its waited tasks, then frees all of them, awaited
  ones included, as mlir-aie's Runtime does (`emit_transfer` records an
  await and a free for a waited task);
- every task is in the default group or every task in a named one
  (`Runtime(strict_task_groups=True)`).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from test_mlir import V, assert_differs, assert_matches

from iron.design import (
    TAP,
    DeadlockError,
    Drain,
    Fill,
    Finish,
    QueueError,
    check,
    examples,
    lower,
    simulate,
    to_mlir,
)
from iron.design.lower import Await, Start

X = np.arange(4096, dtype=np.int32) * 3 - 7


def _drains(device, count: int = 16, **drain):
    """x through a memtile forward, drained in `count` pieces, all waited."""
    design = examples.passthrough(device, n=4096, tile=4096 // count)
    piece = 4096 // count
    drains = tuple(Drain("out", "y", TAP.linear(piece, piece * i), **drain) for i in range(count))
    return attrs.evolve(design, sequence=(Fill("in", "x"), *drains))


def test_sixteen_waited_drains_on_one_channel_wait_for_room_in_its_queue(npu1):
    design = _drains(npu1)
    assert check(design).ok
    ops = lower(design).runtime.ops
    # before the fifth drain and each after it, the oldest one still queued is awaited
    awaits = [(op.task, op.at) for op in ops if isinstance(op, Await) and op.group is None]
    assert awaits == [(i, i + 4) for i in range(1, 13)]
    # the group's finish awaits only the four left, then frees all 17 tasks
    finish = [op.task for op in ops if isinstance(op, Await) and op.group == "default"]
    assert finish == [13, 14, 15, 16]
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X)


ROOM = f"""
CHECK: %[[D1:{V}]] = aiex.dma_configure_task_for @out
CHECK: %[[D2:{V}]] = aiex.dma_configure_task_for @out
CHECK: %[[D3:{V}]] = aiex.dma_configure_task_for @out
CHECK: %[[D4:{V}]] = aiex.dma_configure_task_for @out
CHECK: aiex.dma_start_task(%[[D4]])
CHECK-NEXT: aiex.dma_await_task(%[[D1]])
CHECK-NEXT: %[[D5:{V}]] = aiex.dma_configure_task_for @out
CHECK: aiex.dma_start_task(%[[D5]])
CHECK-NEXT: aiex.dma_await_task(%[[D2]])
"""


def test_the_mlir_awaits_for_room_before_the_push_that_needs_it(npu1, tmp_path):
    text = to_mlir(_drains(npu1))
    assert_matches(text, ROOM, tmp_path)
    assert text.count("aiex.dma_await_task") == 16  # each token taken once
    # the sequence ends with the group's finish: the four drains left, then every task freed
    tail = [line.strip().split("(")[0] for line in text.splitlines()[-24:-3]]
    assert tail == ["aiex.dma_await_task"] * 4 + ["aiex.dma_free_task"] * 17
    # without the awaits for room the checks fail
    stripped = "\n".join(
        line
        for i, line in enumerate(text.splitlines())
        if "dma_await_task" not in line or "dma_free_task" in text.splitlines()[i + 1]
    )
    assert_differs(stripped, ROOM, tmp_path)


def test_a_push_with_nothing_to_wait_for_may_be_lost(npu1):
    """Five fills with no token on one channel: nothing shows the fifth has
    room, so on hardware it may be dropped (Task_Queue_Overflow)."""
    design = examples.passthrough(npu1, n=4096, tile=512)
    fills = tuple(Fill("in", "x", TAP.linear(512, 512 * i)) for i in range(8))
    design = attrs.evolve(design, sequence=(*fills, Drain("out", "y")))
    (v,) = check(design).violations
    assert (v.subject, v.rule, v.found, v.limit) == (
        "transfer 4 (fill in from x)", "tasks queued on the channel", 5, 4,
    )  # fmt: skip
    assert "none before this one on it is waited" in v.detail
    with pytest.raises(
        QueueError, match=r"sequence\[4\] \(transfer 4 \(fill in from x\)\) is task 5"
    ):
        simulate(design, {"x": X})
    # a group finished with no waited task shows nothing done; one whose
    # drain is waited shows its fills done (the drain depends on them)
    quarters = [TAP.linear(2048, 2048 * i) for i in range(2)]
    unproven = attrs.evolve(design, sequence=(*fills[:4], Finish(), *fills[4:], Drain("out", "y")))
    assert [v.found for v in check(unproven).violations] == [5]
    proven = attrs.evolve(
        design,
        sequence=(
            *fills[:4], Drain("out", "y", quarters[0]), Finish(),
            *fills[4:], Drain("out", "y", quarters[1]),
        ),
    )  # fmt: skip
    assert check(proven).ok
    np.testing.assert_array_equal(simulate(proven, {"x": X})["y"], X)
    # waited fills: the lowering waits for the oldest before the fifth push,
    # which the drain (pushed first, on its own channel) lets finish
    waited = attrs.evolve(
        design,
        sequence=(Drain("out", "y"), *(attrs.evolve(f, wait=True) for f in fills)),
    )
    assert check(waited).ok
    np.testing.assert_array_equal(simulate(waited, {"x": X})["y"], X)
    # with the drain pushed after them, that wait is for a fill nothing drains:
    # the simulator names the deadlock (on hardware the fifth push may be lost)
    stuck = attrs.evolve(waited, sequence=(*waited.sequence[1:], waited.sequence[0]))
    room = r"waits at sequence\[6\] \(room in its channel's queue\) for sequence\[2\] fill"
    with pytest.raises(DeadlockError, match=room):
        simulate(stuck, {"x": X})


def test_an_await_out_of_push_order_takes_another_tasks_token(npu1):
    """Drains on one channel in two groups, the later group finished first:
    its await would take the earlier drain's token and return early."""
    design = examples.passthrough(npu1, n=4096, tile=2048)
    halves = [TAP.linear(2048, 2048 * i) for i in range(2)]
    sequence = (
        Fill("in", "x", group="a"),
        Drain("out", "y", halves[0], group="a"),
        Drain("out", "y", halves[1], group="b"),
        Finish("b"),
        Finish("a"),
    )
    design = attrs.evolve(design, sequence=sequence)
    (v,) = check(design).violations
    assert (v.subject, v.rule, v.found) == (
        "transfer 2 (drain out to y)",
        "await takes the token of",
        "transfer 1 (drain out to y)",
    )
    in_order = attrs.evolve(design, sequence=(*sequence[:3], Finish("a"), Finish("b")))
    assert check(in_order).ok
    np.testing.assert_array_equal(simulate(in_order, {"x": X})["y"], X)


def test_an_awaited_task_is_freed_too_as_mlir_aies_runtime_frees_it(npu1, tmp_path):
    checks = f"""
CHECK:      %[[FILL:{V}]] = aiex.dma_configure_task_for @in
CHECK:      %[[DRAIN:{V}]] = aiex.dma_configure_task_for @out
CHECK:      aiex.dma_await_task(%[[DRAIN]])
CHECK-NEXT: aiex.dma_free_task(%[[FILL]])
CHECK-NEXT: aiex.dma_free_task(%[[DRAIN]])
"""
    assert_matches(to_mlir(examples.passthrough(npu1)), checks, tmp_path)
    ops = lower(examples.passthrough(npu1)).runtime.ops
    assert [type(op).__name__ for op in ops] == ["Start", "Start", "Await", "Free", "Free"]
    assert isinstance(ops[0], Start)


def test_the_default_group_and_named_groups_do_not_mix(npu1):
    design = examples.passthrough(npu1)
    mixed = attrs.evolve(
        design, sequence=(Fill("in", "x", group="load"), Drain("out", "y"), Finish("load"))
    )
    (v,) = check(mixed).violations
    assert (v.subject, v.rule, v.found, v.limit) == (
        "sequence[0]", "task group", "'load'", "the default group of sequence[1]",
    )  # fmt: skip
    named = attrs.evolve(
        mixed, sequence=(*mixed.sequence[:1], Drain("out", "y", group="load"), Finish("load"))
    )
    assert check(named).ok
