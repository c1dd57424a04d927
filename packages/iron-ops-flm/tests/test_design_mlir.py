"""FLMGemm's B pool in MLIR, against FileCheck patterns written from
mlir-aie's dialect (aie.buffer, aie.lock, aie.flow, aie.shim_dma_allocation,
aiex.set_lock, aiex.dma_configure_task with aie.use_lock and repeat_count),
each shown to fail on a changed lock value or repeat count."""

import attrs
import pytest

from iron.core import Device
from iron.design import PoolTask, SetLock, design_of, to_mlir
from iron.design.testing import filecheck as run_filecheck
from iron.ops.flm import FLMGemm

V = "[a-z0-9_.]+"  # an SSA name, without its %
BFP = 'memref<8192x!aiex.bfp<"v8bfp16ebs8">>'  # one k-block slot of 512 x 128 values

# M = 512 is two 256-row units: B is resident, each slot read by both
POOL0 = f"""
CHECK-DAG:  %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG:  %[[MEM:{V}]] = aie.tile(0, 1)
CHECK-DAG:  %[[ROW0:{V}]] = aie.tile(0, 2)
CHECK-DAG:  %[[ROW3:{V}]] = aie.tile(0, 5)
CHECK:      %[[SLOT:{V}]] = aie.buffer(%[[MEM]]) {{sym_name = "pool0_slot0"}} : {BFP}
CHECK-NEXT: %[[PROD:{V}]] = aie.lock(%[[MEM]]) {{init = 0 : i32, sym_name = "pool0_prod0"}}
CHECK-NEXT: %[[CONS:{V}]] = aie.lock(%[[MEM]]) {{init = 0 : i32, sym_name = "pool0_cons0"}}
CHECK:      aie.flow(%[[SHIM]], DMA : [[SHIM_CH:[0-9]]], %[[MEM]], DMA : [[MEM_IN:[0-9]]])
CHECK-NEXT: aie.shim_dma_allocation @B0_in(%[[SHIM]], MM2S, [[SHIM_CH]])
CHECK-NEXT: aie.flow(%[[MEM]], DMA : [[MEM_OUT:[0-9]]], %[[ROW0]], DMA : {{{{[0-9]}}}})
CHECK:      aie.flow(%[[MEM]], DMA : [[MEM_OUT]], %[[ROW3]], DMA : {{{{[0-9]}}}})
CHECK:      aie.buffer(%[[ROW0]]) {{sym_name = "B0_core_0_0_buff_0"}} : memref<512x!aiex.bfp<"v8bfp16ebs8">>
CHECK:      aie.runtime_sequence @sequence(%{{{{{V}}}}}: memref<512x512xbf16>, %[[B:{V}]]: memref<65536x!aiex.bfp<"v8bfp16ebs8">>, %{{{{{V}}}}}: memref<512x1024xbf16>) {{
CHECK:      aiex.set_lock(%[[PROD]], 2)
CHECK:      %[[FILL:{V}]] = aiex.dma_configure_task(%[[MEM]], S2MM, [[MEM_IN]]) {{
CHECK-NEXT: %[[TWO:{V}]] = arith.constant 2 : i32
CHECK-NEXT: aie.use_lock(%[[PROD]], AcquireGreaterEqual, %[[TWO]])
CHECK-NEXT: aie.dma_bd(%[[SLOT]] : {BFP} offset = 0 len = 8192)
CHECK-NEXT: aie.use_lock(%[[CONS]], Release, %[[TWO]])
CHECK-NEXT: aie.end
CHECK-NEXT: {{{{^ *}}$}}}}
CHECK-NEXT: aiex.dma_start_task(%[[FILL]])
CHECK-NEXT: %[[DRAIN:{V}]] = aiex.dma_configure_task(%[[MEM]], MM2S, [[MEM_OUT]]) {{
CHECK-NEXT: %[[ONE:{V}]] = arith.constant 1 : i32
CHECK-NEXT: aie.use_lock(%[[CONS]], AcquireGreaterEqual, %[[ONE]])
CHECK-NEXT: aie.dma_bd(%[[SLOT]] : {BFP} offset = 0 len = 8192)
CHECK-NEXT: aie.use_lock(%[[PROD]], Release, %[[ONE]])
CHECK-NEXT: aie.end
CHECK-NEXT: }} {{repeat_count = 1 : i32}}
CHECK-NEXT: aiex.dma_start_task(%[[DRAIN]])
CHECK:      = aiex.dma_configure_task_for @B0_in {{
CHECK-NEXT: aie.dma_bd(%[[B]] : memref<65536x!aiex.bfp<"v8bfp16ebs8">> offset = 0 len = 8192 sizes = [1, 1, 1, 8192] strides = [0, 0, 0, 1])
CHECK:      aiex.dma_free_task(%[[FILL]])
CHECK:      aiex.dma_free_task(%[[DRAIN]])
"""


def filecheck(text: str, checks: str, tmp_path) -> int:
    return run_filecheck(text, checks, tmp_path)[0]


def _design(M: int = 512):
    return design_of(FLMGemm(M=M, K=512, N=1024).resolve(Device.from_name("npu2")))


def _changed(design, kind, **fields):
    """`design` with the first statement of `kind` on pool0 changed."""
    i = next(i for i, s in enumerate(design.sequence) if isinstance(s, kind) and s.link == "pool0")
    changed = attrs.evolve(design.sequence[i], **fields)
    return attrs.evolve(design, sequence=(*design.sequence[:i], changed, *design.sequence[i + 1 :]))


def test_the_b_pool_is_armed_filled_once_and_drained_per_unit(tmp_path):
    text = to_mlir(_design())
    assert filecheck(text, POOL0, tmp_path) == 0


@pytest.mark.parametrize(
    "change",
    [
        lambda d: _changed(d, SetLock, value=3),
        lambda d: _changed(d, PoolTask, repeat_count=3),  # the fill, walked three times
        lambda d: _design(M=768),  # three units: locks at 3, the drain walked three times
    ],
)
def test_the_pool_checks_notice_another_lock_value_or_repeat_count(change, tmp_path):
    assert filecheck(to_mlir(change(_design())), POOL0, tmp_path) != 0
