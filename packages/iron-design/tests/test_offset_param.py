"""A runtime parameter added to a shim transfer's offset (mlir-aie's
`offset_parameter`): one design, a window that moves per call."""

import attrs
import ml_dtypes
import numpy as np
import pytest

from iron.core import Device
from iron.design import (
    TAP,
    DesignError,
    Drain,
    Fill,
    OutOfBoundsError,
    Param,
    TransferError,
    examples,
    simulate,
    to_mlir,
)
from iron.design.model import canonical

NPU2 = Device.from_name("npu2")


def windowed(device, n=1024, window=256):
    """The passthrough reading `window` elements of x at `start` into y."""
    design = examples.passthrough(device, n=n, tile=window)
    x, y = design.tensors
    return attrs.evolve(
        design,
        tensors=(x, attrs.evolve(y, shape=(window,))),
        sequence=(
            Fill("in", "x", TAP.linear(window), offset_param="start"),
            Drain("out", "y", TAP.linear(window)),
        ),
        params=("start",),
    )


def test_the_parameter_moves_the_window_per_call():
    design = windowed(NPU2)
    x = np.arange(1024, dtype=np.int32)
    for start in (0, 256, 768):
        y = simulate(design, {"x": x}, {"start": start})["y"]
        assert np.array_equal(y, x[start : start + 256])


def test_a_window_past_the_tensor_is_out_of_bounds():
    with pytest.raises(OutOfBoundsError, match=r"at start=769: .* reaches element 1024"):
        simulate(windowed(NPU2), {"x": np.zeros(1024, np.int32)}, {"start": 769})


def test_an_undeclared_offset_parameter_is_a_design_error():
    with pytest.raises(DesignError, match="parameter 'start', which the design does not declare"):
        attrs.evolve(windowed(NPU2), params=())


def test_the_mlir_names_the_parameter_on_the_bd():
    text = to_mlir(windowed(NPU2))
    assert "aiex.scratchpad_parameter @start : i32" in text
    bd = next(line for line in text.splitlines() if "aie.dma_bd(%arg0" in line)
    assert bd.rstrip().endswith("{offset_parameter = @start}")


def test_an_offset_that_splits_a_word_is_refused():
    """bf16: an odd element offset is half a word, which mlir-aie would round down."""
    design = windowed(NPU2)
    x, y = design.tensors
    bf16 = attrs.evolve(
        design,
        tensors=(attrs.evolve(x, dtype="bf16"), attrs.evolve(y, dtype="bf16")),
        fifos=[attrs.evolve(f, dtype="bf16") for f in design.fifos],
    )
    with pytest.raises(TransferError, match="start=3 elements is 6 B"):
        simulate(bf16, {"x": np.zeros(1024, ml_dtypes.bfloat16)}, {"start": 3})


def test_a_parameter_declares_the_member_it_carries():
    design = windowed(NPU2)
    carried = attrs.evolve(design, params=(Param("start", member="offset"),))
    assert carried.params == ("start",) and carried.member("start") == "offset"
    assert design.member("start") is None  # a name alone: derived by the operator
    assert carried.digest() != design.digest()
    # a design declaring no member keeps the digest it had before members existed
    assert "members" not in canonical(design)


def test_a_member_of_an_undeclared_parameter_is_a_design_error():
    with pytest.raises(DesignError, match=r"member of parameter 'stop', which the design does"):
        attrs.evolve(windowed(NPU2), members=(("stop", "n"),))
