"""Kernel manifests (`iron.design.manifest`): reading C++ signatures,
constraint expressions, checking a design's calls against a manifest, the
shipped sources against theirs, and the tool that regenerates a manifest
from an mlir-aie checkout."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import attrs
import numpy as np
import pytest

from iron.core import Device
from iron.design import Kernel, Memref, aie_kernels, aie_runtime_lib, examples
from iron.design.block_float import quantize
from iron.design.manifest import (
    Constraint,
    KernelEntry,
    Manifest,
    ManifestError,
    design_problems,
    evaluate,
    git_blob_id,
    kernel_problems,
    parse_extern_c,
    sha256,
    shipped_problems,
)

NPU1 = Device.from_name("npu1")
TOOL = Path(__file__).parents[1] / "tools" / "kernel_manifest.py"

SOURCE = r"""
// a comment with extern "C" { void fake(int x) {} }
#include <aie_api/aie.hpp>

template <int N> void helper(const bfloat16 *x) { auto v = aie::load_v<N>(x); }

extern "C" {

void plain(const bfloat16 *__restrict in_a, bfloat16 *out, int32_t n) { helper<16>(in_a); }

#ifdef WIDE
void wide(int8 *a, const int32 *b) { for (int i = 0; i < 4; i++) b[i]; }
#else
void narrow(uint8_t data[], float scale) { }
#endif

#if defined(DIM_M) && !defined(SKIP)
void sized(float *c) { }
#endif

} // extern "C"

extern "C" void single(int x) { }
"""


def test_the_extern_c_functions_of_a_source_are_read_with_types_and_guards():
    found = parse_extern_c(SOURCE)
    assert set(found) == {"plain", "wide", "narrow", "sized", "single"}
    assert found["plain"].args == (("bfloat16*", "in_a"), ("bfloat16*", "out"), ("int32_t", "n"))
    assert found["wide"].args == (("int8_t*", "a"), ("int32_t*", "b"))
    assert found["narrow"].args == (("uint8_t*", "data"), ("float", "scale"))
    assert found["single"].args == (("int32_t", "x"),)
    assert (found["wide"].guards, found["narrow"].guards, found["sized"].guards) == (
        ("WIDE",),
        (),
        ("DIM_M",),
    )
    assert "fake" not in found  # inside a comment


@pytest.mark.parametrize(
    ("rule", "names", "verdict"),
    [
        ("DIM_M % 16 == 0", {"DIM_M": "64"}, True),
        ("DIM_M % 16 == 0", {"DIM_M": "8"}, False),
        ("n <= x and n % 2 == 0", {"n": 256, "x": 256}, True),
        ("not defined(C_COL_MAJ)", {"C_COL_MAJ": "1"}, False),
        ("not defined(C_COL_MAJ)", {}, True),
        ("valid <= n", {"n": 64}, None),  # a per-call value: unknown
        ("valid <= n and n <= x", {"n": 64, "x": 32}, False),  # decided without it
        ("valid <= n and n <= x", {"n": 64, "x": 64}, None),
        ("A * B == c", {"A": "4", "B": "8", "c": 32}, True),
    ],
)
def test_a_constraint_is_evaluated_over_defines_and_arguments(rule, names, verdict):
    assert evaluate(rule, names) is verdict


@pytest.mark.parametrize("rule", ["__import__('os')", "x.y == 1", "[1][0] == 1", "f(x) == 1"])
def test_a_constraint_is_an_expression_not_code(rule):
    with pytest.raises(ManifestError, match="constraint"):
        Constraint(rule, "here")


# ---- a manifest over iron.design's own add_one kernel --------------------------------------

ADD_ONE = Path(__file__).parents[1] / "src" / "iron" / "design" / "kernels" / "add_one.cc"


def manifest(**entry) -> Manifest:
    fields = {
        "symbol": "add_one_i32",
        "source": "kernels/add_one.cc",
        "archs": ("aie2", "aie2p"),
        "args": (("int32_t*", "x"), ("int32_t*", "y"), ("int32_t", "n")),
        "constraints": [{"rule": "n <= x and n <= y", "cites": "kernels/add_one.cc: n values"}],
        "vector": False,
    } | entry
    digest = sha256(ADD_ONE.read_bytes())
    return Manifest(
        "iron.design", "0" * 40, {}, {"kernels/add_one.cc": digest}, [KernelEntry(**fields)]
    )


def test_a_design_whose_calls_match_its_manifest_has_no_problems():
    assert design_problems(examples.add_one(NPU1), [manifest()]) == []


def test_each_mismatch_of_a_call_is_named():
    design = examples.add_one(NPU1)
    (kernel,) = design.kernels
    strict = manifest(
        defines=("WIDTH",),
        constraints=[{"rule": "n % 4096 == 0", "cites": "kernels/add_one.cc: whole lines"}],
    )
    problems = design_problems(design, [strict])
    assert problems == [
        "add_one: worker adder: kernel add_one_i32 on aie2: built without WIDTH, which "
        "kernels/add_one.cc needs",
        "add_one: worker adder: kernel add_one_i32 on aie2: breaks n % 4096 == 0 "
        "(kernels/add_one.cc: whole lines) with n=1024",
    ]
    wrong = attrs.evolve(kernel, args=(Memref(1024, "i32"), Memref(1024, "i32")))
    (problem,) = kernel_problems([manifest()], wrong, "aie2")
    assert "arguments (int32_t*, int32_t*); kernels/add_one.cc defines add_one_i32(" in problem
    (problem,) = kernel_problems([manifest(archs=("aie2p",))], kernel, "aie2")
    assert problem.endswith("no manifest lists add_one_i32 in kernels/add_one.cc for aie2")


def test_extra_sources_and_include_dirs_must_be_what_the_object_needs():
    lut = "aie_runtime_lib/AIE2/lut_based_ops.cpp"
    listed = Manifest(
        "iron.design",
        "0" * 40,
        {"aie_kernels/aie2/gelu.cc": "1" * 40, lut: "2" * 40, "aie_runtime_lib/AIE2": "3" * 40},
        {},
        [
            KernelEntry(
                "gelu_bf16",
                "aie_kernels/aie2/gelu.cc",
                ("aie2",),
                (("bfloat16*", "input"), ("bfloat16*", "output")),
                extra_sources=(lut,),
                include_dirs=("aie_runtime_lib/AIE2",),
            )
        ],
    )
    line = Memref(1024, "bf16")
    bare = Kernel("gelu_bf16", (line, line), aie_kernels("{arch}/gelu.cc"), np.copyto)
    problems = kernel_problems([listed], bare, "aie2")
    assert problems == [
        f"kernel gelu_bf16 on aie2: extra sources []; its object needs [{lut}]",
        "kernel gelu_bf16 on aie2: include dirs []; its object needs [aie_runtime_lib/AIE2]",
    ]
    built = attrs.evolve(
        bare,
        source=aie_kernels(
            "{arch}/gelu.cc",
            extra_sources=(aie_runtime_lib("AIE2/lut_based_ops.cpp"),),
            include_dirs=(aie_runtime_lib("AIE2"),),
        ),
    )
    assert kernel_problems([listed], built, "aie2") == []


def test_a_manifest_refuses_a_constraint_on_a_name_it_does_not_have():
    with pytest.raises(ManifestError, match="reads count, neither an argument nor a define"):
        manifest(constraints=[{"rule": "count <= x", "cites": "nowhere"}])


def test_the_json_form_round_trips():
    original = manifest(defines=("WIDTH",), note="a note", when="WIDTH > 0")
    assert Manifest.from_json(json.loads(json.dumps(original.to_json()))) == original


def test_an_entry_describes_the_builds_its_when_holds_for():
    wide = manifest(when="defined(WIDE)")
    (kernel,) = examples.add_one(NPU1).kernels
    assert wide.entry_for(kernel, "aie2") is None
    assert wide.entry_for(attrs.evolve(kernel, flags=("-DWIDE",)), "aie2") is not None


# ---- shipped sources -------------------------------------------------------------------


def test_shipped_sources_are_held_to_their_entries(tmp_path, monkeypatch):
    """A package of its own: each fault named, and a clean package passes."""
    root = tmp_path / "shipped_fixture"
    (root / "kernels").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    good = SOURCE
    (root / "kernels" / "k.cc").write_text(good)

    def entry(symbol, args, **more):
        return KernelEntry(symbol, "kernels/k.cc", ("aie2",), args, **more)

    entries = [
        entry("plain", (("bfloat16*", "in_a"), ("bfloat16*", "out"), ("int32_t", "n"))),
        entry("wide", (("int8_t*", "a"), ("int32_t*", "b")), defines=("WIDE",), vector=False),
    ]

    def checked(text, kernels=entries):
        (root / "kernels" / "k.cc").write_text(text)
        return shipped_problems(
            Manifest(
                "shipped_fixture", "0" * 40, {}, {"kernels/k.cc": sha256(text.encode())}, kernels
            )
        )

    assert checked(good) == []
    assert checked(good.replace("int32_t n", "int16_t n")) == [
        "plain (kernels/k.cc, aie2): kernels/k.cc defines (bfloat16* in_a, bfloat16* out, int16_t n)"
    ]
    assert checked(good.replace("aie::load_v<N>(x)", "x[0]")) == [
        "plain (kernels/k.cc, aie2): its code reaches no AIE API vector: a scalar kernel"
    ]
    assert checked(good.replace("b[i];", "b[i] + expf(1.0f);")) == [
        "shipped_fixture: kernels/k.cc calls expf(: libm on a core"
    ]
    unlisted = [entry("wide", (("int8_t*", "a"), ("int32_t*", "b")), vector=False)]
    assert checked(good, unlisted) == [
        "wide (kernels/k.cc, aie2): defined only under WIDE, which it does not list"
    ]
    (root / "kernels" / "k.cc").write_text(good + "// edited\n")
    stale = Manifest("shipped_fixture", "0" * 40, {}, {"kernels/k.cc": sha256(good.encode())}, [])
    assert shipped_problems(stale)[0].endswith(
        "(regenerate it with tools/kernel_manifest.py and review the diff)"
    )


# ---- block floats ------------------------------------------------------------------------


def test_bfp16_blocks_run_along_the_axis_asked():
    x = np.ones((8, 8), np.float32)
    x[0, 1] = 0.01  # a block of row 0 along axis 1; of column 1 along axis 0
    rows, cols = quantize(x, axis=1), quantize(x, axis=0)
    assert rows[0, 1] == 1 / 64 and cols[0, 1] == 1 / 64  # one exponent (1.0's) either way
    x[1:, 1] = 100.0
    assert quantize(x, axis=1)[0, 1] == 1 / 64 and quantize(x, axis=0)[0, 1] == 0.0


# ---- the regeneration tool ---------------------------------------------------------------


def _tool():
    spec = importlib.util.spec_from_file_location("kernel_manifest_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("git") is None, reason="the tool reads mlir-aie through git")
def test_the_tool_refreshes_object_ids_digests_and_signatures(tmp_path, monkeypatch):
    repo = tmp_path / "mlir-aie"
    (repo / "aie_kernels" / "aie2").mkdir(parents=True)
    text = 'extern "C" {\nvoid scale(bfloat16 *x, int32_t n) { }\n}\n'
    (repo / "aie_kernels" / "aie2" / "scale.cc").write_text(text)

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pin")
    package = tmp_path / "tool_fixture"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels" / "ours.cc").write_text('extern "C" void ours(float *y) { }\n')
    path = package / "kernels" / "manifest.json"
    stale = {
        "format": 1,
        "package": "tool_fixture",
        "mlir_aie": {"commit": "0" * 40, "objects": {"aie_kernels/aie2/scale.cc": "0" * 40}},
        "shipped": {"kernels/ours.cc": "0" * 64},
        "kernels": [
            {
                "symbol": "scale",
                "source": "aie_kernels/aie2/scale.cc",
                "archs": ["aie2"],
                "args": [],
            },
            {"symbol": "ours", "source": "kernels/ours.cc", "archs": ["aie2"], "args": []},
        ],
    }
    path.write_text(json.dumps(stale))
    tool = _tool()
    assert tool.main(["--mlir-aie", str(repo), "--commit", "HEAD", str(path)]) == 1
    assert tool.main(["--mlir-aie", str(repo), "--commit", "HEAD", "--write", str(path)]) == 0
    fresh = Manifest.from_json(json.loads(path.read_text()))
    assert fresh.mlir_aie == {"aie_kernels/aie2/scale.cc": git_blob_id(text.encode())}
    assert fresh.kernels[0].args == (("bfloat16*", "x"), ("int32_t", "n"))
    assert fresh.kernels[1].args == (("float*", "y"),)
    assert tool.main(["--mlir-aie", str(repo), "--commit", "HEAD", str(path)]) == 0
