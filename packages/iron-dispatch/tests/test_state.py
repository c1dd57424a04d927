"""No process-wide runtime state: no module of any installed iron package
holds mutable state at module level (beyond constants and the registry's
plugin table) or sets the environment on import, and a program that
compiles and drops graph functions in a loop stays flat in memory."""

import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from dispatch_fakes import AddOne, Scale, Twice

from iron.core import bf16
from iron.dispatch import Session, graph

SCRIPT = Path(__file__).with_name("module_state.py")


def module_state() -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(done.stdout)


def check_module_state() -> None:
    state = module_state()
    assert "iron.dispatch.session" in state["modules"]  # the walk reached the packages
    assert state["failed"] == []
    assert state["mutable"] == [], "module-level mutable state:\n" + "\n".join(state["mutable"])
    assert state["environment"] == [], f"set in the environment on import: {state['environment']}"


def test_no_module_of_the_installed_iron_packages_holds_mutable_state():
    """Here: the packages iron-dispatch's tests install beside it."""
    check_module_state()


@pytest.mark.slow
def test_no_module_of_any_iron_package_holds_mutable_state():
    """In the slow session every package is installed: all of them."""
    check_module_state()


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="RSS is read from /proc")
def test_compiling_and_dropping_graph_functions_leaves_memory_flat():
    """100 graph functions, each of another design (its own size), compiled,
    called and dropped: what they held (the sim device's library of designs,
    host kernels, source digests) goes with them."""
    traced, rss = [], []
    tracemalloc.start()
    try:
        for i in range(100):
            size = 256 * (i + 1)

            @graph(backend="sim", device="npu1")
            def f(g, x):
                return g(Twice(x.size), g(AddOne(x.size), x))  # a design, a host model

            assert (f(np.zeros(size, np.int32)) == 2).all()
            del f
            gc.collect()
            traced.append(tracemalloc.get_traced_memory()[0])
            rss.append(resident_bytes())
    finally:
        tracemalloc.stop()
    # what each function leaves behind: the median step, so a one-off cache
    # filled on the way (an import, an interpreter table) is not counted
    per_function = np.median(np.diff(traced[10:]))
    assert per_function < 1024, f"{per_function:.0f} B stay behind per graph function"
    assert np.median(rss[90:]) - np.median(rss[10:20]) < 32 * 2**20


def test_a_shared_session_serves_several_functions_and_closing_it_frees_them():
    session = Session()

    @graph(backend="sim", device="npu1", session=session)
    def a(g, x):
        return g(AddOne(1024), x)

    @graph(backend="sim", device="npu1", session=session)
    def b(g, x):
        return g(AddOne(2048), x)

    assert a.backend is b.backend is session.backend("sim")
    assert (a(np.zeros(1024, np.int32)) == 1).all() and (b(np.zeros(2048, np.int32)) == 1).all()
    assert len(session.library.designs) == 2
    a.close()  # not its session: nothing freed
    assert len(session.library.designs) == 2
    session.close()
    assert session.library.designs == {} and session.closed
    own = graph(lambda g, x: g(Scale(256), x), backend="reference")
    own(np.ones(256, bf16))
    own.close()
    assert own.session.closed
