"""The cpu backend: host kernels where operators name one, references
elsewhere, the same bits as the reference backend for exact operators."""

import logging
import os
import sys
import threading

import attrs
import numpy as np
import pytest
from dispatch_fakes import (
    GROUPS,
    HOST_WRITES,
    ROWS,
    WARM_UP_GATE,
    WARM_UPS,
    Add,
    N,
    Scale,
    ScaleTogether,
    expected_outputs,
    make_host_model,
)

from iron.core import bf16
from iron.dispatch import Backend, get_backend, graph
from iron.dispatch.backends import cpu
from iron.dispatch.host import HostKernels, warm_elsewhere

CALLS = [(4, 0, 21), (1, 4, 22), (1, 5, 23), (3, 6, 24)]  # rows, pos, seed: prefill then decodes


def test_cpu_runs_host_kernels_in_place_and_matches_the_reference_bits():
    w = np.random.default_rng(11).standard_normal(N).astype(bf16)
    calls = [
        (np.random.default_rng(s).standard_normal((n, N)).astype(bf16), p) for n, p, s in CALLS
    ]
    HOST_WRITES.clear()
    model = make_host_model(w)
    got = [model(x, pos=pos) for x, pos in calls]
    assert [g.tobytes() for g in got] == [e.tobytes() for e in expected_outputs(w, calls)]
    # every cache row was written by WriteRow's host kernel, never its reference
    assert HOST_WRITES == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert model.backend.name == "cpu"


def test_the_host_kernel_writes_only_its_row():
    """An INOUT step's kernel leaves the rest of the state as it was: no
    whole-state copy can hide here, because the other rows are marked."""
    w = np.ones(N, bf16)
    model = make_host_model(w)
    model.compile(((1, N), bf16))
    marked = np.full((ROWS, N), 7, bf16)
    model.write_state("cache", marked)
    buffer = model.residents.memory.buffer.host
    before = buffer.ctypes.data
    model(np.ones((1, N), bf16), pos=3)
    cache = model.read_state("cache")
    assert (cache[3] == 1).all() and (np.delete(cache, 3, axis=0) == 7).all()
    assert model.residents.memory.buffer.host.ctypes.data == before


@attrs.frozen
class Unreachable(Scale):
    host = "no_such_module_anywhere:kernel"


def test_a_host_kernel_that_cannot_be_imported_falls_back_to_the_reference(caplog):
    @graph(backend="cpu")
    def double(g, x):
        return g(Unreachable(N, 2.0), x)

    x = np.arange(N).astype(bf16)
    with caplog.at_level(logging.WARNING, logger="iron.dispatch"):
        y = double(x)
    assert y.tobytes() == (x.astype(np.float32) * 2).astype(bf16).tobytes()
    assert "no_such_module_anywhere:kernel cannot be imported" in caplog.text


def test_independent_consecutive_steps_run_together_through_host_steps():
    """x*2 and x*3 together; x*4 reads x*2's output, so it starts another
    group, which x*5 (independent of it while x*2's output stays live)
    joins; the adds end it."""

    def forward(g, x):
        a, b = g(ScaleTogether(N, 2.0), x), g(ScaleTogether(N, 3.0), x)
        c, d = g(ScaleTogether(N, 4.0), a), g(ScaleTogether(N, 5.0), x)
        return g(Add(N), g(Add(N), g(Add(N), a, b), c), d)

    x = np.random.default_rng(5).standard_normal(N).astype(bf16)
    want = graph(forward, backend="reference")(x)
    GROUPS.clear()
    got = graph(forward, backend="cpu")(x)
    assert GROUPS == [[2.0, 3.0], [4.0, 5.0]]
    assert got.tobytes() == want.tobytes()


def test_reference_backend_ignores_host_kernels():
    w = np.ones(N, bf16)
    HOST_WRITES.clear()
    make_host_model(w, backend="reference")(np.ones((2, N), bf16), pos=0)
    assert HOST_WRITES == []


def test_cpu_is_registered_unified_fused_only_and_always_available():
    backend = get_backend("cpu")
    assert isinstance(backend, Backend) and isinstance(backend, cpu.CpuBackend)
    assert backend.available()[0] and backend.unified and backend.modes == ("fused",)
    with pytest.raises(ValueError, match="backend 'cpu' has no mode 'compare'"):
        backend.check_mode("compare")


def test_a_kernel_module_warms_up_once_per_session_before_any_step_runs():
    WARM_UPS.clear()
    model = make_host_model(np.ones(N, bf16))
    model.compile(((1, N), bf16))
    model.compile(((2, N), bf16))
    writes = len(HOST_WRITES)
    model(np.ones((1, N), bf16), pos=0)
    assert [writes] == WARM_UPS
    model(np.ones((2, N), bf16), pos=1)
    assert [writes] == WARM_UPS
    make_host_model(np.ones(N, bf16))(np.ones((1, N), bf16), pos=0)  # a session of its own
    assert [writes, writes + 3] == WARM_UPS  # after the 1 + 2 rows of the calls above


def test_kernel_modules_warm_up_in_the_background_and_load_waits_for_them(monkeypatch):
    WARM_UPS.clear()
    WARM_UP_GATE.clear()
    started_before_load = []
    load = cpu.CpuBackend.load

    def recording_load(self, *args, **kwargs):
        started_before_load.extend(self.kernels._modules)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(cpu.CpuBackend, "load", recording_load)
    try:
        model = make_host_model(np.ones(N, bf16))
        model.compile(((1, N), bf16))  # returns while the warm-up is held
        assert WARM_UPS == []
        assert started_before_load == ["dispatch_fakes"]  # compiling started the import
        threading.Timer(0.2, WARM_UP_GATE.set).start()
        model.load()
        assert [len(HOST_WRITES)] == WARM_UPS
    finally:
        WARM_UP_GATE.set()


@pytest.mark.parametrize("backend", ["cpu", "reference", "sim"])
def test_a_weight_held_in_place_is_read_where_it_lies_where_memory_is_the_hosts(backend):
    """A read-only weight (as a checkpoint's mapping hands it out) that
    `in_place` accepts is not copied on a unified backend: the results are
    the same bits, its arena bytes stay untouched, and reloading copies it."""
    w = np.random.default_rng(11).standard_normal(N).astype(bf16)
    mapped = w.copy()
    mapped.flags.writeable = False
    calls = [
        (np.random.default_rng(s).standard_normal((n, N)).astype(bf16), p) for n, p, s in CALLS
    ]
    model = make_host_model(mapped, backend)
    model.compile(((4, N), bf16))
    assert model.load(in_place=lambda array: array is mapped) == w.nbytes
    unified = model.backend.unified
    assert model.held_in_place() == (["w"] if unified else [])
    weight = model.residents.weights["w"]
    arena = model.residents.memory.buffer.host
    got = [model(x, pos=pos) for x, pos in calls]
    assert [g.tobytes() for g in got] == [e.tobytes() for e in expected_outputs(w, calls)]
    assert arena[weight.offset : weight.offset + weight.nbytes].any() == (not unified)
    # the arena grows (as for a larger version): bytes held in place are not copied over
    # (the new arena's pages there stay untouched), marked bytes in the old arena show it
    buffer = model.residents.memory.buffer
    if unified:
        arena[weight.offset : weight.offset + weight.nbytes] = 0xAB
    buffer.grow(buffer.nbytes + 4096)
    arena = buffer.host
    assert arena[weight.offset : weight.offset + weight.nbytes].any() == (not unified)
    model.write_state("cache", np.zeros((ROWS, N), bf16))
    again = [model(x, pos=pos) for x, pos in calls]
    assert [g.tobytes() for g in again] == [g.tobytes() for g in got]

    model.reload_weights("w")
    assert model.held_in_place() == []
    assert arena[weight.offset : weight.offset + weight.nbytes].tobytes() == w.tobytes()
    model.write_state("cache", np.zeros((ROWS, N), bf16))
    again = [model(x, pos=pos) for x, pos in calls]
    assert [g.tobytes() for g in again] == [g.tobytes() for g in got]


def test_load_refuses_an_in_place_rule_that_is_not_callable():
    model = make_host_model(np.ones(N, bf16))
    model.compile(((1, N), bf16))
    with pytest.raises(TypeError, match="in_place must be callable or None"):
        model.load(in_place=True)


SLOW_JIT = """
import threading

GATE = threading.Event()


def warm_up(status):
    status("compiling kernels (1 of 1)")
    assert GATE.wait(30)
    return {}


def kernel(op, x, y):
    y[...] = x
"""


def test_waiting_for_a_kernel_module_hears_what_its_warm_up_is_doing(tmp_path, monkeypatch):
    (tmp_path / "slow_jit.py").write_text(SLOW_JIT)
    monkeypatch.syspath_prepend(str(tmp_path))
    kernels = HostKernels()
    kernels.start("slow_jit:kernel")
    heard = []

    def status(text):
        heard.append(text)
        if text == "compiling kernels (1 of 1)":  # the warm-up has begun: let it end
            sys.modules["slow_jit"].GATE.set()

    kernels.wait("slow_jit:kernel", status)
    assert heard[-1] == "compiling kernels (1 of 1)"
    assert set(heard) <= {"importing slow_jit", "compiling kernels (1 of 1)"}
    assert kernels.kernel("slow_jit:kernel") is sys.modules["slow_jit"].kernel
    kernels.close()


def test_host_modules_names_the_kernel_modules_of_a_compiled_function():
    model = make_host_model(np.ones(N, bf16), backend="reference")  # any backend's versions
    assert cpu.host_modules(model) == set()
    model.compile(((1, N), bf16))
    assert cpu.host_modules(model) == {"dispatch_fakes"}


def test_warm_elsewhere_runs_each_warm_up_in_a_process_of_its_own(tmp_path, monkeypatch):
    done = tmp_path / "warmed"
    (tmp_path / "warm_probe.py").write_text(
        f"import os\n\ndef warm_up():\n    open({str(done)!r}, 'w').write(str(os.getpid()))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert warm_elsewhere([]) is None
    process = warm_elsewhere(["warm_probe", "warm_probe"])
    assert process.wait(timeout=60) == 0
    assert int(done.read_text()) == process.pid != os.getpid()
