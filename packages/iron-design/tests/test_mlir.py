"""The emitter against FileCheck patterns written from mlir-aie's documented
syntax (the op descriptions in AIEOps.td / AIEX.td and the dialect's own
FileCheck tests at the pin), never from our output. Each pattern set is
shown to fail on a design or a text that differs where it matters."""

import attrs
import pytest

from iron.core import Device
from iron.core.spec import IN, OUT
from iron.design.check import check
from iron.design.examples import (
    EXAMPLES,
    add_one,
    add_one_kernel,
    add_one_model,
    passthrough,
    split_join,
)
from iron.design.mlir import kernel_objects, to_mlir
from iron.design.model import (
    TAP,
    Acquire,
    Buf,
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
    Scalar,
    SetBarrier,
    Tensor,
    Tile,
    WaitBarrier,
    Worker,
    core,
    forward,
    memtile,
    shim,
    shipped,
)
from iron.design.place import place
from iron.design.testing import filecheck

V = "[a-z0-9_.]+"  # an SSA name, captured without its %


def assert_matches(text: str, checks: str, tmp_path) -> None:
    code, output = filecheck(text, checks, tmp_path)
    assert code == 0, f"{output}\n--- emitted:\n{text}"


def assert_differs(text: str, checks: str, tmp_path) -> None:
    assert filecheck(text, checks, tmp_path)[0] != 0, "the checks did not notice"


def task(name: str, fifo: str, tensor: str, bd: str, attributes: str = "") -> str:
    """A shim DMA task as aiex documents dma_configure_task_for, started at once."""
    end = f"}} {attributes}" if attributes else "{{^ *}$}}"  # a bare brace: no attributes
    return f"""
CHECK-NEXT: %[[{name}:{V}]] = aiex.dma_configure_task_for @{fifo} {{
CHECK-NEXT:   aie.dma_bd(%[[{tensor}]] : {bd})
CHECK-NEXT:   aie.end
CHECK-NEXT: {end}
CHECK-NEXT: aiex.dma_start_task(%[[{name}]])"""


def linear_io(n: int) -> str:
    """The sequence that fills `in` from x and drains `out` into y, n int32s each."""
    whole = f"memref<{n}xi32> offset = 0 len = {n} sizes = [1, 1, 1, {n}] strides = [0, 0, 0, 1]"
    return f"""
CHECK:      aie.runtime_sequence @sequence(%[[X:{V}]]: memref<{n}xi32>, %[[Y:{V}]]: memref<{n}xi32>) {{
CHECK-NEXT: aiex.npu.load_pdi {{device_ref = @main}}
{task("FILL", "in", "X", whole)}
{task("DRAIN", "out", "Y", whole, "{issue_token = true}")}
CHECK-NEXT: aiex.dma_await_task(%[[DRAIN]])
CHECK-NEXT: aiex.dma_free_task(%[[FILL]])
CHECK-NEXT: aiex.dma_free_task(%[[DRAIN]])
CHECK-NEXT: }}
CHECK-NEXT: }}
CHECK-NEXT: }}
"""


SHIM_AND_MEMTILE = f"""
CHECK:      module {{
CHECK-NEXT: aie.device(DEVICE) @main {{
CHECK-DAG:  %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG:  %[[MEM:{V}]] = aie.tile(0, 1)
"""

PASSTHROUGH = (
    SHIM_AND_MEMTILE
    + """
CHECK:      aie.objectfifo @in(%[[SHIM]], {%[[MEM]]}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo @out(%[[MEM]], {%[[SHIM]]}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo.link [@in] -> [@out]([] [])
CHECK-NOT:  aie.core
"""
    + linear_io(4096)
)

REPEAT = (
    SHIM_AND_MEMTILE
    + f"""
CHECK:      aie.objectfifo @in(%[[SHIM]], {{%[[MEM]]}}, 1 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo @out(%[[MEM]], {{%[[SHIM]]}}, 1 : i32) {{repeat_count = 4 : i32}} : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo.link [@in] -> [@out]([] [])
CHECK:      aie.runtime_sequence @sequence(%[[X:{V}]]: memref<1024xi32>, %[[Y:{V}]]: memref<4096xi32>) {{
CHECK-NEXT: aiex.npu.load_pdi {{device_ref = @main}}
{task("FILL", "in", "X", "memref<1024xi32> offset = 0 len = 1024 sizes = [1, 1, 1, 1024] strides = [0, 0, 0, 1]")}
{task("DRAIN", "out", "Y", "memref<4096xi32> offset = 0 len = 4096 sizes = [1, 1, 1, 4096] strides = [0, 0, 0, 1]", "{issue_token = true}")}
"""
)

# x is 64 x 32: the fill walks its 32 columns (stride 1), each down its 64 rows (stride 32)
TRANSPOSE = (
    SHIM_AND_MEMTILE
    + f"""
CHECK:      aie.objectfifo @in(%[[SHIM]], {{%[[MEM]]}}, 2 : i32) : !aie.objectfifo<memref<64xi32>>
CHECK-NEXT: aie.objectfifo @out(%[[MEM]], {{%[[SHIM]]}}, 2 : i32) : !aie.objectfifo<memref<64xi32>>
CHECK-NEXT: aie.objectfifo.link [@in] -> [@out]([] [])
CHECK:      aie.runtime_sequence @sequence(%[[X:{V}]]: memref<64x32xi32>, %[[Y:{V}]]: memref<32x64xi32>) {{
CHECK-NEXT: aiex.npu.load_pdi {{device_ref = @main}}
{task("FILL", "in", "X", "memref<64x32xi32> offset = 0 len = 2048 sizes = [1, 1, 32, 64] strides = [0, 0, 1, 32]")}
{task("DRAIN", "out", "Y", "memref<32x64xi32> offset = 0 len = 2048 sizes = [1, 1, 1, 2048] strides = [0, 0, 0, 1]", "{issue_token = true}")}
"""
)


def adder_core(tile: str, source: str, sink: str, n: int) -> str:
    """The add-one worker: a forever scf.for around acquire, access, call, release."""
    line = f"memref<{n}xi32>"
    view = f"!aie.objectfifosubview<{line}>"
    return f"""
CHECK:      %{{{{{V}}}}} = aie.core(%[[{tile}]]) {{
CHECK-DAG:  %[[FOREVER:{V}]] = arith.constant 9223372036854775807 : index
CHECK-DAG:  %[[N:{V}]] = arith.constant {n} : i32
CHECK:      scf.for %{{{{{V}}}}} = %{{{{{V}}}}} to %[[FOREVER]] step %{{{{{V}}}}} {{
CHECK-NEXT: %[[IN:{V}]] = aie.objectfifo.acquire @{source}(Consume, 1) : {view}
CHECK-NEXT: %[[OUT:{V}]] = aie.objectfifo.acquire @{sink}(Produce, 1) : {view}
CHECK-NEXT: %[[A:{V}]] = aie.objectfifo.subview.access %[[IN]][0] : {view} -> {line}
CHECK-NEXT: %[[B:{V}]] = aie.objectfifo.subview.access %[[OUT]][0] : {view} -> {line}
CHECK-NEXT: func.call @add_one_i32(%[[A]], %[[B]], %[[N]]) : ({line}, {line}, i32) -> ()
CHECK-NEXT: aie.objectfifo.release @{source}(Consume, 1)
CHECK-NEXT: aie.objectfifo.release @{sink}(Produce, 1)
CHECK-NEXT: }}
CHECK-NEXT: aie.end
CHECK-NEXT: }} {{stack_size = 1024 : i32}}
"""


ADD_ONE = (
    f"""
CHECK:      module {{
CHECK-NEXT: aie.device(DEVICE) @main {{
CHECK-DAG:  %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG:  %[[CORE:{V}]] = aie.tile(0, 2)
CHECK:      aie.objectfifo @in(%[[SHIM]], {{%[[CORE]]}}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo @out(%[[CORE]], {{%[[SHIM]]}}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: func.func private @add_one_i32(memref<1024xi32>, memref<1024xi32>, i32) attributes {{link_with = "add_one_i32.o"}}
"""
    + adder_core("CORE", "in", "out", 1024)
    + linear_io(4096)
)


def split_join_checks(lanes: int = 4, tile: int = 256) -> str:
    checks = SHIM_AND_MEMTILE + "".join(
        f"CHECK-DAG: %[[C{i}:{V}]] = aie.tile(0, {2 + i})\n" for i in range(lanes)
    )
    big = f"memref<{lanes * tile}xi32>"
    checks += f"""
CHECK:      aie.objectfifo @in(%[[SHIM]], {{%[[MEM]]}}, 2 : i32) : !aie.objectfifo<{big}>
CHECK-NEXT: aie.objectfifo @out(%[[MEM]], {{%[[SHIM]]}}, 2 : i32) : !aie.objectfifo<{big}>
"""
    for i in range(lanes):
        checks += f"""
CHECK-NEXT: aie.objectfifo @in{i}(%[[MEM]], {{%[[C{i}]]}}, 2 : i32) : !aie.objectfifo<memref<{tile}xi32>>
CHECK-NEXT: aie.objectfifo @out{i}(%[[C{i}]], {{%[[MEM]]}}, 2 : i32) : !aie.objectfifo<memref<{tile}xi32>>
"""
    ins = ", ".join(f"@in{i}" for i in range(lanes))
    outs = ", ".join(f"@out{i}" for i in range(lanes))
    offsets = ", ".join(str(i * tile) for i in range(lanes))
    checks += f"""
CHECK-NEXT: aie.objectfifo.link [@in] -> [{ins}]([] [{offsets}])
CHECK-NEXT: aie.objectfifo.link [{outs}] -> [@out]([{offsets}] [])
CHECK-NEXT: func.func private @add_one_i32(memref<{tile}xi32>, memref<{tile}xi32>, i32) attributes {{link_with = "add_one_i32.o"}}
"""
    checks += "".join(adder_core(f"C{i}", f"in{i}", f"out{i}", tile) for i in range(lanes))
    return checks + linear_io(4096)


CHECKS = {
    "passthrough": PASSTHROUGH,
    "add_one": ADD_ONE,
    "repeat": REPEAT,
    "transpose": TRANSPOSE,
    "split_join": split_join_checks(),
}


@pytest.mark.parametrize("name", CHECKS)
def test_known_answer_programs_emit_the_documented_ops(name, device, tmp_path):
    assert set(CHECKS) == set(EXAMPLES)
    text = to_mlir(EXAMPLES[name](device))
    assert_matches(text, CHECKS[name].replace("DEVICE", device.name), tmp_path)


def _deeper_in(design: Design) -> Design:
    return attrs.evolve(design, fifos=(attrs.evolve(design.fifos[0], depth=3), *design.fifos[1:]))


def _linear_fill(design: Design) -> Design:
    fill = attrs.evolve(design.sequence[0], tap=TAP.linear(2048))
    return attrs.evolve(design, sequence=(fill, *design.sequence[1:]))


def _released_out_first(design: Design) -> Design:
    worker = design.workers[0]
    body = (*worker.body[:3], worker.body[4], worker.body[3])
    return attrs.evolve(design, workers=(attrs.evolve(worker, body=body),))


@pytest.mark.parametrize(
    "name, mutate",
    [
        ("passthrough", _deeper_in),
        ("passthrough", lambda d: passthrough(d.device, tile=512)),
        ("add_one", _released_out_first),
        ("add_one", lambda d: add_one(d.device, tile=512)),
        ("repeat", lambda d: EXAMPLES["repeat"](d.device, times=2)),
        ("transpose", _linear_fill),
        ("split_join", lambda d: split_join(d.device, workers=2, tile=512)),
    ],
)
def test_the_checks_fail_on_a_different_design(name, mutate, npu2, tmp_path):
    changed = mutate(EXAMPLES[name](npu2))
    assert_differs(to_mlir(changed), CHECKS[name].replace("DEVICE", "npu2"), tmp_path)


def _drop(fragment):
    return lambda text: "".join(
        line for line in text.splitlines(keepends=True) if fragment not in line
    )


def _swap(first, second):
    def swap(text):
        lines = text.splitlines(keepends=True)
        i = next(n for n, line in enumerate(lines) if first in line)
        j = next(n for n, line in enumerate(lines) if second in line)
        lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)

    return swap


@pytest.mark.parametrize(
    "name, mutate",
    [
        ("passthrough", _drop("aie.objectfifo.link")),
        ("passthrough", _drop("aiex.npu.load_pdi")),
        ("add_one", _drop("aiex.dma_await_task")),
        ("add_one", _drop("func.func")),
        ("add_one", _swap("aiex.dma_free_task(%task0)", "aiex.dma_await_task")),
        ("repeat", lambda text: text.replace(" {repeat_count = 4 : i32}", "")),
        ("transpose", _swap("aie.objectfifo @in(", "aie.objectfifo @out(")),
        ("split_join", _swap("-> [@in0", "-> [@out]")),
        ("split_join", _drop("aie.objectfifo.release @out2")),
    ],
)
def test_the_checks_fail_when_ops_are_dropped_or_misordered(name, mutate, npu1, tmp_path):
    text = to_mlir(EXAMPLES[name](npu1))
    assert_matches(text, CHECKS[name].replace("DEVICE", "npu1"), tmp_path)
    mutated = mutate(text)
    assert mutated != text
    assert_differs(mutated, CHECKS[name].replace("DEVICE", "npu1"), tmp_path)


# ---- one feature at a time -------------------------------------------------------------


def _design(device, *, fifos, workers=(), sequence=(), tensors=None, **more) -> Design:
    tensors = tensors or (Tensor("x", 64, "i32", IN), Tensor("y", 64, "i32", OUT))
    return Design("feature", device, tensors, fifos, workers, sequence, **more)


def _adder(name="w", source="in", sink="out", n=64, **fields) -> Worker:
    body = (
        Acquire(source),
        Acquire(sink),
        Call(add_one_kernel(n), (Obj(source), Obj(sink), n)),
        Release(source),
        Release(sink),
    )
    return Worker(name, fields.pop("body", body), **fields)


def _io_fifos(**in_fields):
    return (
        ObjectFifo("in", 64, "i32", shim(), (core("w"),), **in_fields),
        ObjectFifo("out", 64, "i32", core("w"), (shim(),)),
    )


@pytest.mark.parametrize(
    "device, spelled",
    [
        (Device.from_name("npu1"), "npu1"),
        (Device.from_name("npu1", columns=1), "npu1_1col"),
        (Device.from_name("npu1", columns=3), "npu1_3col"),
        (Device.from_name("npu2"), "npu2"),
        (Device.from_name("npu2", columns=4), "npu2_4col"),
        (Device.from_name("npu2", columns=7), "npu2_7col"),
    ],
)
def test_narrower_devices_take_their_column_variant(device, spelled, tmp_path):
    assert_matches(to_mlir(add_one(device)), f"CHECK: aie.device({spelled}) @main {{", tmp_path)


@pytest.mark.parametrize(
    "dtype, mlir",
    [
        ("bf16", "bf16"),
        ("f32", "f32"),
        ("i8", "i8"),
        ("i16", "i16"),
        ("i32", "i32"),
        ("u8", "ui8"),
        ("u16", "ui16"),  # python/helpers/util.py: np.uint16 -> T.ui16
        ("u32", "ui32"),
    ],
)
def test_element_types_are_spelled_as_mlir_aie_maps_them(dtype, mlir, npu1, tmp_path):
    text = to_mlir(passthrough(npu1, n=4096, tile=1024, dtype=dtype))
    checks = f"""
CHECK: aie.objectfifo @in({{{{.*}}}}) : !aie.objectfifo<memref<1024x{mlir}>>
CHECK: aie.runtime_sequence @sequence(%{{{{{V}}}}}: memref<4096x{mlir}>, %{{{{{V}}}}}: memref<4096x{mlir}>)
"""
    assert_matches(text, checks, tmp_path)


def _bfp_design(device) -> Design:
    tensors = (Tensor("x", 64, "bfp16ebs8", IN), Tensor("y", 64, "bfp16ebs8", OUT))
    return _design(
        device,
        tensors=tensors,
        fifos=(
            ObjectFifo("in", 16, "bfp16ebs8", shim(), (memtile("fwd"),)),
            ObjectFifo("out", 16, "bfp16ebs8", memtile("fwd"), (shim(),)),
        ),
        links=(forward("fwd", "in", "out"),),
        sequence=(Fill("in", "x"), Drain("out", "y")),
    )


def test_block_floats_are_aiex_bfp_on_npu2_and_refused_on_npu1(npu1, npu2, tmp_path):
    bfp = '!aiex.bfp<"v8bfp16ebs8">'
    checks = f"""
CHECK: aie.objectfifo @in({{{{.*}}}}) : !aie.objectfifo<memref<16x{bfp}>>
CHECK: aie.runtime_sequence @sequence(%[[X:{V}]]: memref<64x{bfp}>, %{{{{{V}}}}}: memref<64x{bfp}>)
CHECK: aie.dma_bd(%[[X]] : memref<64x{bfp}> offset = 0 len = 64 sizes = [1, 1, 1, 64] strides = [0, 0, 0, 1])
"""
    assert_matches(to_mlir(_bfp_design(npu2)), checks, tmp_path)
    with pytest.raises(DesignError, match="design feature: fifo in holds block-float bfp16ebs8"):
        to_mlir(_bfp_design(npu1))


def test_dimensions_per_endpoint_depths_and_counts_use_the_dialect_attributes(npu2, tmp_path):
    fifos = (
        ObjectFifo(
            "in",
            64,
            "i32",
            shim(),
            (memtile("fwd", depth=3, dims_from_stream=[(8, 1), (8, 8)]),),
        ),
        ObjectFifo(
            "out",
            64,
            "i32",
            memtile("fwd"),
            (shim(),),
            dims_to_stream=[(2, 32), (32, 1)],
            repeat_count=2,
            iter_count=4,
        ),
    )
    design = _design(
        npu2,
        fifos=fifos,
        links=(forward("fwd", "in", "out"),),
        sequence=(Fill("in", "x"), Drain("out", "y", TAP.linear(128))),
        tensors=(Tensor("x", 64, "i32", IN), Tensor("y", 128, "i32", OUT)),
    )
    checks = f"""
CHECK-DAG: %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG: %[[MEM:{V}]] = aie.tile(0, 1)
CHECK:     aie.objectfifo @in(%[[SHIM]], {{%[[MEM]] dimensionsFromStream [<size = 8, stride = 1>, <size = 8, stride = 8>]}}, [2 : i32, 3 : i32]) : !aie.objectfifo<memref<64xi32>>
CHECK:     aie.objectfifo @out(%[[MEM]] dimensionsToStream [<size = 2, stride = 32>, <size = 32, stride = 1>], {{%[[SHIM]]}}, 2 : i32) {{iter_count = 4 : i32, repeat_count = 2 : i32}} : !aie.objectfifo<memref<64xi32>>
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_a_four_dimensional_pattern_repeats_its_task(npu1, tmp_path):
    """The highest dimension becomes repeat_count (repeats - 1); the BD length
    is the product of the other three, as shim_dma_single_bd_task builds it."""
    repeated = TAP(16, (3, 2, 4, 8), (0, 32, 8, 1))
    design = _design(npu1, fifos=_io_fifos(), workers=(_adder(),))
    design = attrs.evolve(design, sequence=(Fill("in", "x", repeated), Drain("out", "y")))
    checks = f"""
CHECK: aie.runtime_sequence @sequence(%[[X:{V}]]: memref<64xi32>
CHECK-NEXT: aiex.npu.load_pdi
{task("FILL", "in", "X", "memref<64xi32> offset = 16 len = 64 sizes = [3, 2, 4, 8] strides = [0, 32, 8, 1]", "{repeat_count = 2 : i32}")}
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_task_groups_await_their_waited_tasks_then_free_all(npu1, tmp_path):
    half = [TAP.linear(32), TAP.linear(32, 32)]
    sequence = (
        Fill("in", "x", half[0], group="first"),
        Drain("out", "y", half[0], group="first"),
        Finish("first"),
        Fill("in", "x", half[1], wait=True, group="second"),
        Drain("out", "y", half[1], group="second"),
    )
    design = _design(npu1, fifos=_io_fifos(), workers=(_adder(),), sequence=sequence)
    checks = f"""
CHECK:      aiex.npu.load_pdi
CHECK-NEXT: %[[A:{V}]] = aiex.dma_configure_task_for @in {{
CHECK:      aiex.dma_start_task(%[[A]])
CHECK-NEXT: %[[B:{V}]] = aiex.dma_configure_task_for @out {{
CHECK:      }} {{issue_token = true}}
CHECK-NEXT: aiex.dma_start_task(%[[B]])
CHECK-NEXT: aiex.dma_await_task(%[[B]])
CHECK-NEXT: aiex.dma_free_task(%[[A]])
CHECK-NEXT: aiex.dma_free_task(%[[B]])
CHECK-NEXT: %[[C:{V}]] = aiex.dma_configure_task_for @in {{
CHECK-NEXT: aie.dma_bd(%{{{{{V}}}}} : memref<64xi32> offset = 32 len = 32
CHECK:      }} {{issue_token = true}}
CHECK-NEXT: aiex.dma_start_task(%[[C]])
CHECK-NEXT: %[[D:{V}]] = aiex.dma_configure_task_for @out {{
CHECK:      }} {{issue_token = true}}
CHECK-NEXT: aiex.dma_start_task(%[[D]])
CHECK-NEXT: aiex.dma_await_task(%[[C]])
CHECK-NEXT: aiex.dma_await_task(%[[D]])
CHECK-NEXT: aiex.dma_free_task(%[[C]])
CHECK-NEXT: aiex.dma_free_task(%[[D]])
CHECK-NEXT: }}
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_parameters_are_declared_in_the_module_synced_after_the_load_and_read_where_used(
    npu2, tmp_path
):
    body = (
        Loop(
            Param("lines"),
            (
                Acquire("in"),
                Acquire("out"),
                Call(add_one_kernel(64), (Obj("in"), Obj("out"), Param("count"))),
                Release("in"),
                Release("out"),
            ),
        ),
    )
    design = _design(
        npu2,
        fifos=_io_fifos(),
        workers=(_adder(body=body),),
        sequence=(Fill("in", "x"), Drain("out", "y")),
        params=("lines", "count"),
    )
    checks = f"""
CHECK:      module {{
CHECK-NEXT: aiex.scratchpad_parameter @lines : i32
CHECK-NEXT: aiex.scratchpad_parameter @count : i32
CHECK-NEXT: aie.device(npu2) @main {{
CHECK:      aie.core
CHECK:      scf.for
CHECK:      %[[WORD:{V}]] = aiex.read_scratchpad_parameter @lines : i32
CHECK-NEXT: %[[BOUND:{V}]] = arith.index_cast %[[WORD]] : i32 to index
CHECK-NEXT: scf.for %{{{{{V}}}}} = %{{{{{V}}}}} to %[[BOUND]] step %{{{{{V}}}}} {{
CHECK:      %[[COUNT:{V}]] = aiex.read_scratchpad_parameter @count : i32
CHECK-NEXT: func.call @add_one_i32(%{{{{{V}}}}}, %{{{{{V}}}}}, %[[COUNT]])
CHECK:      aie.runtime_sequence
CHECK-NEXT: aiex.npu.load_pdi {{device_ref = @main}}
CHECK-NEXT: aiex.sync_scratchpad_parameters_from_host
"""
    assert_matches(to_mlir(design), checks, tmp_path)
    assert "sync_scratchpad" not in to_mlir(add_one(npu2))


def test_barriers_are_a_lock_per_waiting_worker_set_by_the_runtime(npu1, tmp_path):
    def waiting(name, source, sink):
        worker = _adder(name, source, sink)
        return attrs.evolve(worker, body=(WaitBarrier("go", 2), *worker.body))

    fifos = (
        ObjectFifo("in", 64, "i32", shim(), (core("w"), core("v"))),
        ObjectFifo("out", 64, "i32", core("w"), (shim(),)),
        ObjectFifo("out2", 64, "i32", core("v"), (shim(),)),
    )
    design = _design(
        npu1,
        fifos=fifos,
        workers=(waiting("w", "in", "out"), waiting("v", "in", "out2")),
        sequence=(SetBarrier("go", 2), Fill("in", "x"), Drain("out", "y")),
        barriers=("go",),
    )
    checks = f"""
CHECK-DAG: %[[W:{V}]] = aie.tile(0, 2)
CHECK-DAG: %[[V:{V}]] = aie.tile(0, 3)
CHECK:     %[[WLOCK:{V}]] = aie.lock(%[[W]]) {{init = 0 : i32}}
CHECK:     %[[VLOCK:{V}]] = aie.lock(%[[V]]) {{init = 0 : i32}}
CHECK:     aie.core(%[[W]])
CHECK:     %[[TWO:{V}]] = arith.constant 2 : i32
CHECK:     scf.for
CHECK-NEXT: aie.use_lock(%[[WLOCK]], Acquire, %[[TWO]])
CHECK:     aie.core(%[[V]])
CHECK:     aie.use_lock(%[[VLOCK]], Acquire, %{{{{{V}}}}})
CHECK:     aie.runtime_sequence
CHECK-NEXT: aiex.npu.load_pdi
CHECK-NEXT: aiex.set_lock(%[[WLOCK]], 2)
CHECK-NEXT: aiex.set_lock(%[[VLOCK]], 2)
CHECK-NEXT: aiex.dma_configure_task_for @in
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def _accumulating_design(device, acc: LocalBuffer | None = None, **worker_fields) -> Design:
    acc = acc or LocalBuffer("acc", 16, "i32")
    kernel = Kernel(
        "accumulate",
        (Memref(64, "i32"), Memref(acc.shape, acc.dtype)),
        shipped("iron.design", "kernels/add_one.cc"),
        add_one_model,
    )
    body = (Acquire("in"), Call(kernel, (Obj("in"), Buf("acc"))), Release("in"))
    worker = Worker("w", body, buffers=(acc,), **worker_fields)
    return _design(
        device,
        fifos=(ObjectFifo("in", 64, "i32", shim(), (core("w"),)),),
        workers=(worker,),
        sequence=(Fill("in", "x"),),
        tensors=(Tensor("x", 64, "i32", IN),),
    )


def test_core_buffers_stack_and_single_shot_workers(npu1, tmp_path):
    design = _accumulating_design(npu1, forever=False, stack_size=2048)
    checks = f"""
CHECK-DAG: %[[T:{V}]] = aie.tile(0, 2)
CHECK:     func.func private @accumulate(memref<64xi32>, memref<16xi32>)
CHECK-NEXT: %[[ACC:{V}]] = aie.buffer(%[[T]]) {{sym_name = "w_acc"}} : memref<16xi32>
CHECK-NEXT: %{{{{{V}}}}} = aie.core(%[[T]]) {{
CHECK-DAG: %[[ONE:{V}]] = arith.constant 1 : index
CHECK:     scf.for %{{{{{V}}}}} = %{{{{{V}}}}} to %[[ONE]] step %[[ONE]] {{
CHECK:     func.call @accumulate(%{{{{{V}}}}}, %[[ACC]]) : (memref<64xi32>, memref<16xi32>) -> ()
CHECK:     }} {{stack_size = 2048 : i32}}
"""
    assert_matches(to_mlir(design), checks, tmp_path)


@pytest.mark.parametrize(
    ("dtype", "value", "splat"),
    [("i32", 0, "dense<0>"), ("u8", 200, "dense<200>"), ("f32", 0, "dense<0.000000e+00>"),
     ("bf16", -1.5, "dense<-1.500000e+00>")],
)  # fmt: skip
def test_an_initial_value_is_the_buffers_splat(dtype, value, splat, npu1, tmp_path):
    design = _accumulating_design(npu1, LocalBuffer("acc", 16, dtype, initial_value=value))
    memref = f"memref<16x{'ui8' if dtype == 'u8' else dtype}>"
    checks = f"""
CHECK: aie.buffer(%{{{{{V}}}}}) {{sym_name = "w_acc"}} : {memref} = {splat}{{{{$}}}}
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_objects_are_indexed_oldest_first_across_releases(npu1, tmp_path):
    """`subview.access %s[i]` is the i-th object held when it runs: the
    lowering selects the buffer by the fifo's ring counter at the access,
    which a release moves on (`LowerObjectFifoSubviewAccess`,
    `emitAdvanceBufferIndexCounter`). So the object that was [1] before a
    release of one is [0] after it."""
    kernel = add_one_kernel(64)
    body = (
        Acquire("in", 2),
        Acquire("out"),
        Call(kernel, (Obj("in", 1), Obj("out"), 64)),
        Release("in"),
        Call(kernel, (Obj("in", 0), Obj("out"), 64)),
        Release("in"),
        Release("out"),
    )
    design = _design(
        npu1,
        fifos=_io_fifos(depth=2),
        workers=(_adder(body=body),),
        sequence=(Fill("in", "x"), Drain("out", "y")),
    )
    checks = f"""
CHECK:     %[[TWO:{V}]] = aie.objectfifo.acquire @in(Consume, 2)
CHECK:     aie.objectfifo.subview.access %[[TWO]][1]
CHECK:     aie.objectfifo.release @in(Consume, 1)
CHECK:     aie.objectfifo.subview.access %[[TWO]][0]
CHECK:     aie.objectfifo.release @in(Consume, 1)
"""
    text = to_mlir(design)
    assert_matches(text, checks, tmp_path)
    assert_differs(text, checks.replace("%[[TWO]][0]", "%[[TWO]][1]"), tmp_path)


def test_an_object_of_rows_is_collapsed_for_a_one_dimensional_kernel(npu1, tmp_path):
    fifos = (
        ObjectFifo("in", (8, 8), "i32", shim(), (core("w"),)),
        ObjectFifo("out", 64, "i32", core("w"), (shim(),)),
    )
    design = _design(
        npu1, fifos=fifos, workers=(_adder(),), sequence=(Fill("in", "x"), Drain("out", "y"))
    )
    checks = f"""
CHECK: %[[ROWS:{V}]] = aie.objectfifo.subview.access %{{{{{V}}}}}[0] : !aie.objectfifosubview<memref<8x8xi32>> -> memref<8x8xi32>
CHECK: %[[FLAT:{V}]] = memref.collapse_shape %[[ROWS]] {{{{\\[\\[}}}}0, 1{{{{\\]\\]}}}} : memref<8x8xi32> into memref<64xi32>
CHECK: func.call @add_one_i32(%[[FLAT]],
"""
    assert_matches(to_mlir(design), checks, tmp_path)


# ---- identity and refusals -------------------------------------------------------------


def test_emission_is_deterministic_and_places_first(npu2):
    design = split_join(npu2, workers=8, n=8 * 256)
    assert to_mlir(design) == to_mlir(split_join(npu2, workers=8, n=8 * 256))
    assert to_mlir(design) == to_mlir(place(design))


def test_kernels_from_one_source_share_one_object(npu1, tmp_path):
    design = _accumulating_design(npu1)
    accumulate = design.workers[0].calls()[0].kernel
    zero = attrs.evolve(accumulate, symbol="zero", args=(Memref(16, "i32"),))
    worker = design.workers[0]
    both = attrs.evolve(worker, body=(Call(zero, (Buf("acc"),)), *worker.body))
    design = attrs.evolve(design, workers=(both,))
    assert kernel_objects(design) == {zero: "zero.o", accumulate: "zero.o"}
    checks = """
CHECK: func.func private @zero(memref<16xi32>) attributes {link_with = "zero.o"}
CHECK: func.func private @accumulate({{.*}}) attributes {link_with = "zero.o"}
"""
    assert_matches(to_mlir(design), checks, tmp_path)
    flagged = attrs.evolve(accumulate, flags=("-DFAST",))
    design = attrs.evolve(
        design, workers=(attrs.evolve(both, body=(both.body[0], *_calls_to(flagged, worker))),)
    )
    assert kernel_objects(design) == {zero: "zero.o", flagged: "accumulate.o"}


def _calls_to(kernel: Kernel, worker: Worker) -> list:
    return [attrs.evolve(op, kernel=kernel) if isinstance(op, Call) else op for op in worker.body]


def _renamed_fifo(design: Design, name: str) -> Design:
    fifo = design.fifos[0]
    worker = design.workers[0]
    body = [
        attrs.evolve(op, fifo=name) if getattr(op, "fifo", None) == fifo.name else op
        for op in worker.body
    ]
    body = [
        attrs.evolve(op, args=[Obj(name) if a == Obj(fifo.name) else a for a in op.args])
        if isinstance(op, Call)
        else op
        for op in body
    ]
    sequence = [
        attrs.evolve(s, fifo=name) if getattr(s, "fifo", None) == fifo.name else s
        for s in design.sequence
    ]
    return attrs.evolve(
        design,
        fifos=(attrs.evolve(fifo, name=name), *design.fifos[1:]),
        workers=(attrs.evolve(worker, body=body),),
        sequence=sequence,
    )


def _pinned(design: Design, tile: Tile) -> Design:
    return attrs.evolve(design, workers=(attrs.evolve(design.workers[0], tile=tile),))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: _renamed_fifo(d, "in-1"),
            "design add_one: fifo name 'in-1' cannot be an MLIR symbol",
        ),
        (
            lambda d: _renamed_fifo(d, "add_one_i32"),
            "fifo add_one_i32 and kernel add_one_i32 would both be MLIR symbol @add_one_i32",
        ),
        (
            lambda d: _renamed_fifo(d, "sequence"),
            "fifo sequence and the runtime sequence would both be MLIR symbol @sequence",
        ),
        (
            lambda d: _pinned(d, Tile(0, 1)),
            r"worker adder needs a core tile, but \(0, 1\) is a memtile tile",
        ),
        (
            lambda d: _pinned(d, Tile(9, 2)),
            r"worker adder is on tile \(9, 2\), off npu1 at 4 columns x 6 rows",
        ),
        (
            lambda d: attrs.evolve(d, device=attrs.evolve(d.device, name="npu9")),
            "mlir-aie has no aie.device for npu9",
        ),
    ],
)
def test_what_cannot_be_emitted_is_refused_by_name(change, message, npu1):
    with pytest.raises(DesignError, match=message):
        to_mlir(change(add_one(npu1)))


def test_a_parameter_passed_to_a_narrower_scalar_is_refused(npu1):
    kernel = Kernel(
        "scale", (Memref(64, "i32"), Scalar("i16")), shipped("iron.design", "k.cc"), add_one_model
    )
    with pytest.raises(DesignError, match="parameter k is an i32 word, the kernel takes i16"):
        Call(kernel, (Obj("in"), Param("k")))


def test_an_object_acquired_in_an_earlier_loop_is_reached_through_a_handle(npu1, tmp_path):
    """An access needs an acquire's subview in scope; the objects acquired
    in a loop before it are held, so an acquire of them takes nothing
    (`LowerObjectFifoAcquire` acquires max(0, n - held)) and gives one."""
    kernel = add_one_kernel(64)
    body = (
        Loop(2, (Acquire("in"), Acquire("out"))),
        Call(kernel, (Obj("in"), Obj("out"), 64)),
        Release("in"),
        Release("out"),
    )
    design = _design(npu1, fifos=_io_fifos(), workers=(_adder(body=body),))
    checks = f"""
CHECK:      scf.for
CHECK:      scf.for
CHECK-NEXT: aie.objectfifo.acquire @in(Consume, 1)
CHECK-NEXT: aie.objectfifo.acquire @out(Produce, 1)
CHECK-NEXT: }}
CHECK-NEXT: %[[IN:{V}]] = aie.objectfifo.acquire @in(Consume, 1)
CHECK-NEXT: %[[A:{V}]] = aie.objectfifo.subview.access %[[IN]][0]
CHECK-NEXT: %[[OUT:{V}]] = aie.objectfifo.acquire @out(Produce, 1)
CHECK-NEXT: %[[B:{V}]] = aie.objectfifo.subview.access %[[OUT]][0]
CHECK-NEXT: func.call @add_one_i32(%[[A]], %[[B]], %{{{{{V}}}}})
"""
    assert check(design).ok
    assert_matches(to_mlir(design), checks, tmp_path)


def test_reorders_at_a_shim_end_are_refused(npu1):
    design = add_one(npu1)
    fifo_in, fifo_out = design.fifos
    reordered = attrs.evolve(fifo_in, dims_to_stream=[(2, 1), (512, 2)])
    with pytest.raises(DesignError, match="fifo in: mlir-aie has no dimensionsToStream"):
        to_mlir(attrs.evolve(design, fifos=(reordered, fifo_out)))
    drained = attrs.evolve(
        fifo_out, consumers=(attrs.evolve(fifo_out.consumers[0], dims_from_stream=[(2, 1)]),)
    )
    with pytest.raises(DesignError, match="fifo out: mlir-aie has no dimensionsToStream"):
        to_mlir(attrs.evolve(design, fifos=(fifo_in, drained)))


def test_offsets_with_gaps_are_written_as_given(npu1, tmp_path):
    """`objectfifo.link` takes any rising offsets (mlir-aie's own
    test/python/objFifo_link.py writes [0, 128] for 64-element lanes); lane i
    moves up to the next offset."""
    design = split_join(npu1, tile=256, workers=2, n=4096)
    fifos = [attrs.evolve(f, shape=(1024,)) if f.name in ("in", "out") else f for f in design.fifos]
    design = attrs.evolve(
        design,
        fifos=tuple(fifos),
        links=(
            attrs.evolve(design.links[0], offsets=(0, 512)),
            attrs.evolve(design.links[1], offsets=(0, 256)),
        ),
    )
    assert check(design).ok
    checks = """
CHECK: aie.objectfifo.link [@in] -> [@in0, @in1]([] [0, 512])
CHECK: aie.objectfifo.link [@out0, @out1] -> [@out]([0, 256] [])
"""
    assert_matches(to_mlir(design), checks, tmp_path)


def test_one_symbol_with_two_signatures_is_refused(npu1):
    design = split_join(npu1, workers=2, n=2048)
    first = design.workers[0]
    wide = attrs.evolve(first, body=_calls_to(add_one_kernel(512), first))
    with pytest.raises(DesignError, match="two kernels are named add_one_i32"):
        to_mlir(attrs.evolve(design, workers=(wide, *design.workers[1:])))


def test_one_depth_for_every_endpoint_is_written_as_one_number(npu1, tmp_path):
    """mlir-aie's ObjectFifo writes one depth when every handle has it
    (`ObjectFifo._get_depths`), and the lowering then sizes a core's pool by
    its acquires (`findObjectFifoSize`); depths that differ stay a list."""
    design = add_one(npu1)
    one = f"""
CHECK: aie.objectfifo @in(%{{{{{V}}}}}, {{%{{{{{V}}}}}}}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
"""
    assert_matches(to_mlir(design), one, tmp_path)
    fifos = (attrs.evolve(design.fifos[0], consumers=(core("adder", depth=3),)), design.fifos[1])
    differing = attrs.evolve(design, fifos=fifos)
    per_endpoint = f"""
CHECK: aie.objectfifo @in(%{{{{{V}}}}}, {{%{{{{{V}}}}}}}, [2 : i32, 3 : i32]) : !aie.objectfifo<memref<1024xi32>>
"""
    assert_matches(to_mlir(differing), per_endpoint, tmp_path)
    assert_differs(to_mlir(differing), one, tmp_path)


def test_an_aggregating_forward_is_a_link_of_two_sizes(npu1, tmp_path):
    """A forward whose destination objects are larger than its source's: the
    link is written as any forward, the object types saying the rest."""
    design = passthrough(npu1, n=4096, tile=256)
    big = attrs.evolve(design.fifos[1], shape=(1024,))
    design = attrs.evolve(design, fifos=(design.fifos[0], big))
    assert check(design).ok
    checks = f"""
CHECK:      aie.objectfifo @in(%[[SHIM:{V}]], {{%[[MEM:{V}]]}}, 2 : i32) : !aie.objectfifo<memref<256xi32>>
CHECK-NEXT: aie.objectfifo @out(%[[MEM]], {{%[[SHIM]]}}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
CHECK-NEXT: aie.objectfifo.link [@in] -> [@out]([] [])
"""
    assert_matches(to_mlir(design), checks, tmp_path)
