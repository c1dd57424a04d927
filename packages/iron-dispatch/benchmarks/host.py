"""Host-side costs of iron-dispatch, measured in one run.

- record + plan: a synthetic 16-layer transformer-shaped graph (~300 steps)
  recorded and laid out in a shared arena;
- compile: cold (empty cache) and warm (a cache hit: hash + read);
- per-call host overhead with trivial kernels (steps that compute nothing),
  against a bare numpy copy of the same input and output bytes;
- the device path: 16 steps of one design (iron-design's add_one example)
  simulated on the sim backend, fused, against their references.

    uv run --package iron-npu-dispatch python packages/iron-dispatch/benchmarks/host.py [--write-readme]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import attrs
import numpy as np

from iron.core import ArgSpec, Operator, Tolerance, bf16, capture
from iron.core.benchmarking import machine_note, markdown_table, write_readme_section
from iron.core.spec import IN, OUT
from iron.design import examples
from iron.dispatch import CompileCache, OperatorSequence, Session, graph

HIDDEN, FFN, HEADS_DIM, LAYERS = 2048, 8192, 512, 16
README = Path(__file__).parents[1] / "README.md"


@attrs.frozen
class Trivial(Operator):
    """Reads `inputs` flat buffers, writes one of `output` elements: no compute."""

    inputs: tuple[int, ...]
    output: int

    @staticmethod
    def arg_spec(inputs, output):
        return [
            *(ArgSpec(f"in{i}", (n,), bf16, IN) for i, n in enumerate(inputs)),
            ArgSpec("out", (output,), bf16, OUT),
        ]

    def reference(self, *arrays):
        return np.zeros(self.output, bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()


def layer(g, x, i):
    """The steps of one Llama-like decoder layer, by buffer shape."""
    w = lambda name, n: g.weight(f"l{i}.{name}", np.zeros(n, bf16))  # noqa: E731
    h = g(Trivial((HIDDEN, HIDDEN), HIDDEN), x, w("norm1", HIDDEN))
    q = g(Trivial((HIDDEN, 64), HIDDEN), h, w("q", 64))
    k = g(Trivial((HIDDEN, 64), HEADS_DIM), h, w("k", 64))
    v = g(Trivial((HIDDEN, 64), HEADS_DIM), h, w("v", 64))
    q = g(Trivial((HIDDEN,), HIDDEN), q)
    k = g(Trivial((HEADS_DIM,), HEADS_DIM), k)
    cache = g.state(f"l{i}.keys", (HEADS_DIM * 4,))
    g(Trivial((HEADS_DIM,), HEADS_DIM), k, cache[0:HEADS_DIM])
    scores = g(Trivial((HIDDEN, HEADS_DIM * 4), 1024), q, cache)
    weights = g(Trivial((1024,), 1024), scores)
    context = g(Trivial((1024, HEADS_DIM), HIDDEN), weights, v)
    o = g(Trivial((HIDDEN, 64), HIDDEN), context, w("o", 64))
    x = g(Trivial((HIDDEN, HIDDEN), HIDDEN), x, o)
    h = g(Trivial((HIDDEN, HIDDEN), HIDDEN), x, w("norm2", HIDDEN))
    gate = g(Trivial((HIDDEN, 64), FFN), h, w("gate", 64))
    up = g(Trivial((HIDDEN, 64), FFN), h, w("up", 64))
    gate = g(Trivial((FFN,), FFN), gate)
    prod = g(Trivial((FFN, FFN), FFN), gate, up)
    down = g(Trivial((FFN, 64), HIDDEN), prod, w("down", 64))
    return g(Trivial((HIDDEN, HIDDEN), HIDDEN), x, down)


def transformer(g, x):
    for i in range(LAYERS):
        x = layer(g, x, i)
    return g(Trivial((HIDDEN,), HIDDEN), x)


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def per_call(fn, calls):
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(calls: int) -> list[tuple[str, str]]:
    rows = []

    def record_and_plan():
        with capture("transformer") as g:
            transformer(g, g.input("x", HIDDEN))
        return OperatorSequence.from_graph(g)

    seq = record_and_plan()
    rows.append(("graph", f"{len(seq.runlist.steps)} steps, {len(seq.runlist.sizes)} buffers"))
    rows.append(("record + plan", f"{best_of(record_and_plan) * 1e3:.1f} ms"))
    rows.append(("scratch planning", seq.memory_report().split(": ", 1)[1]))

    with tempfile.TemporaryDirectory() as root:
        os.environ["IRON_CACHE_HOME"] = root
        cache = CompileCache(root)
        sim = Session(cache=cache).backend("sim")
        cold = best_of(lambda: (cache.clear(), sim.compile(seq.runlist, seq.layout)), 3)
        warm = best_of(lambda: sim.compile(seq.runlist, seq.layout), 5)
    rows.append(("compile, cold (sim)", f"{cold * 1e3:.1f} ms"))
    rows.append(("compile, warm (cache hit)", f"{warm * 1e3:.1f} ms ({cold / warm:.1f}x faster)"))

    x = np.ones(64, bf16)
    out = np.empty_like(x)
    memcpy = per_call(lambda: (np.copyto(out, x), out.copy()), calls)
    for backend in ("reference", "sim"):

        @graph(backend=backend)
        def one(g, x):
            return g(Trivial((64,), 64), x)

        cost = per_call(lambda one=one: one(x), calls)
        rows.append(
            (
                f"one-step call, {backend}",
                f"{cost * 1e6:.1f} us ({cost / memcpy:.0f}x a numpy copy of its {2 * x.nbytes} B)",
            )
        )

    @graph(backend="sim")
    def big(g, x):
        return transformer(g, x)

    xb = np.ones(HIDDEN, bf16)
    cost = per_call(lambda: big(xb), max(3, calls // 200))
    steps = len(next(iter(big.versions.values())).runlist.steps)
    rows.append(
        (
            f"{steps}-step call, sim fused",
            f"{cost * 1e3:.2f} ms ({cost / steps * 1e6:.1f} us per step)",
        )
    )
    rows.append(("numpy copy, 64 + 64 bf16", f"{memcpy * 1e6:.2f} us"))
    rows += design_rows(max(3, calls // 500))
    return rows


@attrs.frozen
class AddOne(Operator):
    """y = x + 1 (int32) with iron-design's add_one example as its design."""

    size: int

    @staticmethod
    def arg_spec(size):
        return [ArgSpec("x", (size,), np.int32, IN), ArgSpec("y", (size,), np.int32, OUT)]

    def reference(self, x):
        return x + np.int32(1)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()

    @staticmethod
    def design(size, device):
        return examples.add_one(device, n=size, tile=1024)


def design_rows(calls: int) -> list[tuple[str, str]]:
    size, steps = 4096, 16
    costs = {}
    for backend in ("reference", "sim"):

        @graph(backend=backend, device="npu1")
        def stack(g, x):
            for _ in range(steps):
                x = g(AddOne(size), x)
            return x

        x = np.arange(size, dtype=np.int32)
        assert np.array_equal(stack(x), x + steps)
        costs[backend] = per_call(lambda stack=stack, x=x: stack(x), calls)
    summary = next(iter(stack.versions.values())).image.design_summary()
    return [
        (
            f"{steps} add_one designs, sim fused",
            f"{costs['sim'] * 1e3:.2f} ms ({costs['sim'] / steps * 1e3:.2f} ms per step, "
            f"{size} int32 in 1024-element objects; {summary})",
        ),
        (
            f"the same {steps} steps, reference",
            f"{costs['reference'] * 1e3:.3f} ms ({costs['sim'] / costs['reference']:.0f}x faster "
            "than simulating the designs)",
        ),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per overhead measurement")
    parser.add_argument(
        "--write-readme", action="store_true", help="write the table into the package README"
    )
    args = parser.parse_args(argv)
    text = markdown_table(("measure", "result"), measure(args.calls))
    print(text)
    if args.write_readme:
        write_readme_section(README, "host", machine_note("best of repeats") + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
