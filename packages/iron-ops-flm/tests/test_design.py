"""FLMGemm's iron-design design: every case fits its device (or is refused
by rule), one image serves every shape, the simulator's C is the
reference's within the operator's tolerance, the simulator's byte counters
show B read once where it is resident, and a corrupted transfer or a pool
program the device would reject fails by name."""

import attrs
import numpy as np
import pytest

from iron.core import Device, OperatorError, compare
from iron.design import (
    TAP,
    CoverageError,
    DeadlockError,
    Fill,
    PoolTask,
    SetLock,
    SimulationError,
    check,
    design_of,
    simulate,
)
from iron.design.lower import lower, lower_stream
from iron.design.model import canonical
from iron.ops.flm import design as flm_design
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.packing import packed_b_size

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def inputs(op, seed=0):
    return op.example_inputs(np.random.default_rng(seed))


def simulated(op, program=None, seed=0):
    """(C, traffic, reference) of one simulated call on example inputs."""
    a, b = inputs(op, seed)
    run = flm_design.run(op, a, b, program)
    return run["C"], run.traffic, op.reference(a, b), (a, b)


def within_tolerance(op, program=None):
    c, traffic, reference, data = simulated(op, program)
    verdict = compare(c, reference, op.tolerance(inputs=data))
    assert verdict.passed, verdict.detail
    return traffic


# ---- every case on both devices -------------------------------------------------------


@pytest.mark.parametrize("device", [NPU1, NPU2], ids=["npu1", "npu2"])
@pytest.mark.parametrize("case", FLMGemm.cases, ids=lambda case: case.label)
def test_every_case_fits_or_is_refused_by_rule(case, device):
    try:
        op = FLMGemm(**case.params).resolve(device)
    except OperatorError as refusal:
        assert str(refusal).startswith("FLMGemm: b_format='bfp16': bfp16 needs block-float")
        assert device is NPU1
        return
    report = check(design_of(op))
    assert report.ok, str(report)


def test_npu1_runs_every_bf16_case():
    bf16 = [c for c in FLMGemm.cases if c.params.get("b_format") == "bf16"]
    assert bf16 and all(check(design_of(FLMGemm(**c.params).resolve(NPU1))).ok for c in bf16)


def test_one_image_serves_every_shape():
    shapes = [(256, 1024, 512), (512, 2048, 1536), (1024, 6144, 640)]
    designs = [
        design_of(FLMGemm(**dict(zip("MKN", shape)), epilogue="silu").resolve(NPU2))
        for shape in shapes
    ]
    # kernel models compare by their stable names, as a design's digest does
    image = {canonical((d.name, d.fifos, d.links, d.workers, d.params)) for d in designs}
    assert len(image) == 1  # only the tensors and the runtime sequence differ
    assert len({d.sequence for d in designs}) == 3


@pytest.mark.parametrize(
    "device, params, slots",
    [
        (NPU2, dict(M=256, K=1024, N=512), 8),  # tile_n 64: capped at 8
        (NPU2, dict(M=256, K=512, N=1024), 3),  # tile_n 128
        (NPU1, dict(M=256, K=1024, N=512, b_format="bf16"), 5),  # fills the overlay's memtile
    ],
    ids=["npu2-tn64", "npu2-tn128", "npu1-bf16"],
)
def test_each_column_pool_has_the_overlays_slot_count(device, params, slots):
    design = design_of(FLMGemm(**params).resolve(device))
    for c in range(device.columns):
        link = design.link(f"pool{c}")
        assert link.programmed and link.tile.col == c
        (end,) = design.fifo(f"B{c}_in").consumers
        assert end.depth == slots


@pytest.mark.parametrize(
    "M, slabs", [(16128, [63]), (16384, [32, 32])], ids=["63-units", "64-units"]
)
def test_residency_up_to_the_lock_maximum_fits_the_device(M, slabs):
    op = FLMGemm(M=M, K=512, N=1024).resolve(NPU2)
    assert [s.units for s in op.program().slabs] == slabs
    design = design_of(op)
    assert {s.value for s in design.sequence if isinstance(s, SetLock)} == set(slabs)
    assert check(design).ok


def test_per_shape_values_are_runtime_parameters():
    op = FLMGemm(M=768, K=1536, N=1280, epilogue="gelu", clamp=(-1.0, 2.0)).resolve(NPU2)
    params = flm_design.runtime_params(op)
    assert set(params) == set(design_of(op).params)
    # 3 units, 3 k-blocks, 20 column blocks of 64 over 8 columns: 3, 3, 2, ...
    assert (params["k_iters"], params["units_big"], params["slabs_big"]) == (3, 3, 1)
    assert params["slabs_small"] == 0 and params["epilogue"] == 1
    assert [params[f"work_{c}"] for c in range(8)] == [3, 3, 3, 3, 2, 2, 2, 2]
    assert [params[f"idle_{c}"] for c in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert np.array([params["clamp_lo"], params["clamp_hi"]], np.int32).view(
        np.float32
    ).tolist() == [
        -1.0,
        2.0,
    ]


def test_b_moves_in_bfp16ebs8_blocks_never_bytes():
    op = FLMGemm(M=256, K=1024, N=512).resolve(NPU2)
    design = design_of(op)
    assert (design.tensor("B").dtype, design.tensor("B").shape) == ("bfp16ebs8", (1024 * 512 // 8,))
    assert design.tensor("B").nbytes == packed_b_size(1024, 512)
    assert {design.fifo(f"B{c}_in").dtype for c in range(8)} == {"bfp16ebs8"}
    # the pool's slot is one k-block of one column block: 512 x 64 / 8 blocks
    assert design.fifo("B0_in").shape == (4096,)
    # counting the transfers in bytes (9 per block) instead: B overruns or starves
    in_bytes = [
        attrs.evolve(s, tap=attrs.evolve(s.tap, sizes=(*s.tap.sizes[:3], s.tap.sizes[3] * 9)))
        if isinstance(s, Fill) and s.tensor == "B"
        else s
        for s in design.sequence
    ]
    a, b = inputs(op)
    with pytest.raises(SimulationError):
        simulate(
            attrs.evolve(design, sequence=in_bytes),
            {"A": a, "B": flm_design.b_blocks(b, op.b_format)},
            flm_design.runtime_params(op),
        )


# ---- the simulator against the reference ----------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [(512, 1024, 1024), (512, 5120, 512), (256, 512, 1536)],
    ids=["resident", "streamed", "trailing-column-group"],
)
def test_simulation_matches_the_reference(shape):
    within_tolerance(FLMGemm(**dict(zip("MKN", shape))).resolve(NPU2))


@pytest.mark.parametrize(
    "params",
    [
        dict(M=512, K=1536, N=640, epilogue="silu", clamp=(-2.0, 2.0)),
        dict(M=256, K=1024, N=1024, epilogue="gelu", rounding="floor"),
        dict(M=768, K=512, N=1024, epilogue="sigmoid"),
        dict(M=512, K=1024, N=384, b_format="bf16"),
    ],
    ids=["silu-clamp", "gelu-floor", "sigmoid-k512", "bf16"],
)
def test_simulation_runs_the_epilogues_and_formats(params):
    within_tolerance(FLMGemm(**params).resolve(NPU2))


@pytest.mark.parametrize(
    "shape",
    [(512, 2560, 640), (512, 3072, 512), (1024, 512, 320)],
    ids=["resident", "streamed", "k512"],
)
def test_simulation_on_npu1_bf16(shape):
    within_tolerance(
        FLMGemm(**dict(zip("MKN", shape)), b_format="bf16", epilogue="silu").resolve(NPU1)
    )


def test_simulation_of_a_llama_1b_projection():
    within_tolerance(FLMGemm(M=256, K=2048, N=512).resolve(NPU2))  # k/v at M = 256


def test_simulation_on_a_narrower_array():
    op = FLMGemm(M=512, K=1024, N=640).resolve(Device.from_name("npu2", columns=4))
    assert op.configuration().endswith("_npu2x4") and check(design_of(op)).ok
    within_tolerance(op)


# ---- M per call: one capacity, the rows past M zeroed by the cores ----------------------------

CAPACITY = FLMGemm(K=512, N=1024, max_M=768, epilogue="sigmoid").resolve(NPU2)


def test_one_image_serves_every_m_of_a_capacity():
    designs = [design_of(CAPACITY.at(m)) for m in (256, 512, 768)]
    image = {canonical((d.name, d.fifos, d.links, d.workers, d.params, d.tensors)) for d in designs}
    assert len(image) == 1  # the same tensors too: A and C hold max_M rows
    assert len({d.sequence for d in designs}) == 3
    # what dispatch runs per M over the image: the design's sequence at M
    assert [CAPACITY.sequence(M=m) for m in (256, 512, 768)] == [d.sequence for d in designs]
    assert [CAPACITY.runtime_params(M=m)["zeros_0"] for m in (256, 512, 768)] == [32, 16, 0]


@pytest.mark.parametrize("M", [256, 512, 768])
def test_rows_past_m_are_exactly_the_references_zeros(M):
    """Rows below M within tolerance; rows M.. bit for bit the reference's
    zeros (not the epilogue of 0: sigmoid(0) is 0.5)."""
    op = CAPACITY.at(M)
    c, traffic, reference, data = simulated(op)
    assert compare(c[:M], reference[:M], op.tolerance(inputs=data)).passed
    assert np.array_equal(c[M:].view(np.uint16), reference[M:].view(np.uint16))
    assert not np.any(c[M:].view(np.uint16))
    assert traffic.tensors["A"].read == M * 512 * 2  # A's rows past M stay in DDR
    assert traffic.tensors["C"].written == 768 * 1024 * 2


def ones_model(c) -> None:
    """A zero kernel gone wrong: ones."""
    c[:] = 1


def test_a_wrong_zeroing_fails():
    """The zero rows as the design makes them, corrupted three ways: a
    zero count one short deadlocks the call; no zero drains leave rows
    never written; a zero kernel writing anything else changes C."""
    op = CAPACITY.at(256)
    a, b = inputs(op)
    tensors = {"A": a, "B": flm_design.b_blocks(b, op.b_format)}
    design, params = flm_design.build(op), flm_design.runtime_params(op)
    short = {**params, "zeros_3": params["zeros_3"] - 1}
    with pytest.raises(DeadlockError, match="finish of group zero0"):
        simulate(design, tensors, short)
    kept = tuple(s for s in design.sequence if not str(getattr(s, "group", "")).startswith("zero"))
    none = {k: 0 if k.startswith("zeros_") else v for k, v in params.items()}
    with pytest.raises(CoverageError, match=r"never written \(first C\[256, 0\]\)"):
        simulate(attrs.evolve(design, sequence=kept), tensors, none)
    good = flm_design.run(op, a, b)["C"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flm_design, "zero_model", ones_model)
        bad = flm_design.run(op, a, b)["C"]
    assert np.array_equal(bad[:256].view(np.uint16), good[:256].view(np.uint16))
    assert not np.array_equal(bad[256:].view(np.uint16), good[256:].view(np.uint16))


# ---- DDR traffic, from the simulator's byte counters -----------------------------------------


def test_resident_b_is_read_once():
    M, K, N = 1024, 1536, 1024  # 4 units, 3 k-blocks: resident
    op = FLMGemm(M=M, K=K, N=N).resolve(NPU2)
    traffic = within_tolerance(op)
    assert traffic.tensors["B"].read == packed_b_size(K, N)
    assert traffic.tensors["A"].read == 2 * M * K * 2  # once per group of 8 column blocks
    assert traffic.tensors["C"].written == M * N * 2


def test_streamed_b_is_read_once_per_unit():
    M, K, N = 768, 5120, 512  # 3 units, 10 k-blocks > 8 slots
    op = FLMGemm(M=M, K=K, N=N).resolve(NPU2)
    assert not op.program().slabs[0].resident
    traffic = within_tolerance(op)
    assert traffic.tensors["B"].read == 3 * packed_b_size(K, N)


def test_the_naive_schedule_reads_b_once_per_unit():
    op = FLMGemm(M=1024, K=1024, N=512).resolve(NPU2)
    traffic = within_tolerance(op, op.program(resident=False))
    assert traffic.tensors["B"].read == 4 * packed_b_size(1024, 512)


def test_two_resident_slabs_read_b_twice():
    locks3 = attrs.evolve(NPU2, max_lock_value=3)  # 6 units: two slabs of 3
    op = FLMGemm(M=256 * 6, K=1024, N=512).resolve(locks3)
    assert [(s.units, s.resident) for s in op.program().slabs] == [(3, True), (3, True)]
    assert check(design_of(op)).ok
    assert within_tolerance(op).tensors["B"].read == 2 * packed_b_size(1024, 512)


def test_uneven_slabs_run_from_two_slab_classes():
    locks2 = attrs.evolve(NPU1, max_lock_value=2)  # 5 units: 2, 2, 1
    op = FLMGemm(M=256 * 5, K=1024, N=256, b_format="bf16").resolve(locks2)
    assert [s.units for s in op.program().slabs] == [2, 2, 1]
    params = flm_design.runtime_params(op)
    assert [params[k] for k in ("slabs_big", "units_big", "slabs_small", "units_small")] == [
        2,
        2,
        1,
        1,
    ]
    assert within_tolerance(op).tensors["B"].read == 3 * packed_b_size(1024, 256, "bf16")


# ---- the simulator reads the program: corrupt it and C changes -----------------------------

OP = FLMGemm(M=512, K=1024, N=1024).resolve(
    NPU2
)  # resident: 2 units, 2 k-blocks, 8 columns x 2 blocks


def with_statement(op, pick, change):
    """`op`'s design with the first statement `pick` accepts changed."""
    design = design_of(op)
    sequence = list(design.sequence)
    index = next(i for i, s in enumerate(sequence) if pick(s))
    sequence[index] = change(sequence[index])
    return attrs.evolve(design, sequence=sequence)


def run_design(op, design):
    a, b = inputs(op)
    tensors = {"A": a, "B": flm_design.b_blocks(b, op.b_format)}
    return simulate(design, tensors, flm_design.runtime_params(op))["C"]


def fill_of(fifo):
    return lambda s: isinstance(s, Fill) and s.fifo == fifo


def moved(**changes):
    """A change of a transfer's access pattern."""
    return lambda s: attrs.evolve(s, tap=attrs.evolve(s.tap, **changes))


@pytest.fixture(scope="module")
def clean():
    return run_design(OP, design_of(OP))


def same_bits(x, y):
    return x.tobytes() == y.tobytes()


def test_a_wrong_b_offset_changes_only_that_column_block(clean):
    # column 2's first block reads column block 3's B
    design = with_statement(OP, fill_of("B2_in"), moved(offset=3 * 8192))
    c = run_design(OP, design)
    assert not same_bits(c[:, 128:192], clean[:, 128:192])
    assert same_bits(c[:, :128], clean[:, :128]) and same_bits(c[:, 192:], clean[:, 192:])


def test_a_wrong_a_offset_changes_only_that_row_of_cores(clean):
    design = with_statement(OP, fill_of("A1"), moved(offset=0))
    c = run_design(OP, design)
    assert same_bits(c[:64, :512], clean[:64, :512])
    assert not same_bits(c[64:128, :512], clean[64:128, :512])  # row 1 computed on row 0's A
    assert same_bits(c[:, 512:], clean[:, 512:])  # the second block's A is untouched


def test_a_wrong_a_stride_changes_c(clean):
    design = with_statement(OP, fill_of("A2"), moved(strides=(256 * 1024, 512, 512, 1)))
    c = run_design(OP, design)
    assert not same_bits(c[128:192, :512], clean[128:192, :512])


def test_a_wrong_unit_stride_in_a_streamed_b_changes_only_that_unit():
    op = FLMGemm(M=512, K=5120, N=512).resolve(NPU2)  # B re-read per unit (iteration stride 0)
    clean = run_design(op, design_of(op))
    change = moved(strides=(4096, 0, 0, 1))  # unit 1 starts a k-block later
    c = run_design(op, with_statement(op, fill_of("B0_in"), change))
    assert same_bits(c[:256], clean[:256]) and same_bits(c[:, 64:], clean[:, 64:])
    assert not same_bits(c[256:, :64], clean[256:, :64])


def test_a_wrong_slot_order_in_a_pool_fill_changes_that_column(clean):
    def reverse(task):  # k-block 0 lands in slot 1 and k-block 1 in slot 0
        return attrs.evolve(task, bds=task.bds[::-1])

    def fill_of_pool4(s):
        return isinstance(s, PoolTask) and s.link == "pool4" and s.fill

    c = run_design(OP, with_statement(OP, fill_of_pool4, reverse))
    for block in (4, 12):  # column 4's blocks
        columns = slice(64 * block, 64 * block + 64)
        assert not same_bits(c[:, columns], clean[:, columns])
    assert same_bits(c[:, :256], clean[:, :256])


def test_a_wrong_c_stride_writes_c_twice():
    design = with_statement(
        OP,
        lambda s: getattr(s, "fifo", "") == "C0",
        moved(strides=(8 * 1024, 64 * 1024, 512, 1)),
    )
    with pytest.raises(
        CoverageError, match="out tensor C of 524288 elements is written exactly once"
    ):
        run_design(OP, design)


# ---- pool programs the device would hang on or refuse ----------------------------------


def test_an_arm_below_the_units_hangs_the_pool_by_name():
    design = with_statement(
        OP,
        lambda s: isinstance(s, SetLock) and s.link == "pool3" and s.slot == 1,
        lambda s: attrs.evolve(s, value=1),
    )
    with pytest.raises(DeadlockError) as error:
        run_design(OP, design)
    assert "fill of link pool3" in str(error.value)
    assert "its BD on slot 1 waits on the producer slot 1 lock of fifo B3_in" in str(error.value)
    assert "for 2 (it has 1)" in str(error.value)


def test_the_checker_refuses_lock_values_and_repeat_counts_beyond_the_device():
    design = with_statement(
        OP,
        lambda s: isinstance(s, SetLock) and s.link == "pool0",
        lambda s: attrs.evolve(s, value=64),
    )
    assert "slot 0 value 64 outside 0..63" in str(check(design))
    design = with_statement(
        OP,
        lambda s: isinstance(s, PoolTask) and not s.fill,
        lambda s: attrs.evolve(s, repeat_count=257),
    )
    assert "(drain of link pool0): repeat_count 257 outside 1..256" in str(check(design))


def test_the_checker_counts_pushes_against_the_task_queue():
    design = design_of(OP)
    first = next(i for i, s in enumerate(design.sequence) if isinstance(s, PoolTask) and not s.fill)
    extra = [design.sequence[first]] * 4
    crowded = attrs.evolve(
        design, sequence=(*design.sequence[:first], *extra, *design.sequence[first:])
    )
    assert "tasks queued on the channel 5 > 4" in str(check(crowded))


def test_b_fill_taps_are_blocks_of_the_column_block():
    design = design_of(OP)
    fills = [s for s in design.sequence if isinstance(s, Fill) and s.fifo == "B5_in"]
    # column 5 works on column blocks 5 and 13; each is 64 x 1024 / 8 blocks
    assert [s.tap for s in fills] == [
        TAP(5 * 8192, (1, 1, 1, 8192), (0, 0, 0, 1)),
        TAP(13 * 8192, (1, 1, 1, 8192), (0, 0, 0, 1)),
    ]


def test_the_counters_equal_the_transfers_patterns():
    op = FLMGemm(M=256, K=512, N=1024).resolve(NPU2)
    a, b = inputs(op)
    run = flm_design.run(op, a, b)
    measured = {name: m.read + m.written for name, m in run.traffic.tensors.items()}
    assert measured == flm_design.transfer_bytes(run.design)
    assert measured == {"A": 256 * 512 * 2, "B": 512 * 1024 // 8 * 9, "C": 256 * 1024 * 2}


@pytest.mark.parametrize(
    "shape, other",
    [((512, 512, 1024), (256, 512, 1536)), ((4096, 2048, 512), (256, 8192, 2048)),
     ((1024, 6144, 1536), (16384, 2048, 512))],
)  # fmt: skip
def test_a_stream_lowered_against_another_shapes_configuration_is_its_own(shape, other):
    """Shapes whose configuration is named alike make one configuration,
    so the runtime sequence of `shape` lowered against the configuration
    of `other` is the one a whole lowering of `shape` gives: what
    iron-dispatch caches per M."""
    op, base_op = (FLMGemm(M=m, K=k, N=n).resolve(NPU2) for m, k, n in (shape, other))
    assert op.configuration() == base_op.configuration()
    base, design = lower(design_of(base_op)), design_of(op)
    whole = lower(design)
    assert whole.configuration.digest() == base.configuration.digest()
    streamed = lower_stream(base, design)
    assert streamed.runtime == whole.runtime
    assert streamed.design.sequence == design.sequence
