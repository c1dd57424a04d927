"""The row operators' designs (RMSNorm, LayerNorm, Softmax, RoPE): each
declared case fits npu1 and npu2; the simulator, running the design with the
models of mlir-aie's kernels, comes within the operator's tolerance of its
reference and of an independent float64 formula; the weight and the angle
table are read from DDR the way the operators promise."""

import attrs
import numpy as np
import pytest

from iron.core import Device, OperatorError, bf16, compare
from iron.design import (
    TAP,
    Call,
    Fill,
    Loop,
    Obj,
    Param,
    check,
    design_of,
    simulate,
    to_mlir,
)
from iron.design.testing import filecheck
from iron.ops.eltwise import LayerNorm, RMSNorm, RoPE, Softmax, angle_table
from iron.ops.eltwise.rows import softmax_model

ROWS = (RMSNorm, LayerNorm, Softmax, RoPE)
CASES = [
    pytest.param(cls, case, device, id=f"{cls.__name__}-{case.label}-{device}")
    for cls in ROWS
    for case in cls.cases
    for device in ("npu1", "npu2")
]


def resolved(cls, case, device):
    return cls(**case.params).resolve(Device.from_name(device))


def inputs(op, seed=0):
    """Unit-normal bf16 rows; RoPE's angles are a real table of random positions."""
    rng = np.random.default_rng(seed)
    given = {}
    for spec in op.arg_specs():
        if not spec.reads:
            continue
        if spec.name == "angles":
            positions = rng.integers(0, 4096, spec.shape[0])
            given["angles"] = angle_table(positions, spec.shape[1], 500000.0).astype(bf16)
        else:
            given[spec.name] = rng.standard_normal(spec.shape).astype(bf16)
    return given


def run_design(op, given, design=None, valid=None):
    params = {"valid": valid or op.cols} if isinstance(op, Softmax) else None
    return simulate(design or design_of(op), given, params)["y"]


def reference(op, given, valid=None):
    per_call = {"valid": valid} if isinstance(op, Softmax) else {}
    return op.reference(*given.values(), **per_call)


def float64_formula(op, given):
    """The operators' definitions in float64, written here, apart from the code under test."""
    x = given["x"].astype(np.float64)
    if isinstance(op, RMSNorm):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + op.eps)
        return y * given["weight"].astype(np.float64) if op.weighted else y
    if isinstance(op, LayerNorm):
        centred = x - x.mean(axis=-1, keepdims=True)
        return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + op.eps)
    if isinstance(op, Softmax):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    angles = np.repeat(given["angles"].astype(np.float64), op.rows // op.angle_rows, axis=0)
    y = np.empty_like(x)
    half = op.cols // 2
    for i in range(half):
        c, s = angles[:, 2 * i], angles[:, 2 * i + 1]
        a, b = (i, i + half) if op.method == "two_halves" else (2 * i, 2 * i + 1)
        y[:, a], y[:, b] = x[:, a] * c - x[:, b] * s, x[:, b] * c + x[:, a] * s
    return y


@pytest.mark.parametrize("cls, case, device", CASES)
def test_the_design_fits_the_device(cls, case, device):
    report = check(design_of(resolved(cls, case, device)))
    assert report.ok, "\n".join(map(str, report.violations))


@pytest.mark.parametrize("cls, case, device", CASES)
def test_the_simulated_design_is_within_tolerance_of_the_reference(cls, case, device):
    op = resolved(cls, case, device)
    given = inputs(op)
    verdict = compare(run_design(op, given), reference(op, given), op.tolerance())
    assert verdict, verdict.detail


@pytest.mark.parametrize("cls, case, device", CASES)
def test_the_tolerance_covers_the_kernels_against_float64(cls, case, device):
    op = resolved(cls, case, device)
    for seed in (1, 2):
        given = inputs(op, seed)
        verdict = compare(run_design(op, given), float64_formula(op, given), op.tolerance())
        assert verdict, verdict.detail


# ---- what each design reads, and which kernels it links --------------------------------


def test_rms_norm_reads_its_weight_once_for_every_core_and_row():
    op = resolved(RMSNorm, RMSNorm.cases[2], "npu2")  # 16 rows over 4 cores
    design = design_of(op)
    run = simulate(design, inputs(op))
    assert run.traffic.tensors["weight"].read == op.tile_size * 2  # bytes read: one bf16 row
    assert len(design.fifo("w").consumers) == op.num_aie_columns * op.num_channels


def test_rope_reads_each_angle_row_once_for_its_consecutive_rows():
    op = resolved(RoPE, RoPE.cases[0], "npu1")  # 8 angle rows, 4 rows each
    run = simulate(design_of(op), inputs(op))
    assert run.traffic.tensors["angles"].read == op.angle_rows * op.cols * 2


def test_rope_pairs_each_angle_row_with_the_rows_it_serves():
    """Angle row r rotates rows 4r..4r+3: with every angle row but one set to
    the identity (cos 1, sin 0), only that row's four rows move."""
    op = RoPE(rows=32, cols=64, angle_rows=8, num_aie_columns=4).resolve(Device.from_name("npu2"))
    given = inputs(op)
    identity = np.tile(np.array([1, 0], bf16), 32)
    given["angles"] = np.tile(identity, (8, 1))
    given["angles"][5] = angle_table(np.array([1000]), 64, 10000.0)[0].astype(bf16)
    y = run_design(op, given)
    moved = np.flatnonzero((y != given["x"]).any(axis=1))
    assert list(moved) == [20, 21, 22, 23]


@pytest.mark.parametrize(
    "op, device, symbols",
    [
        (RMSNorm(size=1024, tile_size=256), "npu1",
         [("iron_rms_norm_bf16", "kernels/norm.cc", 3)]),
        (RMSNorm(size=4096, tile_size=2048, weighted=True), "npu2",
         [("rms_norm", "aie2p/rms_norm.cc", 3),
          ("iron_mul_bf16", "kernels/eltwise.cc", 4)]),
        (LayerNorm(rows=4, cols=256), "npu1",
         [("iron_layer_norm_bf16", "kernels/norm.cc", 3)]),
        (LayerNorm(rows=4, cols=256), "npu2", [("layer_norm", "aie2p/layer_norm.cc", 3)]),
        (Softmax(rows=4, cols=64), "npu1",
         [("iron_mask_tail_bf16", "kernels/rows.cc", 3), ("softmax_bf16", "aie2/softmax.cc", 3)]),
        (RoPE(rows=4, cols=64), "npu2", [("iron_rope_two_halves_bf16", "kernels/rope.cc", 4)]),
        (RoPE(rows=4, cols=64, method="interleaved"), "npu1",
         [("iron_rope_interleaved_bf16", "kernels/rope.cc", 4)]),
    ],
)  # fmt: skip
def test_each_design_links_the_kernel_of_its_generation(op, device, symbols):
    dev = Device.from_name(device)
    kernels = design_of(op.resolve(dev)).kernels
    found = [(k.symbol, k.source.path_for(dev.arch), len(k.args)) for k in kernels]
    assert found == [("iron_set_rounding_conv_even", "kernels/rows.cc", 0), *symbols]


# ---- Softmax's per-call valid is a runtime parameter ---------------------------------------


def test_softmax_valid_is_a_runtime_parameter_of_one_design():
    """One design serves every valid, whole vectors or not (a decode step's
    context length is any count): columns past it come out +0."""
    op = resolved(Softmax, Softmax.cases[1], "npu2")  # 2048 columns
    design = design_of(op)
    assert design.params == ("valid",)
    given = inputs(op)
    for valid in (1, 14, 32, 1000, 2048):
        y = run_design(op, given, design, valid=valid)
        verdict = compare(y, reference(op, given, valid=valid), op.tolerance())
        assert verdict, f"valid={valid}: {verdict.detail}"
        assert (y[:, valid:].view(np.uint16) == 0).all()


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_softmax_masks_the_columns_past_valid_before_its_kernel(device):
    """softmax_bf16 runs over the whole row after the mask: without the mask
    the columns past `valid` would take part in the sum."""
    op = resolved(Softmax, Softmax.cases[0], device)
    design = design_of(op)
    for worker in design.workers:
        calls = [(c.kernel.symbol, c.args) for c in worker.calls()]
        x = next(f.name for f in design.fifos if f.consumers[0].name == worker.name)
        assert [symbol for symbol, _ in calls] == [
            "iron_set_rounding_conv_even", "iron_mask_tail_bf16", "softmax_bf16"
        ]  # fmt: skip
        assert calls[1][1] == (Obj(x), Param("valid"), 64) and calls[2][1][2] == 64
    given = inputs(op)
    unmasked = attrs.evolve(
        design,
        workers=tuple(
            attrs.evolve(w, body=_without_symbol(w.body, "iron_mask_tail_bf16"))
            for w in design.workers
        ),
    )
    y = run_design(op, given, design, valid=14)
    assert compare(y, reference(op, given, valid=14), op.tolerance())
    assert not compare(
        run_design(op, given, unmasked, valid=14), reference(op, given, valid=14), op.tolerance()
    )


def _without_symbol(body, symbol):
    out = []
    for statement in body:
        if isinstance(statement, Call) and statement.kernel.symbol == symbol:
            continue
        if hasattr(statement, "body"):
            statement = attrs.evolve(statement, body=_without_symbol(statement.body, symbol))
        out.append(statement)
    return tuple(out)


def test_softmax_kernel_model_refuses_a_partial_vector():
    """mlir-aie's softmax_bf16 walks whole vectors: its model refuses less,
    which is why the design masks instead of passing `valid` as the length."""
    x = np.ones(64, bf16)
    with pytest.raises(ValueError, match="whole 16-element vectors; valid=40"):
        softmax_model("aie2", x, np.empty_like(x), 40)


# ---- corrupting a transfer or the kernel call changes the output ---------------------


def with_first_fill(design, fifo, change):
    sequence = [
        attrs.evolve(s, tap=change(s.tap)) if isinstance(s, Fill) and s.fifo == fifo else s
        for s in design.sequence
    ]
    return attrs.evolve(design, sequence=tuple(sequence))


def interleaved(tap: TAP) -> TAP:
    ((count,), _) = tap.sizes, tap.strides
    return TAP(tap.offset, (2, count // 2), (1, 2))


def with_call_length(design, length):
    """Every kernel call's first scalar (the row length) set to `length`."""

    def edit(body):
        out = []
        for op in body:
            if isinstance(op, Loop):
                op = attrs.evolve(op, body=edit(op.body))
            elif isinstance(op, Call) and any(isinstance(a, (int, Param)) for a in op.args):
                args = list(op.args)
                first = next(i for i, a in enumerate(args) if isinstance(a, (int, Param)))
                args[first] = length
                op = attrs.evolve(op, args=tuple(args))
            out.append(op)
        return tuple(out)

    workers = tuple(attrs.evolve(w, body=edit(w.body)) for w in design.workers)
    return attrs.evolve(design, workers=workers)


@pytest.mark.parametrize("cls", ROWS)
def test_a_changed_fill_changes_the_output(cls):
    op = resolved(cls, cls.cases[0], "npu2")
    given = inputs(op)
    y = run_design(op, given, with_first_fill(design_of(op), "x0", interleaved))
    assert not compare(y, reference(op, given), op.tolerance())


@pytest.mark.parametrize("cls", ROWS)
def test_a_changed_kernel_call_changes_the_output(cls):
    op = resolved(cls, cls.cases[0], "npu1")
    given = inputs(op)
    half_row = (op.tile_size if cls is RMSNorm else op.cols) // 2
    y = run_design(op, given, with_call_length(design_of(op), half_row))
    assert not compare(y, reference(op, given), op.tolerance())


# ---- what the kernels cannot do, refused by name ---------------------------------------------


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("cls, params", [(RMSNorm, {"size": 1024, "tile_size": 256}),
                                         (LayerNorm, {"rows": 4, "cols": 256})])  # fmt: skip
def test_another_eps_links_our_norm_compiled_for_it(cls, params, device):
    """Gemma's 1e-6: our kernel's object built with that eps (mlir-aie's
    norms compile in 1e-5) on both generations, and the simulated design
    follows it: rows of tiny values, where eps is most of the mean square,
    come out within tolerance of the float64 formula at 1e-6 and far from
    the design at 1e-5."""
    op = cls(**params, eps=1e-6).resolve(Device.from_name(device))
    design = design_of(op)
    (norm,) = [k for k in design.kernels if "norm" in k.symbol]
    assert norm.symbol.startswith("iron_") and norm.source.file == "kernels/norm.cc"
    assert norm.source.defines == ("IRON_NORM_EPS=1e-06f",)
    given = {"x": (np.random.default_rng(3).standard_normal(op.arg_specs()[0].shape) * 1e-3)
             .astype(bf16)}  # fmt: skip
    got = run_design(op, given, design)
    assert compare(got, float64_formula(op, given), op.tolerance())
    at_default = run_design(op, given, design_of(attrs.evolve(op, eps=1e-5)))
    assert not compare(at_default, got, op.tolerance())


@pytest.mark.parametrize(
    ("device", "kernel"), [("npu1", "iron_layer_norm_bf16"), ("npu2", "layer_norm")]
)
def test_layer_norm_design_refuses_a_row_of_partial_vectors(device, kernel):
    design_of(LayerNorm(rows=4, cols=48).resolve(Device.from_name(device)))  # three vectors
    with pytest.raises(
        OperatorError, match=f"LayerNorm: cols=40: a multiple of 16 \\({kernel} walks"
    ):
        design_of(LayerNorm(rows=4, cols=40).resolve(Device.from_name(device)))


# ---- the MLIR of one row operator --------------------------------------------------------

WEIGHTED_RMS_NORM_CHECKS = r"""
CHECK:      aie.device(npu2) @main {
CHECK-DAG:  %[[SHIM:.+]] = aie.tile(0, 0)
CHECK-DAG:  %[[MEM:.+]] = aie.tile(0, 1)
CHECK-DAG:  %[[CORE0:.+]] = aie.tile(0, 2)
CHECK-DAG:  %[[CORE1:.+]] = aie.tile(1, 2)
CHECK:      aie.objectfifo @weight_in(%[[SHIM]], {%[[MEM]]}, 1 : i32) : !aie.objectfifo<memref<2048xbf16>>
CHECK-NEXT: aie.objectfifo @w(%[[MEM]], {%[[CORE0]], %[[CORE1]]}, 1 : i32) : !aie.objectfifo<memref<2048xbf16>>
CHECK:      aie.objectfifo.link [@weight_in] -> [@w]([] [])
CHECK:      func.func private @iron_set_rounding_conv_even() attributes {link_with = "iron_set_rounding_conv_even.o"}
CHECK-NEXT: func.func private @rms_norm(memref<2048xbf16>, memref<2048xbf16>, i32) attributes {link_with = "rms_norm.o"}
CHECK-NEXT: func.func private @iron_mul_bf16(memref<2048xbf16>, memref<2048xbf16>, memref<2048xbf16>, i32) attributes {link_with = "iron_mul_bf16.o"}
CHECK:      %[[NORMED:.+]] = aie.buffer(%[[CORE0]]) {sym_name = "core0_normed"} : memref<2048xbf16>
CHECK:      aie.core(%[[CORE0]]) {
CHECK:      %[[W:.+]] = aie.objectfifo.acquire @w(Consume, 1)
CHECK:      scf.for
CHECK:      %[[X:.+]] = aie.objectfifo.acquire @x0(Consume, 1)
CHECK-NEXT: %[[Y:.+]] = aie.objectfifo.acquire @y0(Produce, 1)
CHECK-NEXT: func.call @iron_set_rounding_conv_even() : () -> ()
CHECK-NEXT: %[[XV:.+]] = aie.objectfifo.subview.access %[[X]][0]
CHECK-NEXT: func.call @rms_norm(%[[XV]], %[[NORMED]], %{{.+}})
CHECK-NEXT: %[[WV:.+]] = aie.objectfifo.subview.access %[[W]][0]
CHECK-NEXT: %[[YV:.+]] = aie.objectfifo.subview.access %[[Y]][0]
CHECK-NEXT: func.call @iron_mul_bf16(%[[NORMED]], %[[WV]], %[[YV]], %{{.+}})
CHECK-NEXT: aie.objectfifo.release @x0(Consume, 1)
CHECK-NEXT: aie.objectfifo.release @y0(Produce, 1)
CHECK-NEXT: }
CHECK-NEXT: aie.objectfifo.release @w(Consume, 1)
CHECK:      aie.runtime_sequence @sequence(%[[XT:.+]]: memref<2x2048xbf16>, %[[WT:.+]]: memref<2048xbf16>, %[[YT:.+]]: memref<2x2048xbf16>) {
CHECK:      aiex.dma_configure_task_for @weight_in {
CHECK-NEXT: aie.dma_bd(%[[WT]] : memref<2048xbf16> offset = 0 len = 2048
CHECK:      aiex.dma_configure_task_for @x1 {
CHECK-NEXT: aie.dma_bd(%[[XT]] : memref<2x2048xbf16> offset = 2048 len = 2048
CHECK:      aiex.dma_configure_task_for @y1 {
CHECK-NEXT: aie.dma_bd(%[[YT]] : memref<2x2048xbf16> offset = 2048 len = 2048
CHECK:      } {issue_token = true}
"""


WEIGHTED = RMSNorm(size=4096, tile_size=2048, weighted=True, num_aie_columns=2)


def test_weighted_rms_norm_mlir_broadcasts_the_weight_and_chains_two_kernels(tmp_path):
    design = design_of(WEIGHTED.resolve(Device.from_name("npu2")))
    code, output = filecheck(to_mlir(design), WEIGHTED_RMS_NORM_CHECKS, tmp_path)
    assert code == 0, output


def test_the_rms_norm_checks_notice_a_weight_read_per_row(tmp_path):
    """The same design with the weight acquired inside the row loop."""
    design = design_of(WEIGHTED.resolve(Device.from_name("npu2")))
    worker = design.worker("core0")
    acquire, loop, release = worker.body
    inner = attrs.evolve(loop, body=(acquire, *loop.body, release))
    per_row = attrs.evolve(
        design, workers=(attrs.evolve(worker, body=(inner,)), *design.workers[1:])
    )
    assert filecheck(to_mlir(per_row), WEIGHTED_RMS_NORM_CHECKS, tmp_path)[0] != 0


# ---- beyond the declared cases: every design fits, or is refused by name ----------------

WIDTHS = (2, 32, 4096, 4160, 8064, 8192)
SWEEP = [
    *(RMSNorm(size=2 * t, tile_size=t, weighted=w) for t in WIDTHS for w in (False, True)),
    *(LayerNorm(rows=2, cols=c) for c in WIDTHS),
    *(Softmax(rows=2, cols=c, num_channels=2) for c in WIDTHS),
    *(RoPE(rows=4, cols=c, angle_rows=a) for c in WIDTHS if c % 32 == 0 for a in (1, 2)),
]


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", SWEEP, ids=repr)
def test_a_design_fits_and_runs_or_is_refused_by_name(op, device):
    resolved_op = op.resolve(Device.from_name(device))
    try:
        design = design_of(resolved_op)
    except OperatorError as refusal:
        assert str(refusal).startswith(f"{type(op).__name__}: "), refusal
        return
    report = check(design)
    assert report.ok, "\n".join(map(str, report.violations))
    given = inputs(resolved_op)
    verdict = compare(run_design(resolved_op, given, design), reference(resolved_op, given),
                      resolved_op.tolerance())  # fmt: skip
    assert verdict, verdict.detail


def test_a_weighted_row_that_leaves_no_room_is_refused():
    op = RMSNorm(size=8192, tile_size=8192, weighted=True).resolve(Device.from_name("npu2"))
    with pytest.raises(
        OperatorError, match=r"RMSNorm: tile_size=8192: 4 rows of 8192 bf16 and the"
    ):
        design_of(op)


@pytest.mark.parametrize("case", RoPE.cases, ids=lambda c: c.label)
def test_rope_design_rounds_once_as_its_reference_does(case):
    """rope.cc keeps each rotated sum in a float32 accumulator and the design
    sets conv_even, so the device output is the reference's, bit for bit."""
    op = RoPE(**case.params).resolve(Device.from_name("npu2"))
    given = inputs(op, seed=5)
    y = run_design(op, given)
    assert (y.view(np.uint16) == reference(op, given).view(np.uint16)).all()


# ---- the whole array: the per-device table's shapes at their default columns -----------

FULL_ARRAY = [
    RMSNorm(size=336 * 256, tile_size=256, weighted=True),
    RMSNorm(size=336 * 256, tile_size=256, weighted=True, num_channels=2),
    RoPE(rows=256, cols=64),
    RoPE(rows=256, cols=64, num_channels=2),
    LayerNorm(rows=256, cols=2048, num_channels=2),
    Softmax(rows=64, cols=2048, num_channels=2),
]


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", FULL_ARRAY, ids=repr)
def test_a_design_on_every_column_fits(op, device):
    report = check(design_of(op.resolve(Device.from_name(device))))
    assert report.ok, "\n".join(map(str, report.violations))


@pytest.mark.slow
@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("op", FULL_ARRAY, ids=repr)
def test_a_design_on_every_column_runs_within_tolerance(op, device):
    op = op.resolve(Device.from_name(device))
    given = inputs(op, seed=7)
    verdict = compare(run_design(op, given), reference(op, given), op.tolerance())
    assert verdict, verdict.detail
