"""The family as iron-core sees it: conformance, lazy listing, a light
package import, dependencies, and the spec snapshot."""

import ast
import sys
from pathlib import Path

import pytest

from iron.core import registry
from iron.core.testing import (
    assert_snapshot_unchanged,
    check_conformance,
    check_importable_alone,
    conformance_params,
    modules_imported_by,
)

HERE = Path(__file__).parent
SOURCES = HERE.parent / "src" / "iron" / "ops" / "flm"
OPERATORS = [
    "DecodeLayer",
    "DequantBFP",
    "FLMGemm",
    "LMHead",
    "PrefillAttention",
    "PrefillSlidingAttention",
]


@pytest.mark.parametrize("item", conformance_params("flm"))
def test_conformance(item):
    check_conformance(item)


def test_catalog_lists_the_family():
    assert registry.operator_names("flm") == OPERATORS
    entries = {e.name: e.target for e in registry.operators("flm")}
    assert entries["FLMGemm"] == "iron.ops.flm.gemm:FLMGemm"


def test_each_operator_imports_alone():
    check_importable_alone(*OPERATORS)


def test_listing_imports_no_operator_module():
    loaded = modules_imported_by("from iron.core import registry; registry.operator_names('flm')")
    assert "iron.ops.flm.plugin" in loaded
    assert not {m for m in loaded if m.startswith("iron.ops.flm.") and m != "iron.ops.flm.plugin"}


def test_package_import_is_light():
    loaded = modules_imported_by("import iron.ops.flm")
    assert {m for m in loaded if m.startswith("iron.ops.flm.")} == {"iron.ops.flm.plugin"}


@pytest.mark.parametrize(
    "name, module, other",
    [
        ("FLMGemm", "gemm", "dequant"),
        ("DequantBFP", "dequant", "gemm"),
        ("LMHead", "lm_head", "decode_layer"),
        ("PrefillAttention", "prefill_attention", "prefill_sliding_attention"),
        ("DecodeLayer", "decode_layer", "decode_design"),
    ],
)
def test_package_attributes_import_their_own_module(name, module, other):
    loaded = modules_imported_by(f"from iron.ops.flm import {name}")
    assert f"iron.ops.flm.{module}" in loaded and f"iron.ops.flm.{other}" not in loaded
    assert "iron.ops.flm.host" not in loaded and "numba" not in loaded  # the cpu extra


def test_package_attributes_are_the_registered_classes():
    import iron.ops.flm as flm
    from iron.ops.flm import DequantBFP, FLMGemm

    assert FLMGemm is registry.get_operator("FLMGemm")
    assert DequantBFP is registry.get_operator("DequantBFP")
    assert dir(flm) == OPERATORS
    with pytest.raises(AttributeError, match="no attribute 'pack_b'"):
        flm.pack_b  # noqa: B018


def test_no_namespace_init_files():
    assert not (SOURCES.parents[1] / "__init__.py").exists()  # iron/
    assert not (SOURCES.parent / "__init__.py").exists()  # iron/ops/


def test_imports_nothing_but_iron_core_iron_design_numpy_ml_dtypes_attrs():
    """And numba (with llvmlite) in the host kernels' module only: the cpu extra."""
    allowed = {"iron", "numpy", "ml_dtypes", "attrs", "__future__"} | set(sys.stdlib_module_names)
    imported = set()
    host = ast.parse((SOURCES / "host.py").read_text())
    host_imports = {
        alias.name for n in ast.walk(host) if isinstance(n, ast.Import) for alias in n.names
    }
    host_imports |= {n.module for n in ast.walk(host) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in host_imports} - allowed == {"numba", "llvmlite"}
    for path in SOURCES.glob("*.py"):
        if path.name == "host.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module)
    assert {name.split(".")[0] for name in imported} <= allowed
    iron = {name for name in imported if name.split(".")[0] == "iron"}
    assert all(name.startswith(("iron.core", "iron.design", "iron.ops.flm")) for name in iron), iron


def test_spec_snapshot_is_current():
    assert_snapshot_unchanged(HERE / "spec_snapshot.json")
