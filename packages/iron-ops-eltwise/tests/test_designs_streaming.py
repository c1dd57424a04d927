"""The streaming designs of the elementwise, activation and dequant operators:
every declared case checked against its device and simulated against the
operator's reference, the simulator shown to run the design (a corrupted
design fails), and the aie2 lookup-table tolerances measured."""

import attrs
import ml_dtypes
import numpy as np
import pytest

from iron.core import Device, OperatorError, compare, registry
from iron.core.cli import main
from iron.design import (
    Call,
    DeadlockError,
    Fill,
    Obj,
    Release,
    SimulationError,
    check,
    design_of,
    simulate,
)
from iron.ops.eltwise import GELU, ElementwiseAdd, Sigmoid, SiLU, Tanh
from iron.ops.eltwise.line_kernels import SHIPPED, binary_kernel, tanh_lut

STREAMING = [
    "ElementwiseAdd",
    "ElementwiseMul",
    "AXPY",
    "ReLU",
    "LeakyReLU",
    "GELU",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Clamp",
    "Dequant",
]
#: the activations whose kernels approximate tanh (aie2: mlir-aie's table)
APPROXIMATED = {"GELU", "SiLU", "Sigmoid", "Tanh"}
DEVICES = ("npu1", "npu2")
CASES = [
    pytest.param(name, index, device, id=f"{name}[{case.label}]-{device}")
    for name in STREAMING
    for index, case in enumerate(registry.get_operator(name).cases)
    for device in DEVICES
]
#: the one declared case a device refuses: 8 columns on npu1's 4
REFUSED = {("AXPY", 1, "npu1")}


def resolved(name: str, index: int, device: str):
    cls = registry.get_operator(name)
    return cls(**cls.cases[index].params).resolve(Device.from_name(device))


def run(op, inputs):
    """Simulate `op`'s design on `inputs` (its read specs, in order); the output."""
    reads = [s.name for s in op.arg_specs() if s.reads]
    (written,) = [s.name for s in op.arg_specs() if s.writes]
    return simulate(design_of(op), dict(zip(reads, inputs)))[written]


@pytest.mark.parametrize(("name", "index", "device"), CASES)
def test_every_case_passes_the_checker_or_is_refused_with_its_rule(name, index, device):
    if (name, index, device) in REFUSED:
        with pytest.raises(OperatorError, match=f"^{name}: num_aie_columns=8: at most the 4 col"):
            resolved(name, index, device)
        return
    report = check(design_of(resolved(name, index, device)))
    assert report.ok, str(report)


@pytest.mark.parametrize(
    ("name", "index", "device"), [c for c in CASES if tuple(c.values) not in REFUSED]
)
def test_simulation_matches_the_reference(name, index, device):
    op = resolved(name, index, device)
    inputs = op.example_inputs(np.random.default_rng(index))
    (expected,) = op.call_reference(*inputs)
    got = run(op, inputs)
    if name in APPROXIMATED:
        verdict = compare(got, expected, op.tolerance(op.device))
        assert verdict, verdict.detail
    else:  # the kernel's arithmetic is the reference's: bit for bit
        assert np.array_equal(got.view(np.uint16), expected.view(np.uint16))


# ---- the simulator runs the design -----------------------------------------------------


@pytest.fixture
def add():
    op = ElementwiseAdd(size=4096, tile_size=1024, num_aie_columns=2).resolve(
        Device.from_name("npu1")
    )
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(4096).astype(ml_dtypes.bfloat16) for _ in range(2))
    (y,) = op.call_reference(a, b)
    design = design_of(op)
    assert np.array_equal(simulate(design, {"a": a, "b": b})["y"], y)
    return design, a, b, y


def _is_kernel(op) -> bool:
    """A call of the line's kernel (not the rounding mode's)."""
    return isinstance(op, Call) and op.kernel.symbol != "iron_set_rounding_conv_even"


def _with_worker_body(design, worker, body):
    workers = tuple(attrs.evolve(w, body=body) if w.name == worker else w for w in design.workers)
    return attrs.evolve(design, workers=workers)


def test_a_fill_reading_the_wrong_block_changes_the_output(add):
    design, a, b, y = add
    sequence = tuple(
        attrs.evolve(s, tap=attrs.evolve(s.tap, offset=0))
        if isinstance(s, Fill) and s.fifo == "a1"
        else s
        for s in design.sequence
    )
    got = simulate(attrs.evolve(design, sequence=sequence), {"a": a, "b": b})["y"]
    assert np.array_equal(got[:2048], y[:2048])
    assert not np.array_equal(got[2048:], y[2048:])


def test_another_kernel_changes_the_output(add):
    design, a, b, y = add
    body = tuple(
        attrs.evolve(op, kernel=binary_kernel("mul", 1024)) if _is_kernel(op) else op
        for op in design.worker("core0").body
    )
    got = simulate(_with_worker_body(design, "core0", body), {"a": a, "b": b})["y"]
    assert not np.array_equal(got[:2048], y[:2048])


def test_a_call_on_the_wrong_object_changes_the_output():
    op = ElementwiseAdd(size=2048, tile_size=1024, num_aie_columns=1).resolve(
        Device.from_name("npu2")
    )
    design = design_of(op)
    a = np.arange(2048).astype(ml_dtypes.bfloat16)
    b = np.zeros(2048, ml_dtypes.bfloat16)
    # the output object passed as the first input: the kernel reads y0, not a0
    body = tuple(
        attrs.evolve(o, args=(Obj("y0"), Obj("b0"), Obj("y0"))) if _is_kernel(o) else o
        for o in design.worker("core0").body
    )
    got = simulate(_with_worker_body(design, "core0", body), {"a": a, "b": b})["y"]
    assert not np.array_equal(got, a)


def test_a_release_left_out_deadlocks(add):
    design, a, b, _ = add
    body = tuple(
        op
        for op in design.worker("core1").body
        if not (isinstance(op, Release) and op.fifo == "y1")
    )
    with pytest.raises(DeadlockError, match="core1"):
        simulate(_with_worker_body(design, "core1", body), {"a": a, "b": b})


def test_one_deep_fifos_give_the_same_output(add):
    """Depth 2 lets the DMA fill the next line while the core computes; the
    result does not depend on it, so the next test breaks a depth for real."""
    design, a, b, y = add
    fifos = tuple(attrs.evolve(f, depth=1) for f in design.fifos)
    assert np.array_equal(simulate(attrs.evolve(design, fifos=fifos), {"a": a, "b": b})["y"], y)


def test_a_shallower_output_fifo_than_the_worker_holds_is_refused(add):
    design, a, b, _ = add
    fifos = tuple(attrs.evolve(f, depth=1) if f.name == "y0" else f for f in design.fifos)
    body = tuple(
        attrs.evolve(op, n=2) if isinstance(op, Release) and op.fifo == "y0" else op
        for op in design.worker("core0").body
    )
    broken = _with_worker_body(attrs.evolve(design, fifos=fifos), "core0", body)
    assert not check(broken).ok
    with pytest.raises(SimulationError):
        simulate(broken, {"a": a, "b": b})


# ---- kernels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "symbol", "source"),
    [
        (ElementwiseAdd(size=2048, tile_size=1024), "eltwise_add_bf16_vector", "aie2/add.cc"),
        (ElementwiseAdd(size=2048, tile_size=256), "iron_add_bf16", SHIPPED.file),
        (GELU(size=2048, tile_size=1024), "gelu_bf16", "aie2/gelu.cc"),
        (GELU(size=2048), "iron_gelu_bf16", "kernels/aie2/activation.cc"),
        (Tanh(size=2048), "iron_tanh_bf16", "kernels/aie2/activation.cc"),
    ],
)
def test_designs_link_the_kernel_their_line_allows(op, symbol, source):
    *_, kernel = design_of(op.resolve(Device.from_name("npu1"))).kernels
    assert (kernel.symbol, kernel.source.file) == (symbol, source)


def test_an_activation_line_that_is_not_whole_kernel_iterations_is_refused():
    with pytest.raises(OperatorError, match=r"^SiLU: tile_size=40: a multiple of 16 \(the"):
        SiLU(size=80, tile_size=40)


# ---- the aie2 lookup table ---------------------------------------------------------------


def every_bf16(limit: float = 2.0**32) -> np.ndarray:
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float64)
    return x[np.isfinite(wide) & (np.abs(wide) <= limit)]


def test_the_tanh_table_is_within_0_0051_of_tanh_on_every_input():
    x = every_bf16()
    error = np.abs(tanh_lut(x).astype(np.float64) - np.tanh(x.astype(np.float64)))
    assert error.max() < 0.0051


def _float64(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        sigmoid = 1 / (1 + np.exp(-x))
        return {
            "Tanh": np.tanh(x),
            "Sigmoid": sigmoid,
            "SiLU": x * sigmoid,
            "GELU": 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        }[name]


def _needed_atol(cls, device: Device, line: int) -> float:
    """The largest |y - exact| - rtol |exact| of the kernel a `line`-element
    line links, over every finite bf16 up to 2^32."""
    x = every_bf16()
    x = np.concatenate([x, np.zeros(-len(x) % 1024, x.dtype)])
    op = cls(size=len(x), tile_size=line, num_aie_columns=1).resolve(device)
    y = simulate(design_of(op), {"x": x})["y"]
    exact = _float64(cls.__name__, x)
    tolerance = op.tolerance(device)
    assert compare(y, exact.astype(np.float32), tolerance)
    return float(np.max(np.abs(y.astype(np.float64) - exact) - tolerance.rtol * np.abs(exact)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [Tanh, Sigmoid, SiLU, GELU], ids=lambda c: c.__name__)
def test_the_tolerance_covers_the_kernels_on_every_input_and_no_more(cls, device):
    """The operator's tolerance holds each kernel model it may run (a
    1024-element line: mlir-aie's silu or gelu, our tanh or sigmoid; a
    256-element line: ours) to the float64 formula over every finite bf16 up
    to 2^32 (aie2: the lookup table; aie2p: the native tanh as float32); its
    atol is within 2x of what the worst input needs (the rtol alone would
    fail)."""
    device = Device.from_name(device)
    needed = [_needed_atol(cls, device, line) for line in (1024, 256)]
    atol = cls(size=1024).tolerance(device).atol
    assert max(needed) <= atol
    assert max(needed) > atol / 2 or atol == 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_iron_design_check_prints_ok_for_every_streaming_case(device, capsys):
    main(["design", "check", "--device", device])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    verdicts = {(r[0], r[1]): r[2] for r in rows if r and r[0] in STREAMING}
    expected = {
        (name, case.label): "refused" if (name, index, device) in REFUSED else "ok"
        for name in STREAMING
        for index, case in enumerate(registry.get_operator(name).cases)
    }
    assert verdicts == expected
