"""Host kernels (the cpu backend's): each against its operator's reference,
the same bits where the arithmetic is exact in float32 (adds, products,
rotations: one rounding either way) and at most one bf16 step apart where
exp, a sum's order or a square root can tip a rounding; and a StridedCopy
writes its window alone."""

import numpy as np
import pytest

from iron.core import bf16, registry
from iron.ops.eltwise import (
    ElementwiseAdd,
    ElementwiseMul,
    RMSNorm,
    RoPE,
    SiLU,
    Softmax,
    StridedCopy,
    host,
)
from iron.ops.eltwise.host import strided_copy, warm_up


def normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(bf16)


def run(op, inputs, **per_call):
    """The host kernel's outputs, from output buffers filled with NaN first
    (bytes it never wrote cannot pass for results)."""
    outputs = [np.full(s.shape, np.nan, s.dtype) for s in op.arg_specs() if not s.reads]
    module, _, name = type(op).host.partition(":")
    assert module == "iron.ops.eltwise.host"
    getattr(host, name)(op, *inputs, *outputs, **per_call)
    return outputs


def bf16_steps_apart(a, b) -> int:
    """The most bf16 steps between two same-shape arrays' elements (their
    bits as sign-magnitude integers on one line); NaN only matches NaN."""

    def line(x):
        bits = x.view(np.uint16).astype(np.int64)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)

    nan_a, nan_b = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    assert (nan_a == nan_b).all(), "NaN where the reference has none (or the reverse)"
    return int(np.abs(line(a) - line(b))[~nan_a].max(initial=0))


def cases():
    rng = np.random.default_rng(3)
    wide = normal(rng, 4096, 8.0)  # SiLU's tails: exp of large |x|
    return [
        ("add", ElementwiseAdd(size=4096), [normal(rng, 4096), normal(rng, 4096)], {}, 0),
        ("mul", ElementwiseMul(size=4096), [normal(rng, 4096), normal(rng, 4096)], {}, 0),
        ("rope-halves", RoPE(rows=32, cols=64, angle_rows=8),
         [normal(rng, (32, 64)), normal(rng, (8, 64))], {}, 0),
        ("rope-interleaved", RoPE(rows=8, cols=64, angle_rows=1, method="interleaved"),
         [normal(rng, (8, 64)), normal(rng, (1, 64))], {}, 0),
        ("silu", SiLU(size=4096), [wide], {}, 1),
        ("rms-norm", RMSNorm(size=4 * 2048, tile_size=2048, weighted=True, eps=1e-5),
         [normal(rng, (4, 2048), 3.0), normal(rng, 2048)], {}, 1),
        ("rms-norm-plain", RMSNorm(size=1024, tile_size=256), [normal(rng, (4, 256))], {}, 1),
        ("softmax", Softmax(rows=32, cols=256), [normal(rng, (32, 256), 4.0)],
         {"valid": 200}, 1),
        ("softmax-all", Softmax(rows=8, cols=64), [normal(rng, (8, 64))], {"valid": None}, 1),
    ]  # fmt: skip


@pytest.mark.parametrize("name, op, inputs, per_call, steps", cases(), ids=lambda c: c)
def test_host_kernel_is_its_reference_within_one_rounding(name, op, inputs, per_call, steps):
    (got,) = run(op, inputs, **per_call)
    want = op.reference(*inputs, **per_call)
    assert got.dtype == want.dtype == bf16
    assert bf16_steps_apart(got, want) <= steps


def test_softmax_kernel_zeroes_past_valid_and_refuses_a_bad_one():
    op = Softmax(rows=4, cols=64)
    x = normal(np.random.default_rng(0), (4, 64))
    (y,) = run(op, [x], valid=5)
    assert (y[:, 5:] == 0).all() and np.allclose(
        y[:, :5].astype(np.float32).sum(axis=1), 1, atol=0.02
    )
    with pytest.raises(Exception, match="valid=65"):
        run(op, [x], valid=65)


def test_rope_kernel_may_write_over_its_input():
    rng = np.random.default_rng(4)
    op = RoPE(rows=8, cols=64, angle_rows=2)
    x, angles = normal(rng, (8, 64)), normal(rng, (2, 64))
    want = op.reference(x, angles)
    host.rope(op, x, angles, x)
    assert x.tobytes() == want.tobytes()


def test_a_step_that_is_not_bf16_runs_the_reference():
    op = ElementwiseAdd(size=1024)
    a, b = np.linspace(-1, 1, 1024, dtype=np.float32), np.ones(1024, np.float32)
    y = np.full(1024, np.nan, np.float32)
    host.elementwise_add(op, a, b, y)
    assert np.array_equal(y, op.reference(a, b).astype(np.float32))


@pytest.mark.parametrize("case", StridedCopy.cases, ids=lambda c: str(c.params["sizes"]))
def test_strided_copy_writes_the_reference_bits_into_its_window_alone(case):
    op = StridedCopy(**case.params)
    x_spec, y_spec = op.arg_specs()
    x = np.arange(x_spec.shape[0]).astype(x_spec.dtype)
    y = np.full(y_spec.shape, -1, y_spec.dtype)
    offsets = {"in_offset": 0, "out_offset": y_spec.shape[0] - op.count}
    want = op.reference(x, y, **offsets)
    before = y.ctypes.data
    strided_copy(op, x, y, **offsets)
    assert y.tobytes() == want.tobytes() and y.ctypes.data == before


def test_strided_copy_names_its_host_kernel_and_checks_offsets():
    assert registry.get_operator("StridedCopy").host == "iron.ops.eltwise.host:strided_copy"
    op = StridedCopy(512, 8192, sizes=(512,), strides=(1,))
    with pytest.raises(Exception, match="out_offset=8000: out of range"):
        strided_copy(op, np.zeros(512, bf16), np.zeros(8192, bf16), in_offset=0, out_offset=8000)


def test_operators_name_their_host_kernels_and_warm_up_reports_the_jit():
    for op_class in (ElementwiseAdd, ElementwiseMul, RMSNorm, RoPE, SiLU, Softmax):
        module, _, name = op_class.host.partition(":")
        assert module == "iron.ops.eltwise.host" and callable(getattr(host, name))
    report = warm_up()
    assert report["seconds"] >= 0 and report["compiled"] >= 0


def test_warm_up_says_what_it_does_kernel_by_kernel():
    heard = []
    report = warm_up(heard.append)
    assert len(heard) == 6 and heard[0].endswith("(1 of 6: iron.ops.eltwise.host._add)")
    assert all(t.startswith(("loading compiled kernels", "JIT compiling kernels")) for t in heard)
    assert report["cache_dir"] == str(host.kernel_cache_dir("iron.ops.eltwise.host"))


PROBE = """
from numba import njit

import iron.ops.eltwise.host  # where iron's kernels are cached


@njit(cache=True)
def twice(x):
    return 2 * x
"""

RUN_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from iron.probe_kernels import twice
assert twice(21) == 42
print(twice.stats.cache_path, twice.stats.cache_hits.total(), twice.stats.cache_misses.total())
"""


def test_kernels_are_cached_in_the_user_cache_and_loaded_by_any_copy_of_the_code(tmp_path):
    """Two copies of one module (two venvs, two clones) share compiled code
    through IRON_CACHE_HOME/numba/<module>: the second compiles nothing."""
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache"
    runs = []
    for copy in ("one", "two"):
        (tmp_path / copy / "iron").mkdir(parents=True)
        (tmp_path / copy / "iron" / "probe_kernels.py").write_text(PROBE)
        env = {**os.environ, "IRON_CACHE_HOME": str(cache)}
        env.pop("NUMBA_CACHE_DIR", None)
        env.pop("IRON_KERNEL_CACHE", None)  # the default: under IRON_CACHE_HOME
        found = subprocess.run(
            [sys.executable, "-c", RUN_PROBE, str(tmp_path / copy)],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        runs.append(found.stdout.split())
    where = str(cache / "numba" / "iron.probe_kernels")
    assert runs == [[where, "0", "1"], [where, "1", "0"]]
