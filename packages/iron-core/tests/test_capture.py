import numpy as np
import pytest
from core_fakes import Accumulate, Add, CopyAt, RowNorm, Square, SquarePlusOne

from iron.core import CaptureError, Expr, View, bf16, capture


def test_chain_records_steps_and_infers_io():
    with capture("chain") as g:
        x = g.input("x", 64)
        a = g(Square(64), x)
        b = g(Square(64), a)
        y = g(Square(64), b, name="y")
    assert [s.args for s in g.steps] == [("x", a.name), (a.name, b.name), (b.name, "y")]
    assert y.name == "y" and y.shape == (64,) and y.role == "intermediate"
    assert g.infer_io() == (["x"], ["y"])
    assert g.accesses() == [(("x",), (a.name,)), ((a.name,), (b.name,)), ((b.name,), ("y",))]
    assert g.pinned() == {}


def test_fan_out_fan_in_shares_the_input_name():
    w = np.ones(128, bf16)
    with capture() as g:
        x = g.input("x", (4, 128))
        h = g(RowNorm(512, 128, weighted=True), x, g.weight("norm", w))
        gate = g(Square(512), h)  # (4, 128) feeds (512,): a flat view of the same bytes
        up = g(Square(512), h)
        out = g(Add(512), gate, up)
    reads = [s.reads for s in g.steps]
    assert reads[1] == reads[2] == (h.name,)
    assert reads[3] == (gate.name, up.name)
    assert g.infer_io() == (["x"], [out.name])
    assert g.pinned() == {"norm": 256}
    assert g.weights["norm"] is w


def test_in_place_steps_write_an_argument():
    with capture() as g:
        x = g.input("x", 32)
        a = g(Square(32), x)
        same = g(Square(32), a, a)  # full argument list: the trailing value is the output
        acc = g.state("acc", 32)
        total = g(Accumulate(32), same, acc)  # INOUT given among the inputs
    assert same is a or same.name == a.name
    assert g.steps[1].args == (a.name, a.name)
    assert g.steps[1].reads == (a.name,) and g.steps[1].writes == (a.name,)
    assert (
        total.name == "acc"
        and g.steps[2].reads == (a.name, "acc")
        and g.steps[2].writes == ("acc",)
    )
    assert g.infer_io() == (["x"], [])  # a state is neither input nor output


def test_slices_are_views_of_byte_ranges_and_pin_their_base():
    with capture() as g:
        kv = g.state("kv", (4, 8))
        x = g.input("x", 8)
        row = kv[2]
        assert row.ref == View("kv", 32, 48) and row.shape == (8,) and row.role == "slice"
        assert row.name == "kv[32:48]" and row.buffer == "kv"
        assert kv[1:3].ref == View("kv", 16, 48) and kv[1:3].shape == (2, 8)
        assert kv[-1].ref == View("kv", 48, 64)
        g(Square(8), x, row)
        scratch = g(Square(32), g.input("y", 32))
        g(Square(8), x, scratch.reshape(4, 8)[0])
    assert g.steps[0].writes == (View("kv", 32, 48),)
    assert g.accesses()[0] == (("x",), ("kv",))  # planning sees the base
    assert g.pinned() == {"kv": 64, scratch.name: 64}
    assert g.nbytes(View("kv", 32, 48)) == 16 and g.nbytes("kv") == 64
    assert "Square           x, kv[32:48]" in g.summary()
    with pytest.raises(CaptureError, match="slice of a slice"):
        kv[1:3][0]
    with pytest.raises(IndexError, match="row 4 out of range"):
        kv[4]
    with pytest.raises(CaptureError, match="unit-step"):
        kv[0:4:2]


def test_reshape_is_free_and_checked():
    with capture() as g:
        x = g.input("x", (4, 16))
        flat = x.reshape(64)
        assert flat.name == "x" and flat.shape == (64,)
        assert x.reshape(-1, 8).shape == (8, 8)
        with pytest.raises(CaptureError, match="element counts differ"):
            x.reshape(65)


def test_named_weights_are_keyed_by_storage():
    w = np.zeros((16,), bf16)
    with capture() as g:
        a = g.weight("w", w)
        b = g.weight("w_again", w)
        c = g.weight("w_copy", w.copy())
    assert a.name == b.name == "w" and c.name == "w_copy"
    assert set(g.weights) == {"w", "w_copy"}
    with pytest.raises(TypeError, match="numpy array"):
        g.weight("list", [1, 2])


def test_shape_mismatch_names_step_argument_and_both_shapes():
    with capture("net") as g:
        x = g.input("x", (8, 16))
        with pytest.raises(
            CaptureError,
            match=r"net step 0 \(RowNorm\): argument x is x of shape \(8, 16\); the spec wants \(16, 8\)",
        ):
            g(RowNorm(128, 8), x)
        with pytest.raises(
            CaptureError, match=r"argument x is x of shape \(8, 16\); the spec wants \(100,\)"
        ):
            g(Square(100), x)
        with pytest.raises(CaptureError, match="dtype float32; the spec wants bf16"):
            g(Square(4), g.input("f", 4, np.float32))


def test_wrong_argument_count_is_a_type_error():
    with capture() as g:
        x = g.input("x", 8)
        with pytest.raises(
            TypeError, match=r"takes its 2 input\(s\) \(a, b\) or all 3 arguments; got 1"
        ):
            g(Add(8), x)
        with pytest.raises(TypeError, match="must be a value of this graph"):
            g(Square(8), np.zeros(8, bf16))


def test_inputs_and_weights_are_read_only():
    with capture() as g:
        x = g.input("x", 8)
        w = g.weight("w", np.zeros(8, bf16))
        with pytest.raises(CaptureError, match="writes y into w, a graph weight"):
            g(Square(8), x, w)
        with pytest.raises(CaptureError, match="writes y into x, a graph input"):
            g(Square(8), w, x)


def test_duplicate_and_bad_names_are_refused():
    with capture() as g:
        g.input("x", 8)
        with pytest.raises(CaptureError, match="'x' is already declared"):
            g.state("x", 8)
        with pytest.raises(CaptureError, match="without '\\['"):
            g.input("x[0:2]", 8)


def test_per_call_bindings_are_typed_and_carried_by_each_step():
    with capture() as g:
        pos = g.scalar("pos")
        cache = g.state("cache", (16, 8))
        x = g.input("x", 8)
        copy = CopyAt(size=8, rows=16)
        g(copy, x, cache, offset=pos)
        g(copy, x, cache, offset=pos + 1)  # one instance, another value in another step
        assert [s.bindings for s in g.steps] == [{"offset": pos}, {"offset": pos + 1}]
        first, second = g.bindings
        assert (first.step, first.op, first.member, str(first.expression)) == (
            0,
            copy,
            "offset",
            "pos",
        )
        assert (second.step, str(second.expression)) == (1, "pos + 1")
        with pytest.raises(
            TypeError, match=r"CopyAt has no per-call member 'valid' \(per-call members: offset\)"
        ):
            g(CopyAt(size=8, rows=16), x, cache, valid=pos)
        with pytest.raises(CaptureError, match="undeclared scalar"):
            g(CopyAt(size=8, rows=16), x, cache, offset=Expr((("nope", 1),)))
        g(CopyAt(size=8, rows=16), x, cache, offset=3)  # a constant binding
        g(CopyAt(size=8, rows=16), x, cache)  # unbound: the field's value
    assert [s.bindings for s in g.steps[2:]] == [{"offset": Expr((), 3)}, {}]
    assert len(g.bindings) == 3


def test_expressions_are_affine():
    with capture() as g:
        pos, length = g.scalar("pos"), g.scalar("length")
    e = 2 * (pos * 64) + 8 - length + 1
    assert e.evaluate({"pos": 3, "length": 5}) == 2 * 192 + 8 - 5 + 1
    assert str(pos * 2 - pos - pos) == "0"
    with pytest.raises(TypeError, match="scaled by an int"):
        pos * 1.5


def test_composite_records_its_parts():
    with capture() as g:
        x = g.input("x", 16)
        y = g(SquarePlusOne(16), x)
    assert [type(s.op).__name__ for s in g.steps] == ["Square", "Add"]
    assert g.steps[1].reads == (g.steps[0].writes[0], "x") and g.infer_io() == (["x"], [y.name])
