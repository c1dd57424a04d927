import numpy as np
import pytest
from dispatch_fakes import Add, Mul, Scale, Shift, SumRows

from iron.alloc import OverlapError, check
from iron.core import Device, View, bf16, capture
from iron.dispatch import LayoutError, OperatorSequence, Runlist, run
from iron.dispatch import layout as layout_module

N = 1024  # elements: 2048 B of bf16
rng = np.random.default_rng(7)


def random_bf16(*shape):
    return rng.standard_normal(shape).astype(bf16)


def chain():
    """x -> t0 -> t1 -> t2 -> y: four steps, three 2048 B intermediates."""
    return [
        (Scale(N), "x", "t0"),
        (Scale(N, 0.5), "t0", "t1"),
        (Scale(N, 3.0), "t1", "t2"),
        (Scale(N), "t2", "y"),
    ]


def test_planning_shrinks_a_chain_to_its_lower_bound():
    seq = OperatorSequence("chain", chain(), ["x"], ["y"])
    assert (
        seq.memory_report()
        == "chain: scratch 6144 B -> 4096 B, lower bound 4096 B (plus 0 B pinned)"
    )
    assert seq.layout.size("scratch") == 4096
    assert seq.layout.scratch["t0"][0] == seq.layout.scratch["t2"][0]  # ping-pong
    check(seq.plan, seq.runlist.live_ranges(), seq.runlist.sizes)
    unplanned = OperatorSequence("chain", chain(), ["x"], ["y"], plan_scratch=False)
    assert unplanned.plan is None and unplanned.layout.size("scratch") == 6144
    assert len({o for o, _ in unplanned.layout.scratch.values()}) == 3


def test_planned_buffers_are_rebased_past_pinned_ones():
    runlist = [(Mul(N), "x", "w", "t0"), (Add(N), "t0", "x", "t1"), (Scale(N), "t1", "y")]
    seq = OperatorSequence("rebase", runlist, ["x"], ["y"], buffer_sizes={"w": 2 * N})
    w_offset, w_bytes = seq.layout.scratch["w"]
    assert (w_offset, w_bytes) == (0, 2048)
    for name in ("t0", "t1"):
        assert seq.layout.scratch[name][0] >= w_offset + w_bytes
    check(seq.plan, seq.runlist.live_ranges(), seq.runlist.sizes)
    assert seq.layout.input == {"x": (0, 2048)} and seq.layout.output == {"y": (0, 2048)}


def test_slices_resolve_to_their_base_and_are_never_pooled():
    rows, row_bytes = 4, 2 * N
    runlist = [
        (Scale(N), "x", "t0"),
        (Scale(N), "t0", f"stack[{row_bytes}:{2 * row_bytes}]"),
        (Scale(N), "x", f"stack[{3 * row_bytes}:{4 * row_bytes}]"),
        (SumRows(N, rows, valid=4), "stack", "y"),
    ]
    seq = OperatorSequence("slices", runlist, ["x"], ["y"])
    assert "stack" in seq.runlist.pinned and "stack" not in seq.runlist.live_ranges()
    assert "stack" in seq.layout.host_addressed and "t0" not in seq.layout.host_addressed
    base_offset, base_bytes = seq.layout.scratch["stack"]
    assert base_bytes == rows * row_bytes
    assert seq.runlist.steps[1].args[1] == View("stack", row_bytes, 2 * row_bytes)  # text read once
    assert seq.layout.locate(View("stack", row_bytes, 2 * row_bytes)) == (
        "scratch",
        base_offset + row_bytes,
        row_bytes,
    )
    t0 = seq.layout.scratch["t0"][0]
    assert (
        t0 >= base_offset + base_bytes or t0 + 2 * N <= base_offset
    )  # t0 does not land in the stack
    x = random_bf16(N)
    stacked = np.zeros((rows, N), np.float32)
    stacked[1] = (x.astype(np.float32) * 2).astype(bf16).astype(np.float32) * 2
    stacked[3] = x.astype(np.float32) * 2
    got = run(seq, {"x": x}, buffers={"stack": np.zeros((rows, N), bf16)})["y"]
    np.testing.assert_array_equal(got, stacked.astype(bf16).astype(np.float32).sum(0).astype(bf16))


def test_no_two_live_buffers_share_bytes_on_a_fan_out():
    runlist = [
        (Scale(N), "x", "a"),
        (Scale(N, 3.0), "x", "b"),
        (Mul(N), "a", "b", "c"),
        (Add(N), "c", "a", "y"),
    ]
    seq = OperatorSequence("fan", runlist, ["x"], ["y"])
    check(seq.plan, seq.runlist.live_ranges(), seq.runlist.sizes)
    assert seq.layout.size("scratch") == 3 * 2048  # a, b and c are all live at step 2


def swiglu_runlist():
    return [
        (Scale(N, 0.5), "x", "gate"),
        (Scale(N, 1.5), "x", "up"),
        (Mul(N), "gate", "up", "prod"),
        (Add(N), "prod", "x", "y"),
    ]


def swiglu_capture():
    with capture("swiglu") as g:
        x = g.input("x", N)
        gate = g(Scale(N, 0.5), x)
        up = g(Scale(N, 1.5), x)
        g(Add(N), g(Mul(N), gate, up), x)
    return g


@pytest.mark.parametrize("plan_scratch", [True, False])
def test_captured_graph_and_hand_written_runlist_agree_bit_for_bit(plan_scratch):
    x = random_bf16(N)
    written = OperatorSequence("swiglu", swiglu_runlist(), ["x"], ["y"], plan_scratch=plan_scratch)
    captured = OperatorSequence.from_graph(swiglu_capture(), plan_scratch=plan_scratch)
    (out_name,) = captured.runlist.outputs
    a = run(written, {"x": x}, poison=True)["y"]
    b = run(captured, {"x": x}, poison=True)[out_name]
    expected = (
        (x.astype(np.float32) * 0.5).astype(bf16).astype(np.float32) * (x.astype(np.float32) * 1.5).astype(bf16).astype(np.float32)
    ).astype(bf16).astype(np.float32) + x.astype(np.float32)  # fmt: skip
    assert a.tobytes() == b.tobytes() == expected.astype(bf16).tobytes()


def test_a_corrupted_plan_is_refused_and_would_give_wrong_numbers(monkeypatch):
    """Aliasing two live buffers is refused by the layout's check; with the
    check bypassed it must show in the result: proof that the reference
    backend really computes in the planned arena."""
    x = random_bf16(N)
    good = OperatorSequence("swiglu", swiglu_runlist(), ["x"], ["y"])
    offsets = {n: good.layout.scratch[n][0] - 0 for n in ("gate", "up", "prod")}
    offsets["up"] = offsets["gate"]  # gate and up are both live at the Mul
    with pytest.raises(OverlapError, match=r"'(gate|up)' \(steps .*\) overlaps '(up|gate)'"):
        OperatorSequence("swiglu", swiglu_runlist(), ["x"], ["y"], buffer_offsets=offsets)
    monkeypatch.setattr(layout_module, "_prove", lambda *args: None)
    bad = OperatorSequence("swiglu", swiglu_runlist(), ["x"], ["y"], buffer_offsets=offsets)
    assert run(good, {"x": x})["y"].tobytes() != run(bad, {"x": x})["y"].tobytes()


def test_poison_shows_bytes_a_run_never_wrote():
    """A sequence that writes only half of its output: without poison the
    other half holds whatever the buffer had; with poison it is NaN."""
    seq = OperatorSequence(
        "half", [(Scale(N), "x", f"y[0:{2 * N}]")], ["x"], ["y"], buffer_sizes={"y": 4 * N}
    )
    x = random_bf16(N)
    clean, poisoned = run(seq, {"x": x}, poison=False)["y"], run(seq, {"x": x}, poison=True)["y"]
    assert clean.shape == (2 * N,)
    assert not np.isnan(clean.astype(np.float32)).any()
    assert np.isnan(poisoned[N:].astype(np.float32)).all()
    assert poisoned.tobytes()[: 2 * N] == clean.tobytes()[: 2 * N]


def test_per_call_values_reach_the_references():
    with capture("shift") as g:
        x = g.input("x", N)
        pos = g.scalar("pos")
        g(Shift(N), x, offset=pos * 2 + 1)
    seq = OperatorSequence.from_graph(g)
    x = np.zeros(N, bf16)
    for pos in (0, 3, 10):
        (y,) = run(seq, {"x": x}, values={"pos": pos}).values()
        assert (y == 2 * pos + 1).all()


def test_one_operator_instance_takes_each_steps_own_value():
    shift = Shift(N)
    with capture("twice") as g:
        x = g.input("x", N)
        pos = g.scalar("pos")
        g(shift, g(shift, x, offset=pos), offset=pos * 10)
    seq = OperatorSequence.from_graph(g, device=Device.from_name("npu2"))  # resolved copies
    assert [s.op is shift for s in seq.runlist.steps] == [False, False]
    for backend in ("reference", "sim"):
        (y,) = run(seq, {"x": np.zeros(N, bf16)}, values={"pos": 2}, backend=backend).values()
        assert (y == 22).all(), backend


# ---- errors ----


def test_a_name_used_with_two_sizes():
    runlist = [(Scale(N), "x", "t"), (Scale(N // 2), "t", "y")]
    with pytest.raises(
        LayoutError,
        match=r"step 1 \(Scale\): buffer 't' is used as 1024 B here \(x \(512,\)\) but is 2048 B elsewhere",
    ):
        OperatorSequence("bad", runlist, ["x"], ["y"])


def test_slice_errors():
    with pytest.raises(
        LayoutError, match="step 0 \\(Scale\\): slice 'kv\\[0:2048\\]' of unknown buffer 'kv'"
    ):
        OperatorSequence("bad", [(Scale(N), "x", "kv[0:2048]")], ["x"], [])
    with pytest.raises(LayoutError, match="slice 'kv\\[2048:4096\\]' is outside 'kv' \\(2048 B\\)"):
        OperatorSequence(
            "bad", [(Scale(N), "x", "kv[2048:4096]")], ["x"], [], buffer_sizes={"kv": 2048}
        )
    with pytest.raises(LayoutError, match="slice 'kv\\[0:1024\\]' is 1024 B but y needs 2048 B"):
        OperatorSequence(
            "bad", [(Scale(N), "x", "kv[0:1024]")], ["x"], [], buffer_sizes={"kv": 4096}
        )


def test_io_that_no_step_touches():
    with pytest.raises(LayoutError, match="input 'z' is not touched by any step"):
        OperatorSequence("bad", chain(), ["x", "z"], ["y"])
    with pytest.raises(LayoutError, match="output 'w' is not touched by any step"):
        OperatorSequence("bad", chain(), ["x"], ["y", "w"])


def test_runlist_entries_must_be_operator_then_buffers():
    with pytest.raises(
        TypeError, match="step 0: a runlist entry is \\(Operator, \\*buffers\\) or a Step"
    ):
        OperatorSequence("bad", [("Scale", "x", "y")], ["x"], ["y"])
    with pytest.raises(
        TypeError, match="step 0 \\(Scale\\): a buffer is a plain name or a View, got 3"
    ):
        OperatorSequence("bad", [(Scale(N), "x", 3)], ["x"], [])
    with pytest.raises(
        TypeError, match="step 0 \\(Scale\\): 1 buffer names for 2 arg specs \\(x, y\\)"
    ):
        OperatorSequence("bad", [(Scale(N), "x")], ["x"], [])
    with pytest.raises(
        LayoutError,
        match="step 0 \\(Scale\\): 'kv\\[0:\\]' is neither a buffer name nor a view",
    ):
        OperatorSequence("bad", [(Scale(N), "x", "kv[0:]")], ["x"], [], buffer_sizes={"kv": 4096})


def test_views_and_their_text_give_one_runlist():
    sizes = {"kv": 4 * N}
    text = OperatorSequence("t", [(Scale(N), "x", "kv[2048:4096]")], ["x"], [], buffer_sizes=sizes)
    typed = OperatorSequence(
        "t", [(Scale(N), "x", View("kv", 2048, 4096))], ["x"], [], buffer_sizes=sizes
    )
    assert text.runlist.steps == typed.runlist.steps and text.layout == typed.layout
    with pytest.raises(
        TypeError, match="a buffer is a plain name or a View, got 'kv\\[2048:4096\\]'"
    ):
        Runlist("t", [(Scale(N), "x", "kv[2048:4096]")], ["x"], [], buffer_sizes=sizes)


def test_reading_a_buffer_nobody_wrote():
    with pytest.raises(
        LayoutError, match="step 0 \\(Add\\): reads 'ghost', which is not an input, weight or state"
    ):
        OperatorSequence("bad", [(Add(N), "x", "ghost", "y")], ["x"], ["y"])
