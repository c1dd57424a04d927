import os
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
from core_fakes import CopyAt, RowNorm, Square, SquarePlusOne

from iron.core import (
    ArgSpec,
    BindError,
    Device,
    Operator,
    OperatorError,
    Tolerance,
    as_dtype,
    bf16,
    same_shape_unary,
)


@attrs.frozen
class Rows(Operator):
    size: int
    cols: int

    @property
    def rows(self):
        return self.size // self.cols

    @staticmethod
    def arg_spec(rows, cols, dtype=np.float32):
        return same_shape_unary((rows, cols), dtype)


@attrs.frozen
class Typed(Operator):
    size: int
    dtype: np.dtype = attrs.field(default=bf16, converter=as_dtype)

    @staticmethod
    def arg_spec(size, dtype):
        return same_shape_unary(size, dtype)


@attrs.frozen
class Holder(Operator):
    thing: object = None


def test_a_shape_rule_or_design_asking_for_what_no_field_supplies_fails_at_definition():
    with pytest.raises(
        BindError,
        match=r"RenamedNorm.arg_spec takes tile, which no field or property of RenamedNorm "
        "supplies: rename the parameter to match a field, add the property, or give it a default",
    ):

        @attrs.frozen
        class RenamedNorm(Operator):
            """Its shape rule still asks for `tile`, but the field was renamed."""

            size: int
            tile_size: int

            @staticmethod
            def arg_spec(size, tile):
                return same_shape_unary((size // tile, tile))

    with pytest.raises(BindError, match=r"Designed.design takes columns, which no field"):

        @attrs.frozen
        class Designed(Rows):
            @staticmethod
            def design(rows, columns, device):
                return None

    @attrs.frozen
    class Inherited(Rows):  # fields, properties and defaults of its bases supply it
        @staticmethod
        def design(size, rows, cols, device, extra=1):
            return None

    assert Inherited(size=64, cols=8).bind(Inherited.design) == {
        "size": 64, "rows": 8, "cols": 8, "device": None
    }  # fmt: skip


def test_binding_fills_defaults_properties_and_lets_explicit_win():
    op = Rows(size=1024, cols=64)
    x, _ = op.arg_specs()
    assert x.shape == (16, 64) and x.dtype == np.float32  # property + default
    assert op.bind(Rows.arg_spec, rows=2) == {
        "rows": 2,
        "cols": 64,
    }  # explicit wins; dtype keeps its default
    with pytest.raises(BindError, match="takes no parameter bogus"):
        op.bind(Rows.arg_spec, bogus=1)


def test_design_functions_bind_like_shape_rules():
    def design(size, tile_size, columns=1, *args, **kwargs):
        return size, tile_size, columns

    op = RowNorm(size=1024, tile_size=256)
    assert design(**op.bind(design)) == (1024, 256, 1)
    assert design(**op.bind(design, columns=4, extra=1)) == (1024, 256, 4)


def test_validation_names_operator_parameter_and_rule():
    with pytest.raises(
        OperatorError, match=r"RowNorm: size=1000: a whole number of rows of tile_size"
    ):
        RowNorm(size=1000, tile_size=256)


def test_resolve_fills_tunables_and_rechecks_with_the_device():
    npu1, npu2 = Device.from_name("npu1"), Device.from_name("npu2")
    op = RowNorm(size=1024, tile_size=128)
    assert op.device is None and op.num_columns is None
    resolved = op.resolve(npu2)
    assert resolved.device == npu2 and resolved.num_columns == 8
    assert op.resolve(npu1).num_columns == 4
    assert (
        RowNorm(size=1024, tile_size=128, num_columns=2).resolve(npu2).num_columns == 2
    )  # given wins
    with pytest.raises(
        OperatorError, match=r"RowNorm: num_columns=8: at most the device's 4 columns"
    ):
        RowNorm(size=1024, tile_size=128, num_columns=8).resolve(npu1)
    assert resolved.resolve(npu2) is resolved


def test_identity_covers_parameters_dtypes_and_device_but_not_per_call_values():
    npu2 = Device.from_name("npu2")
    a = RowNorm(size=1024, tile_size=256).resolve(npu2)
    assert a.identity() == RowNorm(size=1024, tile_size=256).resolve(npu2).identity()
    assert a.identity() != RowNorm(size=2048, tile_size=256).resolve(npu2).identity()
    assert (
        a.identity()
        != RowNorm(size=1024, tile_size=256).resolve(Device.from_name("npu1")).identity()
    )
    assert Typed(64).identity() != Typed(64, dtype="int8").identity()
    assert CopyAt(size=8, rows=4).identity() == CopyAt(size=8, rows=4, offset=3).identity()
    assert "offset" not in CopyAt(size=8, rows=4).identity_text()


IDENTITY_SCRIPT = """
from core_fakes import RowNorm
from iron.core import Device
print(RowNorm(size=1024, tile_size=256).resolve(Device.from_name("npu2")).identity())
"""


def test_identity_is_the_same_in_another_process():
    here = RowNorm(size=1024, tile_size=256).resolve(Device.from_name("npu2")).identity()
    digests = []
    for seed in ("1", "2"):  # different hash seeds: identity must not depend on hash()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", IDENTITY_SCRIPT], capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stderr
        digests.append(run.stdout.strip())
    assert digests == [here, here]


def test_identity_refuses_a_parameter_that_prints_an_address():
    with pytest.raises(
        OperatorError, match=r"Holder: thing=<object object at 0x[0-9a-f]+>: .*object address"
    ):
        Holder(thing=object()).identity()
    assert Holder(thing=(1, "a")).identity()  # stable text is fine


def test_call_reference_supplies_per_call_values():
    op = CopyAt(size=4, rows=3, offset=1)
    x = np.arange(4).astype(bf16)
    cache = np.zeros((3, 4), bf16)
    (out,) = op.call_reference(x, cache)
    assert out[1].tolist() == [0, 1, 2, 3] and not out[[0, 2]].any()
    (out,) = op.call_reference(x, cache, offset=2)
    assert out[2].tolist() == [0, 1, 2, 3] and not out[[0, 1]].any()
    with pytest.raises(TypeError, match="CopyAt has no per-call member valid"):
        op.call_reference(x, cache, valid=1)
    assert CopyAt.per_call_members() == {"offset": np.dtype(np.int32)}
    assert CopyAt.parameters() == ["size", "rows"]


def test_composite_has_no_spec_of_its_own():
    op = SquarePlusOne(size=16)
    assert [s.shape for s in op.input_specs()] == [(16,)]
    with pytest.raises(TypeError, match="SquarePlusOne is a composite"):
        op.arg_specs()


def test_missing_shape_rule_and_tolerance_are_reported():
    op = Holder()
    with pytest.raises(NotImplementedError, match="Holder declares no arg_spec"):
        op.arg_specs()
    with pytest.raises(NotImplementedError, match="Holder defines no tolerance"):
        op.tolerance()
    assert isinstance(Square(8).tolerance(), Tolerance)


def test_example_inputs_follow_the_reads():
    op = RowNorm(size=512, tile_size=128, weighted=True)
    x, w = op.example_inputs(np.random.default_rng(0))
    assert x.shape == (4, 128) and w.shape == (128,) and x.dtype == bf16
    assert [s.name for s in op.arg_specs() if isinstance(s, ArgSpec)] == ["x", "weight", "y"]
