"""The schedule model runs each program as data: C equals the reference
bit for bit, only because the transfers move the right bytes; traffic is
what the transfers moved; broken programs fail by name."""

import attrs
import numpy as np
import pytest

from iron.core import Device
from iron.ops.flm import model
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.model import ScheduleError
from iron.ops.flm.packing import packed_b_size
from iron.ops.flm.schedule import Push

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def inputs(op, seed=0):
    return op.example_inputs(np.random.default_rng(seed))


def same_bits(x, y):
    return x.shape == y.shape and x.tobytes() == y.tobytes()


def model_equals_reference(op, resident=True):
    a, b = inputs(op)
    c, traffic = model.run(op, a, b, program=op.program(resident=resident))
    assert not np.isnan(c.astype(np.float32)).any()
    assert same_bits(c, op.reference(a, b))
    assert traffic == op.program(resident=resident).traffic()
    return traffic


@pytest.mark.parametrize(
    "shape",
    [(512, 1024, 1024), (512, 6144, 1024), (512, 1024, 10240), (256, 512, 1536)],
    ids=["resident", "streamed", "wide-N", "trailing-column-group"],
)
def test_model_equals_reference_bit_for_bit(shape):
    model_equals_reference(FLMGemm(*shape).resolve(NPU2))


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
def test_model_runs_the_epilogue_and_formats(params):
    model_equals_reference(FLMGemm(**params).resolve(NPU2))


@pytest.mark.parametrize(
    "shape",
    [(512, 2560, 640), (512, 3072, 512), (1024, 512, 320)],
    ids=["resident", "streamed", "k512"],
)
def test_model_on_npu1_bf16(shape):
    model_equals_reference(FLMGemm(*shape, b_format="bf16", epilogue="silu").resolve(NPU1))


def test_model_on_a_narrower_array():
    op = FLMGemm(512, 1024, 1280).resolve(Device.from_name("npu2", columns=3))
    assert op.configuration().endswith("_npu2x3")
    model_equals_reference(op)


def test_naive_schedule_also_equals_the_reference():
    traffic = model_equals_reference(FLMGemm(1024, 1024, 1024).resolve(NPU2), resident=False)
    assert traffic.b_read == 4 * packed_b_size(1024, 1024)  # once per unit


LLAMA_1B = [(2048, 2048), (2048, 512), (2048, 8192), (8192, 2048)]  # q/o, k/v, gate/up, down


@pytest.mark.parametrize("M", [256, 2048])
@pytest.mark.parametrize("K, N", LLAMA_1B, ids=["q-o", "k-v", "gate-up", "down"])
def test_llama_shapes(M, K, N):
    model_equals_reference(FLMGemm(M, K, N).resolve(NPU2))


def test_traffic_resident_reads_b_once_per_column_block():
    M, K, N = 1024, 1536, 1024  # 4 units, 3 k-blocks: resident
    op = FLMGemm(M, K, N).resolve(NPU2)
    a, b = inputs(op)
    _, traffic = model.run(op, a, b)
    assert traffic.b_read == packed_b_size(K, N)
    assert traffic.a_read == M * K * 2 * 2  # A once per group of 8 column blocks
    assert traffic.c_written == M * N * 2


def test_traffic_streamed_reads_b_once_per_unit():
    M, K, N = 768, 5120, 512  # 3 units, 10 k-blocks: streamed
    op = FLMGemm(M, K, N).resolve(NPU2)
    a, b = inputs(op)
    _, traffic = model.run(op, a, b)
    assert traffic.b_read == 3 * packed_b_size(K, N)
    assert (traffic.a_read, traffic.c_written) == (M * K * 2, M * N * 2)


def test_traffic_of_two_resident_slabs():
    locks15 = attrs.evolve(NPU2, max_lock_value=15)  # 20 units: slabs of 10
    op = FLMGemm(256 * 20, 1024, 512).resolve(locks15)
    assert [s.units for s in op.program().slabs] == [10, 10]
    assert model_equals_reference(op).b_read == 2 * packed_b_size(1024, 512)


# ---- the model reads the program: corrupt it and C changes --------------------


def run_with(op, edit):
    """Model-run `op` with its program changed by edit(slab) -> slab."""
    program = op.program()
    program = attrs.evolve(program, slabs=[edit(program.slabs[0]), *program.slabs[1:]])
    a, b = inputs(op)
    c, _ = model.run(op, a, b, program=program)
    return c, op.reference(a, b)


def edit_column(slab, index, **changes):
    columns = list(slab.columns)
    columns[index] = attrs.evolve(columns[index], **changes)
    return attrs.evolve(slab, columns=columns)


OP = FLMGemm(512, 1024, 1024).resolve(NPU2)  # resident: 2 units, 2 k-blocks, 8 columns x 2 blocks


def test_a_wrong_b_offset_changes_c():
    def edit(slab):
        b = list(slab.columns[2].b)
        b[0] = attrs.evolve(b[0], offset=b[0].offset + 4096)  # column block 3's k-block 0
        return edit_column(slab, 2, b=b)

    c, reference = run_with(OP, edit)
    assert not same_bits(c, reference)
    assert same_bits(c[:, 64:128], reference[:, 64:128])  # other column blocks untouched


def test_a_wrong_a_offset_changes_c():
    def edit(slab):
        rows = [list(row) for row in slab.a]
        rows[1][0] = attrs.evolve(rows[1][0], offset=0)  # row 1 reads row 0's A
        return attrs.evolve(slab, a=rows)

    c, reference = run_with(OP, edit)
    assert same_bits(c[:64], reference[:64]) and not same_bits(c[64:128], reference[64:128])


def test_a_wrong_c_stride_changes_c():
    def edit(slab):
        out = list(slab.columns[0].c)
        out[0] = attrs.evolve(out[0], strides=(0, 256 * 1024, 512, 1))  # rows land 2 apart
        return edit_column(slab, 0, c=out)

    c, reference = run_with(OP, edit)
    assert np.isnan(c[100:256, :64].astype(np.float32)).any()  # rows never written
    assert not same_bits(c, reference)


def test_a_wrong_slot_in_a_fill_bd_changes_c():
    def edit(slab):
        bds = list(slab.columns[4].fill.bds)
        bds[1] = attrs.evolve(bds[1], offset=0)  # k-block 1 lands on slot 0
        return edit_column(slab, 4, fill=attrs.evolve(slab.columns[4].fill, bds=bds))

    c, reference = run_with(OP, edit)
    assert not same_bits(c[:, 256:320], reference[:, 256:320])


def test_a_wrong_unit_stride_in_a_streamed_b_changes_only_that_unit():
    streamed = FLMGemm(512, 6144, 1024).resolve(NPU2)  # B re-read per unit (stride 0)

    def edit(slab):
        b = list(slab.columns[0].b)
        b[0] = attrs.evolve(b[0], strides=(4096, 4096, 0, 1))  # unit 1 shifted by a k-block
        return edit_column(slab, 0, b=b)

    c, reference = run_with(streamed, edit)
    assert same_bits(c[:256], reference[:256]) and same_bits(c[:, 64:], reference[:, 64:])
    assert not same_bits(c[256:, :64], reference[256:, :64])


# ---- programs the device would hang on or refuse -------------------------------


def fails(op, edit, *fragments):
    with pytest.raises(ScheduleError) as error:
        run_with(op, edit)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_unsatisfiable_acquire_names_slab_column_and_task():
    def edit(slab):
        fill = slab.columns[3].fill
        bds = [attrs.evolve(bd, acquire=attrs.evolve(bd.acquire, value=3)) for bd in fill.bds]
        return edit_column(slab, 3, fill=attrs.evolve(fill, bds=bds))

    fails(
        OP,
        edit,
        "slab 0, column 3",
        "the cores wait for B that is never broadcast",
        "B fill BD for slot 0 (push 0, pass 0) waits for prod[0] >= 3, which holds 2",
    )


def test_lock_value_above_the_device_maximum():
    op = FLMGemm(16128, 512, 1024).resolve(NPU2)  # b_uses 63: the most a lock holds
    program = op.program()
    locks31 = attrs.evolve(NPU2, max_lock_value=31)
    a = np.zeros((16128, 512), "bfloat16")  # the arm fails before any data moves
    with pytest.raises(
        ScheduleError,
        match=r"slab 0, column 0, B arm: sets prod\[0\] to 63, "
        "above the device's max lock value 31",
    ):
        model.run(op, a, np.zeros(((512 * 1024) // 8, 9), np.uint8), locks31, program=program)


def test_a_release_above_the_maximum():
    def edit(slab):
        drain = slab.columns[1].drain
        bds = [attrs.evolve(bd, release=attrs.evolve(bd.release, value=64)) for bd in drain.bds]
        return edit_column(slab, 1, drain=attrs.evolve(drain, bds=bds))

    fails(
        OP,
        edit,
        "slab 0, column 1, B drain: BD for slot 0 raises prod[0] to 64",
        "above the device's max lock value 63",
    )


def test_repeat_count_above_the_maximum():
    def edit(slab):
        drain = attrs.evolve(slab.columns[6].drain, pushes=[Push(0, 257)])
        return edit_column(slab, 6, drain=drain)

    fails(
        OP, edit, "slab 0, column 6, B drain: push 0 repeats 257 passes", "repeat count is 1..256"
    )


def test_queue_deeper_than_the_device_allows():
    def edit(slab):
        drain = attrs.evolve(slab.columns[0].drain, pushes=[Push(0, 1)] * 5)
        return edit_column(slab, 0, drain=drain)

    fails(OP, edit, "slab 0, column 0, B drain: 5 pushes at column block 0 overrun the 4-deep")


def test_out_of_bounds_and_missing_transfers():
    def beyond(slab):
        out = list(slab.columns[7].c)
        out[1] = attrs.evolve(out[1], offset=512 * 1024)
        return edit_column(slab, 7, c=out)

    fails(OP, beyond, "slab 0, column 7, C column block 15: addresses elements 524288..")

    def missing(slab):
        return attrs.evolve(slab, a=[slab.a[0][:1], *slab.a[1:]])

    fails(
        OP,
        missing,
        "slab 0, row 0: the cores' A, block 1 needs 131072 elements; its transfers have 0 left",
    )

    def extra(slab):
        b = list(slab.columns[0].b)
        return edit_column(slab, 0, b=[*b, b[0]])

    fails(OP, extra, "slab 0, column 0", "B column block 0")
