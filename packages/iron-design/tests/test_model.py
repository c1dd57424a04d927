import pickle
import subprocess
import sys

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iron.core import Device
from iron.core.spec import IN, OUT
from iron.design.examples import EXAMPLES, add_one, add_one_kernel, split_join
from iron.design.model import (
    TAP,
    Acquire,
    Call,
    Design,
    DesignError,
    Drain,
    Fill,
    Finish,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Tensor,
    Worker,
    canonical,
    core,
    element_type,
    join,
    link_lanes,
    memtile,
    shim,
    shipped,
    split,
)


@given(
    offset=st.integers(0, 50),
    dims=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 40)), min_size=1, max_size=4),
)
def test_tap_indices_visit_in_nested_loop_order(offset, dims):
    tap = TAP(offset, [s for s, _ in dims], [t for _, t in dims])
    expected = [offset]
    for size, stride in dims:  # each dimension nests inside the ones before it
        expected = [base + i * stride for base in expected for i in range(size)]
    assert tap.indices().tolist() == expected
    assert tap.count == len(expected)


def test_tap_padding_keeps_the_visit_order():
    tap = TAP(3, (4, 2), (1, 8))
    padded = tap.padded()
    assert (padded.sizes, padded.strides) == ((1, 1, 4, 2), (0, 0, 1, 8))
    assert padded.indices().tolist() == tap.indices().tolist()


@given(
    offset=st.integers(-50, 50),
    dims=st.lists(st.tuples(st.integers(1, 5), st.integers(-40, 40)), min_size=1, max_size=4),
)
def test_a_padded_tap_is_the_tap_its_fields_make(offset, dims):
    tap = TAP.of_dims(dims, offset)
    padded = tap.padded()
    extra = 4 - len(dims)
    again = TAP(offset, (1,) * extra + tap.sizes, (0,) * extra + tap.strides)
    assert padded == again and hash(padded) == hash(again)
    assert pickle.loads(pickle.dumps(padded)) == again
    assert padded.padded() == padded


def test_a_tap_of_numpy_integers_holds_ints():
    tap = TAP(np.int64(3), (np.int32(4), 2), np.array([1, 8]))
    assert (tap.offset, tap.sizes, tap.strides) == (3, (4, 2), (1, 8))
    assert {type(v) for v in (tap.offset, *tap.sizes, *tap.strides)} == {int}


def test_padding_past_four_dimensions_is_refused():
    with pytest.raises(DesignError, match="1 to 4 dimensions"):
        TAP(0, (4,), (1,)).padded(5)


@pytest.mark.parametrize(
    "sizes, strides, message",
    [
        ((1, 2, 3, 4, 5), (1, 1, 1, 1, 1), "1 to 4 dimensions"),
        ((2, 2), (1,), "as many sizes as strides"),
        ((0, 4), (4, 1), r"TAP: sizes\[0\] = 0 is outside 1\.\."),
    ],
)
def test_malformed_taps_are_refused(sizes, strides, message):
    with pytest.raises(DesignError, match=message):
        TAP(0, sizes, strides)


def test_element_types_accept_numpy_dtypes():
    assert element_type(np.int32).name == "i32"
    assert element_type(np.dtype("uint8")).name == "u8"
    assert element_type("bf16").nbytes == 2
    assert element_type("bfp16ebs8").nbytes == 9 and element_type("bfp16ebs8").values == 8
    with pytest.raises(DesignError, match="unsupported element type 'float64'"):
        element_type("float64")


@pytest.mark.parametrize(
    ("dtype", "value", "message"),
    [
        (
            "i8",
            128,
            r"local buffer acc: initial_value must be an int in \[-128, 127\] for i8, got 128",
        ),
        ("u8", -1, r"must be an int in \[0, 255\] for u8, got -1"),
        ("i32", 0.5, r"must be an int in .* for i32, got 0.5"),
        ("bf16", 3.4e38, r"must be a finite bf16 \(\|value\| <= 3.39e\+38\), got 3.4e\+38"),
        ("f32", float("inf"), "must be a finite f32 .*, got inf"),
        ("f32", float("nan"), "must be a finite f32 .*, got nan"),
        ("i32", True, "is an int or a float, got True"),
        ("i32", "0", "is an int or a float, got '0'"),
        ("bfp16ebs8", 0, "bfp16ebs8 holds blocks, not values to fill with"),
    ],
)
def test_initial_values_the_buffer_cannot_hold_are_refused(dtype, value, message):
    with pytest.raises(DesignError, match=message):
        LocalBuffer("acc", 8, dtype, initial_value=value)
    assert LocalBuffer("acc", 8, dtype).initial_value is None


def test_initial_values_at_the_edge_of_the_type_are_kept():
    assert LocalBuffer("acc", 8, "i8", initial_value=-128).initial_value == -128
    assert LocalBuffer("acc", 8, "u8", initial_value=255).initial_value == 255
    assert LocalBuffer("acc", 8, "bf16", initial_value=3.0e38).initial_value == 3.0e38


def test_designs_are_values(npu1):
    design = split_join(npu1)
    again = split_join(npu1)
    assert design == again and hash(design) == hash(again)
    assert pickle.loads(pickle.dumps(design)) == design
    assert design.digest() == again.digest()
    deeper = attrs.evolve(design, fifos=(attrs.evolve(design.fifos[0], depth=3), *design.fifos[1:]))
    assert deeper.digest() != design.digest()
    wider = attrs.evolve(design, device=Device.from_name("npu1", columns=2))
    assert wider.digest() != design.digest()


def test_digest_is_equal_across_processes(npu1):
    code = (
        "from iron.core import Device\n"
        "from iron.design.examples import EXAMPLES\n"
        "d = Device.from_name('npu1')\n"
        "print(' '.join(f(d).digest() for f in EXAMPLES.values()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [f(npu1).digest() for f in EXAMPLES.values()]


def test_kernel_models_must_have_stable_names():
    with pytest.raises(DesignError, match="module-level function"):
        Kernel("k", (Memref(4, "i32"),), shipped("p", "k.cc"), lambda x: None)


def test_kernels_are_listed_once_in_call_order(npu1):
    design = split_join(npu1, workers=3)
    assert design.kernels == (add_one_kernel(256),)


def _tiny(device, **changes) -> Design:
    base = dict(
        name="tiny",
        device=device,
        tensors=(Tensor("x", 8, "i32", IN), Tensor("y", 8, "i32", OUT)),
        fifos=(
            ObjectFifo("in", 8, "i32", shim(), (core("w"),)),
            ObjectFifo("out", 8, "i32", core("w"), (shim(),)),
        ),
        workers=(
            Worker(
                "w",
                (
                    Acquire("in"),
                    Acquire("out"),
                    Call(add_one_kernel(8), (Obj("in"), Obj("out"), 8)),
                    Release("in"),
                    Release("out"),
                ),
            ),
        ),
        sequence=(Fill("in", "x"), Drain("out", "y")),
    )
    return Design(**{**base, **changes})


def test_the_tiny_design_is_well_formed(npu1):
    assert _tiny(npu1).fifo("in").role_of("core", "w") == "consume"


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"fifos": (ObjectFifo("in", 8, "i32", shim(), (core("v"),)),)},
            "fifo in names worker 'v', which the design does not have",
        ),
        (
            {"fifos": (ObjectFifo("in", 8, "i32", shim(), (memtile("m"),)),)},
            "fifo in names link 'm', which the design does not have",
        ),
        (
            {"workers": (Worker("w", (Acquire("nowhere"),)),)},
            "worker w: acquires unknown fifo 'nowhere'",
        ),
        (
            {"sequence": (Fill("out", "x"),)},
            "fills fifo out, whose producer is not the runtime",
        ),
        (
            {"sequence": (Drain("in", "y"),)},
            "drains fifo in, which has no runtime consumer",
        ),
        (
            {"tensors": (Tensor("x", 8, "bf16", IN), Tensor("y", 8, "i32", OUT))},
            "fills i32 fifo in with bf16 tensor x",
        ),
        (
            {"tensors": (Tensor("x", 8, "i32"), Tensor("x", 8, "i32"))},
            "tensor names repeat: x",
        ),
        (
            {"workers": (Worker("w", (Loop(Param("n"), (Acquire("in"),)),)),)},
            "uses parameter 'n', which the design does not declare",
        ),
    ],
)
def test_malformed_designs_name_what_is_wrong(npu1, changes, message):
    with pytest.raises(DesignError, match=message):
        _tiny(npu1, **changes)


def _with_other_worker(body) -> dict:
    """Changes to the tiny design: a second worker v with a fifo of its own,
    and worker w running `body` then its usual one."""
    w = _tiny(Device.from_name("npu1")).worker("w")
    return {
        "fifos": (
            ObjectFifo("in", 8, "i32", shim(), (core("w"),)),
            ObjectFifo("out", 8, "i32", core("w"), (shim(),)),
            ObjectFifo("other", 8, "i32", shim(), (core("v"),)),
        ),
        "workers": (
            Worker("w", (*body, *w.body)),
            Worker("v", (Acquire("other"), Release("other"))),
        ),
    }


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            _with_other_worker([Acquire("other")]),
            r"worker w: uses fifo other, which does not list core\('w'\) as its producer",
        ),
        (
            _with_other_worker([Call(add_one_kernel(8), (Obj("other"), Obj("out"), 8))]),
            "worker w: calls add_one_i32 on fifo 'other', which it does not use",
        ),
        (
            {"sequence": (Fill("in", "x"), Drain("out", "y"), Fill("in", "x"), Drain("in", "y"))},
            r"sequence\[3\]: drains fifo in, which has no runtime consumer",
        ),
        (
            {"sequence": (Fill("in", "x"), Finish(), Fill("in", "x"), Fill("in", "z"))},
            r"sequence\[3\]: fills unknown tensor 'z'",
        ),
        (
            {"sequence": (Fill("in", "x"), Fill("in", "x", offset_param="at"))},
            r"sequence\[1\]: uses parameter 'at', which the design does not declare",
        ),
    ],
)
def test_a_fault_after_sound_uses_of_the_same_names_is_found(npu1, changes, message):
    """Statements and bodies repeat names; each use is judged, not only the first."""
    with pytest.raises(DesignError, match=message):
        _tiny(npu1, **changes)


def test_a_fifo_naming_a_link_that_does_not_list_it_is_refused(npu1):
    design = split_join(npu1, tile=256, workers=4)
    short = split("scatter", "in", ["in0", "in1", "in2"], [0, 256, 512])
    with pytest.raises(DesignError, match="link scatter: fifo in3 names the link, which does not"):
        attrs.evolve(design, links=(short, design.links[1]))
    swapped = split("scatter", "in0", ["in", "in1", "in2", "in3"], [0, 256, 512, 768])
    with pytest.raises(DesignError, match=r"source fifo in0 must list memtile\('scatter'\)"):
        attrs.evolve(design, links=(swapped, design.links[1]))


@pytest.mark.parametrize(
    "args, message",
    [
        ((Obj("in"), Obj("out")), "kernel add_one_i32 takes 3 arguments, called with 2"),
        (
            (Obj("in"), 5, 8),
            r"argument 1 is a buffer \(memref<8xi32>\): an acquired object \(Obj\) or a core "
            r"buffer \(Buf\), got 5",
        ),
        (
            (Obj("in"), Obj("out"), 3.5),
            r"argument 2 is a scalar \(i32\): an int or a Param, got 3.5",
        ),
        (
            (Obj("in"), Obj("out"), True),
            r"argument 2 is a scalar \(i32\): an int or a Param, got True",
        ),
        ((Obj("in"), Obj("out"), Obj("in")), r"argument 2 is a scalar \(i32\)"),
    ],
)
def test_a_call_that_does_not_fit_its_kernel_is_refused_when_built(args, message):
    """The argument count and kinds are the call's own: checked once, where
    the call is built, so check, the emitter and the simulator never meet them."""
    with pytest.raises(DesignError, match=message):
        Call(add_one_kernel(8), args)


@pytest.mark.parametrize(
    "offsets, lane, offset, span",
    [
        ([0, 256, 512, 800], "in2", 512, 288),  # a span that is not whole objects
        ([0, 256, 512, 1024], "in3", 1024, 0),  # the last lane starts past the object
        ([0, 128, 384, 768], "in0", 0, 128),  # an overlap: a span shorter than an object
        ([256, 0, 512, 768], "in0", 256, -256),  # offsets that fall
    ],
)
def test_each_lane_spans_whole_objects_up_to_the_next_offset(npu1, offsets, lane, offset, span):
    design = split_join(npu1, tile=256, workers=4)
    bad = split("scatter", "in", [f"in{i}" for i in range(4)], offsets)
    with pytest.raises(
        DesignError,
        match=rf"link scatter: fifo {lane} at offset {offset} spans {span} elements up to the "
        r"next offset .* not a whole number of its 256-element objects",
    ):
        attrs.evolve(design, links=(bad, design.links[1]))


def test_a_lane_may_span_several_objects(npu1):
    """mlir-aie moves each lane from its offset to the next, so a gap after
    a lane's object is more objects of that lane (`link_lanes`)."""
    design = split_join(npu1, tile=256, workers=2)
    gapped = split("scatter", "in", ["in0", "in1"], [0, 256])
    assert link_lanes(design, gapped) == (("in0", 0, 256), ("in1", 256, 256))
    design = split_join(npu1, n=4096, tile=256, workers=2)
    fifos = [attrs.evolve(f, shape=(1024,)) if f.name in ("in", "out") else f for f in design.fifos]
    wide = attrs.evolve(design, fifos=tuple(fifos), links=(
        split("scatter", "in", ["in0", "in1"], [0, 512]),
        join("gather", ["out0", "out1"], "out", [0, 512]),
    ))  # fmt: skip
    assert link_lanes(wide, wide.links[0]) == (("in0", 0, 512), ("in1", 512, 512))


def test_add_one_uses_the_runtime_at_both_ends(npu1):
    design = add_one(npu1)
    assert design.fifo("in").producer.kind == "shim"
    assert design.fifo("out").consumer("shim") is not None
    assert [type(t).__name__ for t in design.tasks()] == ["Fill", "Drain"]
    assert set(EXAMPLES) == {"passthrough", "add_one", "repeat", "transpose", "split_join"}


def test_canonical_text_does_not_depend_on_sharing():
    """A value met twice in one walk is written as where met once."""
    kernel = add_one_kernel(8)
    twin = add_one_kernel(8)
    assert kernel is not twin
    shared = canonical((Call(kernel, (Obj("in"), Obj("out"), 8)), kernel))
    apart = canonical((Call(twin, (Obj("in"), Obj("out"), 8)), add_one_kernel(8)))
    assert shared == apart
    assert shared.count("Kernel(symbol='add_one_i32'") == 2


@pytest.mark.parametrize("value", [{"a": 1}, object(), (1, [2, {3}])])
def test_values_without_stable_text_are_refused(value):
    with pytest.raises(TypeError, match="no stable text for"):
        canonical(value)


def test_a_design_derived_from_a_sound_one_is_judged_again(npu1):
    """`attrs.evolve` shares the values it keeps; what it changes is judged."""
    design = _tiny(npu1)
    again = attrs.evolve(design, sequence=(Fill("in", "x"), Finish(), Drain("out", "y")))
    assert again.fifos is design.fifos and again.sequence[1] == Finish()
    with pytest.raises(DesignError, match=r"sequence\[0\]: drains fifo in, which has no runtime"):
        attrs.evolve(design, sequence=(Drain("in", "y"),))
    with pytest.raises(DesignError, match="tensor names repeat: x"):
        attrs.evolve(design, tensors=(Tensor("x", 8, "i32"), Tensor("x", 8, "i32")))
    with pytest.raises(DesignError, match="worker w: acquires unknown fifo 'nowhere'"):
        attrs.evolve(design, workers=(Worker("w", (Acquire("nowhere"),)),))


def _made(offset, sizes, strides):
    try:
        return TAP(offset, sizes, strides)
    except DesignError as error:
        return str(error)


@given(
    offset=st.integers(-(2**32), 2**32),
    dims=st.lists(
        st.tuples(st.integers(-2, 2**31 + 1), st.integers(-(2**31) - 1, 2**31)), max_size=5
    ),
)
def test_a_tap_of_ints_is_the_tap_of_their_numpy_and_list_forms(offset, dims):
    """Exact ints take a shorter path than numpy integers and lists do: the
    same TAP, or the same refusal."""
    sizes, strides = tuple(s for s, _ in dims), tuple(t for _, t in dims)
    plain = _made(offset, sizes, strides)
    numpy = _made(np.int64(offset), [np.int64(s) for s in sizes], list(strides))
    assert plain == numpy
    if isinstance(plain, TAP):
        assert all(type(v) is int for v in (plain.offset, *plain.sizes, *plain.strides))
