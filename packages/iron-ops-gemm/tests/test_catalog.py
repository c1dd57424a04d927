"""The family as iron-core sees it: conformance, the spec snapshot, lazy
imports, and the `iron` command."""

from pathlib import Path

import pytest

from iron.core import Composite, Device, registry
from iron.core.cli import main
from iron.core.conformance import catalog_cases
from iron.core.testing import (
    assert_snapshot_unchanged,
    check_conformance,
    check_importable_alone,
    conformance_params,
    modules_imported_by,
)
from iron.ops.gemm.plugin import OPERATORS

SNAPSHOT = Path(__file__).parent / "spec_snapshot.json"
FAMILY_MODULES = {f"iron.ops.gemm.{module}" for module, _ in OPERATORS.values()}
COMPOSITES = {"DecodeAttention", "SwiGLUDecode", "SwiGLUPrefill"}


def test_the_family_registers_every_operator_of_the_issue():
    expected = ["GEMM", "GEMV", "MHA", "GQAScores", "GQAContext", "DecodeAttention"]
    assert registry.operator_names("gemm") == sorted([*expected, "SwiGLUDecode", "SwiGLUPrefill"])


@pytest.mark.parametrize("item", conformance_params("gemm"))
def test_conformance(item):
    check_conformance(item)


def test_conformance_checks_the_composites_expansions():
    composites = {i.name for i in catalog_cases("gemm") if issubclass(i.cls, Composite)}
    assert composites == COMPOSITES


def test_each_operator_module_imports_alone():
    check_importable_alone(*sorted(OPERATORS))


def test_declared_cases_pin_columns_wherever_the_default_varies_with_device_width():
    """An unpinned case must resolve to the same column count on npu1 and
    npu2, or the snapshot would record a device difference nobody chose."""
    varying = []
    for name in sorted(set(OPERATORS) - COMPOSITES - {"MHA"}):  # MHA runs on npu2 only
        cls = registry.get_operator(name)
        for case in cls.cases:
            if "num_aie_columns" in case.params:
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
        "import iron.ops.gemm.plugin",
        "import iron.ops.gemm",
        "from iron.core import registry; registry.operator_names('gemm')",
    ):
        imported = modules_imported_by(code, "iron.ops")
        assert imported & FAMILY_MODULES == set(), code
        assert not any(
            m.startswith("iron.ops.eltwise.") for m in imported - {"iron.ops.eltwise.plugin"}
        ), code


@pytest.mark.parametrize(
    "name, gemm_modules, eltwise_modules",
    [
        ("GEMM", {"gemm"}, set()),
        ("MHA", {"mha"}, set()),
        ("DecodeAttention", {"decode_attention", "gqa_scores", "gqa_context"}, {"softmax"}),
        ("SwiGLUDecode", {"swiglu_decode", "gemv"}, {"silu", "elementwise_mul"}),
        ("SwiGLUPrefill", {"swiglu_prefill", "gemm"}, {"silu", "elementwise_mul"}),
    ],
)
def test_getting_one_operator_imports_its_module_and_its_parts_only(
    name, gemm_modules, eltwise_modules
):
    for code in (
        f"from iron.core import registry; registry.get_operator({name!r})",
        f"from iron.ops.gemm import {name}",
    ):
        imported = modules_imported_by(code, "iron.ops")
        assert imported & FAMILY_MODULES == {f"iron.ops.gemm.{m}" for m in gemm_modules}
        eltwise_operators = {m for m in imported if m.startswith("iron.ops.eltwise.")}
        eltwise_operators -= {"iron.ops.eltwise.common", "iron.ops.eltwise.plugin"}
        assert eltwise_operators == {f"iron.ops.eltwise.{m}" for m in eltwise_modules}


def test_package_attributes_are_the_registered_classes():
    import iron.ops.gemm as gemm

    assert gemm.GEMM is registry.get_operator("GEMM")
    assert gemm.padded_seq_len(100, 2) == 128
    with pytest.raises(AttributeError, match="no attribute 'Conv2d'"):
        _ = gemm.Conv2d


def test_iron_ops_show_gemm_prints_b_as_shipped(capsys):
    assert main(["ops", "show", "GEMM", "M=256", "K=64", "N=512", "b_col_maj=true"]) == 0
    out = capsys.readouterr().out
    assert "GEMM  (iron.ops.gemm.gemm:GEMM, family gemm)" in out
    specs = out.split("arg specs:\n")[1].splitlines()
    assert [line.split() for line in specs[1:4]] == [
        ["in", "A", "(256,", "64)", "bf16"],
        ["in", "B", "(512,", "64)", "bf16"],
        ["out", "C", "(256,", "512)", "bf16"],
    ]
    assert "num_aie_columns = 8" in out and "tolerance: rtol 0.04, atol" in out


def test_iron_ops_show_mha_on_npu1_explains_the_refusal(capsys):
    assert main(["ops", "show", "MHA", "num_heads=8", "seq_len=128", "--device", "npu1"]) == 2
    assert "iron: MHA: device=npu1: runs on the full 8-column npu2 only" in capsys.readouterr().err


def test_iron_ops_show_a_composite_lists_its_parts(capsys):
    args = ["ops", "show", "SwiGLUDecode", "embed=2048", "hidden=8192", "--device", "npu1"]
    assert main(args) == 0
    parts = capsys.readouterr().out.split("parts:\n")[1].splitlines()
    assert [line.split(":")[0].strip() for line in parts] == [
        "GEMV",
        "GEMV",
        "SiLU",
        "ElementwiseMul",
        "GEMV",
    ]
    assert parts[0].split(": ")[1].startswith("w_gate (8192, 2048), x (2048,)")


def test_iron_ops_list_shows_the_family(capsys):
    assert main(["ops", "list", "--family", "gemm"]) == 0
    out = capsys.readouterr().out
    assert "GEMV             gemm    y = A @ x, optionally batched" in out
    assert len(out.splitlines()) == 1 + len(OPERATORS)
