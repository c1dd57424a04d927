"""ElementwiseAdd's emitted MLIR against FileCheck patterns written from
mlir-aie's dialect syntax (aie.objectfifo, aie.core, func.call,
aiex.dma_configure_task_for with aie.dma_bd), each set shown to fail on a
design that differs where it matters."""

import attrs
import pytest

from iron.core import Device, OperatorError, registry
from iron.design import Fill, design_of, to_mlir
from iron.design.testing import filecheck as run_filecheck
from iron.ops.eltwise import AXPY, ElementwiseAdd

V = "[a-z0-9_.]+"  # an SSA name, without its %

TWO_COLUMNS = f"""
CHECK: aie.device(npu1)
CHECK-DAG: %[[SHIM0:{V}]] = aie.tile(0, 0)
CHECK-DAG: %[[CORE0:{V}]] = aie.tile(0, 2)
CHECK-DAG: %[[SHIM1:{V}]] = aie.tile(1, 0)
CHECK-DAG: %[[CORE1:{V}]] = aie.tile(1, 2)
CHECK: aie.objectfifo @a0(%[[SHIM0]], {{%[[CORE0]]}}, 2 : i32) : !aie.objectfifo<memref<1024xbf16>>
CHECK: aie.objectfifo @b0(%[[SHIM0]], {{%[[CORE0]]}}, 2 : i32) : !aie.objectfifo<memref<1024xbf16>>
CHECK: aie.objectfifo @y0(%[[CORE0]], {{%[[SHIM0]]}}, 2 : i32) : !aie.objectfifo<memref<1024xbf16>>
CHECK: aie.objectfifo @a1(%[[SHIM1]], {{%[[CORE1]]}}, 2 : i32)
CHECK: aie.objectfifo @y1(%[[CORE1]], {{%[[SHIM1]]}}, 2 : i32)
CHECK: func.func private @eltwise_add_bf16_vector(memref<1024xbf16>, memref<1024xbf16>, memref<1024xbf16>) attributes {{link_with = "eltwise_add_bf16_vector.o"}}
CHECK: aie.core(%[[CORE0]])
CHECK: scf.for
CHECK: %[[IN_A:{V}]] = aie.objectfifo.acquire @a0(Consume, 1)
CHECK: %[[IN_B:{V}]] = aie.objectfifo.acquire @b0(Consume, 1)
CHECK: %[[OUT:{V}]] = aie.objectfifo.acquire @y0(Produce, 1)
CHECK: %[[A:{V}]] = aie.objectfifo.subview.access %[[IN_A]][0]
CHECK: %[[B:{V}]] = aie.objectfifo.subview.access %[[IN_B]][0]
CHECK: %[[Y:{V}]] = aie.objectfifo.subview.access %[[OUT]][0]
CHECK: func.call @eltwise_add_bf16_vector(%[[A]], %[[B]], %[[Y]])
CHECK: aie.objectfifo.release @a0(Consume, 1)
CHECK: aie.objectfifo.release @b0(Consume, 1)
CHECK: aie.objectfifo.release @y0(Produce, 1)
CHECK: aie.end
CHECK: aie.core(%[[CORE1]])
CHECK: aie.runtime_sequence @sequence(%[[XA:{V}]]: memref<4096xbf16>, %[[XB:{V}]]: memref<4096xbf16>, %[[XY:{V}]]: memref<4096xbf16>)
CHECK: aiex.dma_configure_task_for @a0 {{
CHECK-NEXT: aie.dma_bd(%[[XA]] : memref<4096xbf16> offset = 0 len = 2048
CHECK: aiex.dma_configure_task_for @a1 {{
CHECK-NEXT: aie.dma_bd(%[[XA]] : memref<4096xbf16> offset = 2048 len = 2048
CHECK: %[[T0:{V}]] = aiex.dma_configure_task_for @y0 {{
CHECK-NEXT: aie.dma_bd(%[[XY]] : memref<4096xbf16> offset = 0 len = 2048
CHECK: }} {{issue_token = true}}
CHECK: %[[T1:{V}]] = aiex.dma_configure_task_for @y1 {{
CHECK-NEXT: aie.dma_bd(%[[XY]] : memref<4096xbf16> offset = 2048 len = 2048
CHECK: aiex.dma_await_task(%[[T0]])
CHECK: aiex.dma_await_task(%[[T1]])
"""

SIZED_LINE = f"""
CHECK: func.func private @iron_add_bf16(memref<256xbf16>, memref<256xbf16>, memref<256xbf16>, i32) attributes {{link_with = "iron_add_bf16.o"}}
CHECK: aie.core
CHECK: %[[N:{V}]] = arith.constant 256 : i32
CHECK: func.call @iron_add_bf16(%{{{{{V}}}}}, %{{{{{V}}}}}, %{{{{{V}}}}}, %[[N]]) : (memref<256xbf16>, memref<256xbf16>, memref<256xbf16>, i32) -> ()
"""


def filecheck(text: str, checks: str, tmp_path) -> int:
    return run_filecheck(text, checks, tmp_path)[0]


@pytest.fixture
def add_design():
    op = ElementwiseAdd(size=4096, tile_size=1024, num_aie_columns=2)
    return design_of(op.resolve(Device.from_name("npu1")))


def test_two_columns_of_add_emit_fifos_cores_and_the_sequence(add_design, tmp_path):
    text = to_mlir(add_design)
    assert filecheck(text, TWO_COLUMNS, tmp_path) == 0, text


def test_the_checks_notice_a_fill_from_the_wrong_block(add_design, tmp_path):
    sequence = tuple(
        attrs.evolve(s, tap=attrs.evolve(s.tap, offset=0))
        if isinstance(s, Fill) and s.fifo == "a1"
        else s
        for s in add_design.sequence
    )
    text = to_mlir(attrs.evolve(add_design, sequence=sequence))
    assert filecheck(text, TWO_COLUMNS, tmp_path) != 0


def test_the_checks_notice_another_kernel(tmp_path):
    op = AXPY(size=4096, tile_size=1024, num_aie_columns=2).resolve(Device.from_name("npu1"))
    text = to_mlir(design_of(op)).replace("@x", "@a").replace("@out", "@y")
    assert filecheck(text, TWO_COLUMNS, tmp_path) != 0


def test_a_sized_line_passes_its_length_to_the_shipped_kernel(tmp_path):
    op = ElementwiseAdd(size=1024, tile_size=256).resolve(Device.from_name("npu2"))
    text = to_mlir(design_of(op))
    assert filecheck(text, SIZED_LINE, tmp_path) == 0, text
    assert filecheck(text.replace("%c256_i32)", "%c0_i32)"), SIZED_LINE, tmp_path) != 0


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_every_streaming_case_emits_a_call_of_its_kernel(device):
    names = "ElementwiseAdd ElementwiseMul AXPY ReLU LeakyReLU GELU SiLU Sigmoid Tanh Clamp Dequant"
    emitted = 0
    for name in names.split():
        cls = registry.get_operator(name)
        for case in cls.cases:
            try:
                op = cls(**case.params).resolve(Device.from_name(device))
            except OperatorError:
                continue  # refusals are asserted in test_designs_streaming
            design = design_of(op)
            *rounding, kernel = design.kernels
            assert [k.symbol for k in rounding] == (
                ["iron_set_rounding_conv_even"] if kernel.source.package is None else []
            )
            text = to_mlir(design)
            assert f"func.call @{kernel.symbol}(" in text, name
            emitted += 1
    assert emitted == (21 if device == "npu1" else 22)
