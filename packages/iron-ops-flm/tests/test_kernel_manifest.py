"""The kernels FLMGemm's and DequantBFP's designs name, held against the
manifest (``kernels/manifest.json``): shipped in this package (mm_fused.cc
per generation, dequant_q4nx.cc), defining the symbols with the arguments
and defines the designs give them, vectorised, without libm; and their
numpy models against a float64 formula within the documented error."""

import numpy as np
import pytest

from iron.core import Device, bf16
from iron.design import design_of
from iron.design.block_float import quantize
from iron.design.manifest import (
    MLIR_AIE_COMMIT,
    catalog_problems,
    design_problems,
    load,
    shipped_problems,
)
from iron.ops.flm import FLMGemm
from iron.ops.flm.design import drain_model, mm_model, zero_model
from iron.ops.flm.packing import BFormat, Rounding

MANIFEST = load("iron.ops.flm")
NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def test_the_manifest_is_read_at_iron_designs_pin():
    assert MANIFEST.commit == MLIR_AIE_COMMIT


@pytest.mark.parametrize("device", [NPU1, NPU2], ids=["npu1", "npu2"])
def test_every_catalog_design_calls_kernels_the_manifest_lists_and_keeps_their_rules(device):
    checked, problems = catalog_problems("flm", device, [MANIFEST])
    assert checked >= (1 if device is NPU1 else 6)
    assert problems == []


def test_the_kernels_the_designs_name_are_written_vectorised_without_libm():
    """mm_fused.cc and dequant_q4nx.cc exist in the package (named by the
    designs before they were written) and define their kernels."""
    assert {
        "kernels/aie2/mm_fused.cc",
        "kernels/aie2p/mm_fused.cc",
        "kernels/dequant_q4nx.cc",
    } <= set(MANIFEST.shipped)
    assert shipped_problems(MANIFEST) == []


@pytest.mark.parametrize(
    ("params", "device"),
    [
        ({"b_format": "bf16", "epilogue_modes": ("none",)}, NPU1),  # no tables linked
        ({"b_format": "bf16", "rounding": "floor"}, NPU2),
        ({"epilogue": "silu"}, NPU2),
    ],
)
def test_other_configurations_call_listed_kernels(params, device):
    op = FLMGemm(M=256 if device is NPU1 else 512, K=1024, N=512, **params).resolve(device)
    assert design_problems(design_of(op), [MANIFEST]) == []


# ---- the models against float64 --------------------------------------------------------


@pytest.mark.parametrize("arch", ["aie2", "aie2p"])
def test_the_multiply_model_is_the_exact_product_of_what_the_core_reads_rounded_per_step(arch):
    """One call: a 32 x 128 A tile against a 128 x 64 bf16 chunk. Against
    float64 of the operands the core reads (aie2p: both through bfp16), the
    only error is the float32 accumulator's rounding, one per 8-k step:
    within 16 float32 ulps of the largest partial sum."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 128)).astype(bf16)
    b = rng.standard_normal((128, 64)).astype(bf16)
    chunk = b.reshape(16, 8, 8, 8).transpose(2, 0, 1, 3).reshape(-1)  # (tb, i, s, t)
    acc = np.zeros((64, 64), np.float32)
    mm_model(a, chunk, acc, 1, tile_n=64, ct_k=128, b_format=BFormat.BF16, arch=arch, floor=False)
    A, B = a.astype(np.float64), b.astype(np.float64)
    if arch == "aie2p":
        A, B = quantize(A, axis=1).astype(np.float64), quantize(B, axis=0).astype(np.float64)
    exact = A @ B
    bound = 16 * np.spacing(np.float32(np.abs(A) @ np.abs(B)).max())
    assert np.abs(acc[32:] - exact).max() <= bound
    assert np.all(acc[:32] == 0)


@pytest.mark.parametrize("arch", ["aie2", "aie2p"])
@pytest.mark.parametrize("epilogue", [1, 2, 3], ids=["gelu", "silu", "sigmoid"])
def test_the_drain_model_is_within_its_tanh_of_the_float64_epilogue(arch, epilogue):
    """The epilogues through a bf16 tanh (aie2: the table, within 0.0051 of
    tanh; aie2p: tanh rounded to bf16): sigmoid within half of that plus a
    bf16 rounding of the result; x sigmoid within |x| times it."""
    x = np.linspace(-12, 12, 512, dtype=np.float32)
    acc, c = x.copy().reshape(8, 64), np.empty(512, bf16)
    lo, hi = np.array([-np.inf, np.inf], np.float32).view(np.int32)
    drain_model(acc, c, 0, epilogue, lo, hi, rounding=Rounding.CONV_EVEN, arch=arch)
    assert np.all(acc == 0)
    xs = x.astype(np.float64)
    scale = {1: 1.702, 2: 1.0, 3: 1.0}[epilogue]
    sig = 1 / (1 + np.exp(-scale * xs))
    exact = sig if epilogue == 3 else xs * sig
    tanh_error = 0.0051 if arch == "aie2" else 2**-9
    allowed = (0.5 * tanh_error) * (1 if epilogue == 3 else np.abs(xs)) + 2**-8 * np.abs(exact)
    assert np.all(np.abs(c.astype(np.float64) - exact) <= allowed + 1e-6)


def test_the_zero_model_writes_positive_zeros_over_anything():
    """iron_flm_zero_bf16 stores aie::zeros: +0.0 bits in every lane,
    whatever the chunk held."""
    c = np.full(512, np.nan, bf16)
    zero_model(c)
    assert not np.any(c.view(np.uint16))
