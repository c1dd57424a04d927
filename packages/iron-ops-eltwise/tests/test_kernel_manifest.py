"""Every kernel the family's designs call, held against its manifest
(``kernels/manifest.json``): a file of mlir-aie at iron-design's pin or one
this package ships, its extern "C" symbol, arguments, defines, extra sources
and the constraints its source asserts, on both devices; and every shipped
source against the signatures the manifest gives it."""

import attrs
import pytest

from iron.core import Device
from iron.design import Call, aie_kernels, design_of
from iron.design.manifest import (
    MLIR_AIE_COMMIT,
    catalog_problems,
    design_problems,
    load,
    shipped_problems,
    source_key,
)
from iron.ops.eltwise import GELU, LayerNorm, RMSNorm, RoPE, SiLU, Softmax, Tanh, Transpose

MANIFEST = load("iron.ops.eltwise")
DEVICES = ("npu1", "npu2")


def test_the_manifest_is_read_at_iron_designs_pin():
    assert MANIFEST.commit == MLIR_AIE_COMMIT


@pytest.mark.parametrize("device", DEVICES)
def test_every_catalog_design_calls_kernels_at_the_pin_or_shipped_and_keeps_their_rules(device):
    """Symbol, arguments, defines, extra sources and constraints of every
    call; every mlir-aie file a kernel names has an object at the pin (at
    3ca0193ce mlir-aie has no tanh.cc, sigmoid.cc, aie2 rms_norm.cc or
    layer_norm.cc, generic/rope.cc or generic/transpose.cc, nor aie2p
    add.cc, mul.cc or relu.cc)."""
    checked, problems = catalog_problems("eltwise", Device.from_name(device), [MANIFEST])
    assert checked > 20
    assert problems == []


def test_every_shipped_source_defines_its_kernels_vectorised_without_libm():
    assert shipped_problems(MANIFEST) == []


@pytest.mark.parametrize(
    ("op", "device", "extra"),
    [
        (Softmax(rows=4, cols=64), "npu1", ["aie_runtime_lib/AIE2/lut_based_ops.cpp"]),
        (Tanh(size=2048), "npu1", ["aie_runtime_lib/AIE2/lut_based_ops.cpp"]),
        (Softmax(rows=4, cols=64), "npu2", []),
    ],
)
def test_an_object_that_reads_the_lookup_tables_links_them(op, device, extra):
    """aie2's softmax.cc includes lut_based_ops.h: its object needs the
    runtime library's include dir and lut_based_ops.cpp."""
    dev = Device.from_name(device)
    *_, kernel = design_of(op.resolve(dev)).kernels
    assert [source_key(p, dev.arch) for p in kernel.source.extra_sources] == extra
    assert [source_key(p, dev.arch) for p in kernel.source.include_dirs] == (
        ["aie_runtime_lib/AIE2"] if extra else []
    )


@pytest.mark.parametrize("device", DEVICES)
def test_the_transpose_kernel_is_built_with_the_defines_its_source_reads(device):
    (kernel,) = design_of(
        Transpose(M=64, N=128, num_aie_columns=2).resolve(Device.from_name(device))
    ).kernels
    assert kernel.flags == ("-DDIM_m=64", "-DDIM_n=64")
    assert (
        design_problems(
            design_of(Transpose(M=64, N=128).resolve(Device.from_name(device))), [MANIFEST]
        )
        == []
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "op",
    [
        RMSNorm(size=4096, tile_size=1024, weighted=True),
        LayerNorm(rows=4, cols=1024),
        RoPE(rows=8, cols=128, method="interleaved"),
        SiLU(size=2048, tile_size=256),
        GELU(size=2048, tile_size=1024),
    ],
    ids=repr,
)
def test_shapes_beyond_the_catalog_call_listed_kernels_too(op, device):
    assert design_problems(design_of(op.resolve(Device.from_name(device))), [MANIFEST]) == []


def test_a_kernel_the_manifest_does_not_list_is_named():
    """The check can fail: a design calling `tanh_bf16` from a tanh.cc."""

    design = design_of(Tanh(size=2048, tile_size=1024).resolve(Device.from_name("npu2")))
    worker = design.workers[0]
    body = tuple(
        attrs.evolve(o, kernel=attrs.evolve(o.kernel, symbol="tanh_bf16", source=aie_kernels("{arch}/tanh.cc")))
        if isinstance(o, Call) else o
        for o in worker.body
    )  # fmt: skip
    broken = attrs.evolve(design, workers=(attrs.evolve(worker, body=body), *design.workers[1:]))
    (problem, *_) = design_problems(broken, [MANIFEST])
    assert "no manifest lists tanh_bf16 in aie_kernels/aie2p/tanh.cc for aie2p" in problem
