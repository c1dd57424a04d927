"""Every kernel the family's designs call, held against its manifest
(``kernels/manifest.json``): mlir-aie's mm.cc at iron-design's pin or a file
this package ships, its extern "C" symbol, arguments, defines and the
constraints its source asserts, on both devices; every shipped source
against its declared signatures; and the models that follow the hardware's
arithmetic where the issue found they did not."""

import ml_dtypes
import numpy as np
import pytest

from iron.core import Device
from iron.design import design_of, simulate
from iron.design.manifest import (
    MLIR_AIE_COMMIT,
    catalog_problems,
    defines_of,
    design_problems,
    load,
    shipped_problems,
)
from iron.ops.gemm import GEMM, MHA, GQAContext, GQAScores

MANIFEST = load("iron.ops.gemm")
DEVICES = ("npu1", "npu2")
NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def test_the_manifest_is_read_at_iron_designs_pin():
    assert MANIFEST.commit == MLIR_AIE_COMMIT


@pytest.mark.parametrize("device", DEVICES)
def test_every_catalog_design_calls_kernels_at_the_pin_or_shipped_and_keeps_their_rules(device):
    """Includes the f32 -> bf16 cast every bf16 GEMM and GQAContext calls:
    mlir-aie at 3ca0193ce has no aie2p/cast_f32_bf16.cc."""
    checked, problems = catalog_problems("gemm", Device.from_name(device), [MANIFEST])
    assert checked >= 15
    assert problems == []


def test_every_shipped_source_defines_its_kernels_vectorised_without_libm():
    """No scalar kernel, and no expf: a core has no libm."""
    assert shipped_problems(MANIFEST) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "op",
    [
        GEMM(256, 2048, 2048, b_col_maj=True),
        GEMM(512, 256, 512, dtype_out="float32", tile_n=32, c_col_maj=True),
        GEMM(256, 256, 256, dtype_in="int8", dtype_out="bf16", c_col_maj=True),
        GEMM(256, 256, 256, dtype_in="int8", dtype_out="int32", b_col_maj=True, c_col_maj=True),
        GQAScores(32, 8, 64, 2048),
        GQAContext(32, 8, 64, 2048),
    ],
    ids=repr,
)
def test_shapes_beyond_the_catalog_call_listed_kernels_too(op, device):
    assert design_problems(design_of(op.resolve(Device.from_name(device))), [MANIFEST]) == []


def test_mha_calls_the_kernels_built_for_aie2p():
    design = design_of(MHA(8, 256, num_kv_heads=2, num_pipelines=4).resolve(NPU2))
    assert design_problems(design, [MANIFEST]) == []


@pytest.mark.parametrize("dtype_out", ["int32", "bf16"])
def test_npu1_int8_with_c_col_maj_avoids_the_kernel_path_that_ignores_it(dtype_out):
    """aie2/mm.cc's int8 matmul never passes is_c_row_maj: built with
    C_COL_MAJ it still writes row-major blocks. The design builds it without
    the define (the memtile, or the narrowing cast, lays the columns out)
    and C comes out right."""
    op = GEMM(256, 128, 256, dtype_in="int8", dtype_out=dtype_out, c_col_maj=True).resolve(NPU1)
    design = design_of(op)
    (matmul,) = [k for k in design.kernels if k.symbol == "matmul_i8_i32"]
    assert "C_COL_MAJ" not in defines_of(matmul)
    assert design_problems(design, [MANIFEST]) == []
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (256, 128)).astype(np.int8)
    b = rng.integers(-128, 128, (128, 256)).astype(np.int8)
    (expected,) = op.call_reference(a, b)
    got = simulate(design, {"A": a, "B": b})["C"]
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


def test_npu2_bf16_gemm_multiplies_through_bfp16():
    """A row of A whose first 8 k are [1, 0.01 x 7] against ones: bfp16
    gives the 8 one exponent (1.0's), so each 0.01 becomes 1/64 and C is
    1 + 7/64 = 1.109375; in bf16 it would be 1.0703125. npu1 multiplies bf16
    as it is."""
    a = np.zeros((64, 64), ml_dtypes.bfloat16)
    a[0, :8] = [1.0] + [0.01] * 7
    b = np.ones((64, 64), ml_dtypes.bfloat16)
    op = GEMM(64, 64, 64, tile_m=16, num_aie_columns=1)
    c = {name: simulate(design_of(op.resolve(dev)), {"A": a, "B": b})["C"] for name, dev in
         (("npu1", NPU1), ("npu2", NPU2))}  # fmt: skip
    assert float(c["npu2"][0, 0]) == 1.109375
    assert float(c["npu1"][0, 0]) == 1.0703125
    assert np.all(c["npu2"][1:] == 0)
