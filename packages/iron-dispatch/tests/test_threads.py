"""Calls on one graph function from many threads at once: every call gets
its own answer, on every backend (one lock per function, see graph.py)."""

import sys
import threading

import numpy as np
import pytest
from dispatch_fakes import ROWS, Mul, N, Scale, Shift, SumRows, WriteRow

from iron.core import bf16
from iron.dispatch import graph

THREADS, CALLS = 8, 80


@pytest.fixture
def switching_often():
    """The interpreter switches threads every microsecond, so a call that
    is not atomic is interleaved with the others at once."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def hammer(call, inputs):
    """Each of THREADS threads calls `call(x)` on its own inputs, CALLS times;
    the results by thread, in order."""
    results = [[] for _ in range(THREADS)]
    start = threading.Barrier(THREADS)

    def work(index):
        start.wait()
        for x in inputs[index]:
            results[index].append(call(x))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize(
    "backend, device", [("reference", "npu2"), ("cpu", "npu2"), ("sim", "npu2"), ("sim", "npu1")]
)
def test_concurrent_calls_each_get_their_own_answer(backend, device, switching_often):
    w = np.random.default_rng(1).standard_normal(N).astype(bf16)

    @graph(backend=backend, device=device)
    def f(g, x, *, shift):
        h = g(Mul(N), g(Scale(N, 2.0), x), g.weight("w", w))
        return g(Shift(N), h, offset=shift)

    rng = np.random.default_rng(2)
    inputs = [
        [(rng.standard_normal(N).astype(bf16), int(rng.integers(0, 100))) for _ in range(CALLS)]
        for _ in range(THREADS)
    ]
    f.compile(((N,), bf16))
    f.load()
    results = hammer(lambda item: f(item[0], shift=item[1]), inputs)
    wrong = sum(
        got.tobytes() != f(x, shift=shift).tobytes()
        for thread, outputs in zip(inputs, results)
        for (x, shift), got in zip(thread, outputs)
    )
    assert wrong == 0, f"{wrong} of {THREADS * CALLS} concurrent calls got another call's answer"


def test_states_stay_consistent_under_concurrent_calls(switching_often):
    """Each call writes its row of a state and sums the rows written so far:
    whatever the order, the sums seen are exactly those of a serial run."""

    @graph(backend="reference")
    def f(g, x, *, pos):
        cache = g.state("cache", (ROWS, N))
        g(WriteRow(N, ROWS), x, cache, row=pos)
        return g(SumRows(N, ROWS), cache, valid=ROWS)

    ones = np.ones(N, bf16)
    positions = [[t * 2, t * 2 + 1] for t in range(THREADS)]  # every row once
    results = hammer(lambda pos: f(ones, pos=pos), positions)
    seen = sorted(float(out[0]) for outputs in results for out in outputs)
    assert seen == [float(k) for k in range(1, 2 * THREADS + 1)]  # 1, 2, ... rows written
    assert (f.read_state("cache") == 1).all()
