"""The family as iron-core sees it: conformance, the spec snapshot, lazy
imports, and the `iron` command."""

from pathlib import Path

import pytest

from iron.core import Device, registry
from iron.core.cli import main
from iron.core.testing import (
    assert_snapshot_unchanged,
    check_conformance,
    check_importable_alone,
    conformance_params,
    modules_imported_by,
)
from iron.ops.eltwise.plugin import OPERATORS

SNAPSHOT = Path(__file__).parent / "spec_snapshot.json"
FAMILY_MODULES = {f"iron.ops.eltwise.{module}" for module, _ in OPERATORS.values()}


ISSUE_CATALOG = """ElementwiseAdd ElementwiseMul AXPY ReLU GELU SiLU Sigmoid Tanh LeakyReLU Clamp
    RMSNorm LayerNorm Softmax RoPE MemCopy StridedCopy Transpose Repeat Dequant
    ChunkCopy"""


def test_the_family_registers_every_operator_of_the_issue():
    assert registry.operator_names("eltwise") == sorted(ISSUE_CATALOG.split())


@pytest.mark.parametrize("item", conformance_params("eltwise"))
def test_conformance(item):
    check_conformance(item)


def test_each_operator_module_imports_alone():
    check_importable_alone(*sorted(OPERATORS))


def test_declared_cases_pin_columns_wherever_the_default_varies_with_device_width():
    """An unpinned case must resolve to the same column count on npu1 and
    npu2, or the snapshot would record a device difference nobody chose."""
    varying = []
    for name in registry.operator_names("eltwise"):
        cls = registry.get_operator(name)
        for case in cls.cases:
            if "num_aie_columns" not in cls.parameters() or "num_aie_columns" in case.params:
                continue
            columns = {
                d: cls(**case.params).resolve(Device.from_name(d)).num_aie_columns
                for d in ("npu1", "npu2")
            }
            if len(set(columns.values())) > 1:
                varying.append(f"{name}[{case.label}]: {columns}")
    assert varying == []


def test_spec_snapshot_is_unchanged():
    assert_snapshot_unchanged(SNAPSHOT)


def test_listing_imports_no_operator_module():
    for code in (
        "import iron.ops.eltwise.plugin",
        "import iron.ops.eltwise",
        "from iron.core import registry; registry.operator_names('eltwise')",
    ):
        assert modules_imported_by(code, "iron.ops") & FAMILY_MODULES == set(), code


@pytest.mark.parametrize(
    "code",
    [
        "from iron.core import registry; registry.get_operator('RMSNorm')",
        "from iron.ops.eltwise import RMSNorm",
    ],
)
def test_getting_one_operator_imports_exactly_its_module(code):
    assert modules_imported_by(code, "iron.ops") & FAMILY_MODULES == {"iron.ops.eltwise.rms_norm"}


def test_package_attributes_are_the_registered_classes():
    import iron.ops.eltwise as eltwise

    assert eltwise.RoPE is registry.get_operator("RoPE")
    assert callable(eltwise.angle_table)
    with pytest.raises(AttributeError, match="no attribute 'Conv2d'"):
        _ = eltwise.Conv2d


def test_iron_ops_show_rope_prints_its_three_specs(capsys):
    assert main(["ops", "show", "RoPE", "rows=32", "cols=64", "angle_rows=8"]) == 0
    out = capsys.readouterr().out
    assert "RoPE  (iron.ops.eltwise.rope:RoPE, family eltwise)" in out
    specs = out.split("arg specs:\n")[1].splitlines()
    assert [line.split() for line in specs[1:4]] == [
        ["in", "x", "(32,", "64)", "bf16"],
        ["in", "angles", "(8,", "64)", "bf16"],
        ["out", "y", "(32,", "64)", "bf16"],
    ]


def test_iron_ops_list_shows_the_family(capsys):
    assert main(["ops", "list", "--family", "eltwise"]) == 0
    out = capsys.readouterr().out
    assert "RMSNorm         eltwise  row-wise RMS norm, optionally weighted" in out
    assert len(out.splitlines()) == 1 + len(OPERATORS)
