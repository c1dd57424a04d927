"""Bad input to the design entry points: a value that is not a Design is
refused naming the function, instead of an AttributeError from inside; every
number of a design is an int of the range of the MLIR type it becomes,
checked as the value is built, so nothing is built from a size that cannot
be (a float truncated, 2^40 written as an i32, a TAP of 2^40 elements)."""

import numpy as np
import pytest

from iron.core import Device
from iron.core.cli import main
from iron.design import (
    TAP,
    Acquire,
    Call,
    DesignError,
    Endpoint,
    LocalBuffer,
    Loop,
    Obj,
    ObjectFifo,
    Release,
    Scalar,
    SetLock,
    SlotBd,
    Tensor,
    Tile,
    WaitBarrier,
    Worker,
    check,
    core,
    place,
    shim,
    simulate,
)
from iron.design.examples import add_one, add_one_kernel, split_join
from iron.design.mlir import to_mlir
from iron.design.usage import usage


class HasDesign:
    def design(self, device):
        raise AssertionError("not called")


@pytest.mark.parametrize("fn", [place, check, usage, to_mlir], ids=lambda f: f.__name__)
@pytest.mark.parametrize("value", ["npu2", None, 3])
def test_entry_points_refuse_what_is_not_a_design(fn, value):
    name = "place" if fn in (usage, to_mlir) else fn.__name__
    with pytest.raises(TypeError, match=rf"{name}: design must be an iron\.design\.Design, got"):
        fn(value)


def test_an_operator_given_instead_of_its_design_is_told_how():
    with pytest.raises(TypeError, match=r"call the operator's design\(device\)\), got HasDesign"):
        check(HasDesign())
    with pytest.raises(TypeError, match=r"simulate: design must be an iron\.design\.Design"):
        simulate(HasDesign(), {"x": np.zeros(4, np.int32)})


def test_a_real_design_still_passes(npu2):
    assert check(add_one(npu2)).ok


# ---- every number of a design: an int of the range its MLIR type holds -------------------


def _scalar_kernel(dtype: str):
    from iron.design import Kernel, Memref, shipped

    return Kernel("k", (Memref(8, "i32"), Scalar(dtype)), shipped("tests", "k.cc"), add_one_kernel)


@pytest.mark.parametrize(
    "dtype, value, bounds",
    [
        ("i32", 2**40, "-2147483648..2147483647"),
        ("i32", -(2**31) - 1, "-2147483648..2147483647"),
        ("i8", 1024, "-128..127"),
        ("u8", -1, "0..255"),
        ("u16", 2**16, "0..65535"),
    ],
)
def test_a_kernel_scalar_out_of_its_types_range_is_refused_when_called(dtype, value, bounds):
    with pytest.raises(DesignError, match=rf"kernel k argument 1 = {value} is outside {bounds}"):
        Call(_scalar_kernel(dtype), (Obj("in"), value))
    assert Call(_scalar_kernel(dtype), (Obj("in"), int(bounds.split("..")[1]))).args[1]


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: TAP(0.5, (4,), (1,)), r"TAP: offset is an int, got float 0.5"),
        (lambda: TAP("0", (4,), (1,)), r"TAP: offset is an int, got str '0'"),
        (lambda: TAP(0, (4.0,), (1,)), r"TAP: sizes\[0\] is an int, got float 4.0"),
        (lambda: TAP(0, ("4",), (1,)), r"TAP: sizes\[0\] is an int, got str '4'"),
        (lambda: TAP(0, (4,), (True,)), r"TAP: strides\[0\] is an int, got bool True"),
        (lambda: TAP(0, (4,), (2**31,)), r"TAP: strides\[0\] = 2147483648 is outside"),
        (lambda: TAP.linear(2**40), r"TAP: sizes\[0\] = 1099511627776 is outside 1\.\.2147483647"),
        (lambda: Tile(0.0, 1), r"Tile: col is an int, got float"),
        (lambda: Tensor("x", (2**31,), "i32"), r"tensor x: shape\[0\] = 2147483648 is outside"),
        (
            lambda: Tensor("x", (2**16, 2**16), "i32"),
            r"tensor x: shape \(65536, 65536\) holds 4294967296 elements, more than",
        ),
        (lambda: Tensor("x", (4.0,), "i32"), r"tensor x: shape\[0\] is an int, got float"),
        (
            lambda: ObjectFifo("f", 8, "i32", shim(), (core("w"),), depth=2.0),
            r"fifo f: depth is an int, got float",
        ),
        (
            lambda: ObjectFifo("f", 8, "i32", shim(), (core("w"),), depth=True),
            r"fifo f: depth is an int, got bool",
        ),
        (
            lambda: ObjectFifo("f", 8, "i32", shim(), (core("w"),), repeat_count="3"),
            r"repeat_count is an int, got str",
        ),
        (
            lambda: ObjectFifo("f", 8, "i32", shim(), (core("w"),), dims_to_stream=((2, 1.5),)),
            r"dimension 0 stride is an int",
        ),
        (lambda: core("w", depth=0), r"Endpoint: depth = 0 is outside 1\.\."),
        (lambda: Endpoint("core", "w", channel=-1), r"Endpoint: channel = -1 is outside 0\.\."),
        (lambda: Loop(1.5, ()), r"loop count is an int, got float"),
        (
            lambda: Loop(2**63, ()),
            r"loop count = 9223372036854775808 is outside 0\.\.9223372036854775807",
        ),
        (lambda: Acquire("f", True), r"Acquire: n is an int, got bool"),
        (lambda: Release("f", 0), r"Release: n = 0 is outside 1\.\."),
        (lambda: WaitBarrier("b", 2.0), r"WaitBarrier: value is an int, got float"),
        (lambda: Worker("w", (), stack_size=1.5), r"worker w: stack_size is an int, got float"),
        (lambda: Worker("w", (), forever=1), r"worker w: forever is a bool, got int"),
        (
            lambda: LocalBuffer("b", (8,), "i32", initial_value=2**40),
            r"an int in \[-2147483648, 2147483647\]",
        ),
        (lambda: SlotBd(0, 1.0), r"SlotBd: acquire is an int, got float"),
        (lambda: SetLock("l", 0, "1"), r"SetLock: value is an int, got str"),
    ],
)
def test_every_number_of_a_design_is_an_int_of_its_types_range(build, message):
    with pytest.raises(DesignError, match=message):
        build()


def test_a_tap_past_the_shims_iterations_is_refused_before_simulate_allocates(npu1):
    """2^40 elements, each BD of 2^20 within the i32 len, repeated 2^20
    times: refused before any index or buffer of that size exists."""
    import tracemalloc

    import attrs

    from iron.design import Drain, Fill, TransferError, examples

    design = examples.passthrough(npu1, n=4096, tile=1024)
    huge = TAP(0, (2**20, 1, 1, 2**20), (0, 0, 0, 1))
    design = attrs.evolve(design, sequence=(Fill("in", "x", huge), Drain("out", "y")))
    tracemalloc.start()
    try:
        with pytest.raises(
            TransferError, match=r"repeats its BD 1048576 times; a shim BD iterates at most 64"
        ):
            simulate(design, {"x": np.zeros(4096, np.int32)})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # a TAP of 2^40 int64 indices would be 8 TiB


def test_more_split_join_workers_than_cores_are_refused_before_building(capsys, monkeypatch):
    """The example refuses a worker count the device cannot place before it
    builds a fifo or a worker (a million of each took minutes)."""
    import iron.design.examples as examples

    def no_building(*args, **kwargs):
        raise AssertionError("a fifo was built")

    monkeypatch.setattr(examples, "ObjectFifo", no_building)
    assert main(["design", "example", "split_join", "workers=1000000"]) == 2
    assert (
        "split_join: workers (one per core tile) = 1000000 is outside 1..32"
        in capsys.readouterr().err
    )
    with pytest.raises(DesignError, match=r"split_join: n is an int, got float"):
        split_join(Device.from_name("npu1"), n=4096.0)
