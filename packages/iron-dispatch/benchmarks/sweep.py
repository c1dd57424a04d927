"""Runtime-shaped operators through dispatch, measured on FLMGemm's
30-shape sweep (`iron.ops.flm.sweep`: M 256..16384, K and N from the
projections of Llama 3.2 1B and Gemma 4 E2B), on the sim backend:

- configurations compiled and streams generated when a graph per
  projection is compiled at every shape of the sweep;
- the time a new M costs with the configuration warm: building the
  design at that M (its runtime sequence), lowering the sequence against
  the lowered configuration (`iron.design.lower.lower_stream`) and writing
  the stream's cache entry, per shape, median and largest over the sweep;
  then each part apart, and how much of the build is FLMGemm's
  configuration values made again (`iron.ops.flm.design.image`, timed on
  its own);
- one call on a cached stream against one call on a cached whole image:
  the simulated device's run of the same FLMGemm step (M=256, K=512,
  N=1024) from the stream cache and from a simulator of the whole design,
  best of repeats, in one run.

    uv run --package iron-npu-dispatch python packages/iron-dispatch/benchmarks/sweep.py [--write-readme]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from iron.core import Device, bf16
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import Simulator, design_of
from iron.dispatch import CompileCache, Session, graph
from iron.dispatch.streams import Streams
from iron.ops.flm.design import b_blocks, image
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.sweep import PROJECTIONS, shapes

README = Path(__file__).parents[1] / "README.md"
NPU2 = Device.from_name("npu2")


def projection(session, k: int, n: int):
    """A graph of one FLMGemm at (K, N), its M the input's rows."""
    packed = np.zeros(FLMGemm(M=256, K=k, N=n).arg_specs()[1].shape, np.uint8)

    @graph(backend="sim", device="npu2", session=session)
    def project(g, a):
        return g(FLMGemm(M=a.shape[0], K=k, N=n), a, g.weight("b", packed))

    return project


def compiled(root: Path) -> tuple[int, int, int, float]:
    """(configurations, streams, graph versions, seconds) over the sweep."""
    graphs = {}
    started = time.perf_counter()
    with Session(cache=root) as session:
        for m, k, n in shapes():
            if (k, n) not in graphs:
                graphs[k, n] = projection(session, k, n)
            graphs[k, n].compile(((m, k), bf16))
        streams = session.streams
        versions = sum(len(f.versions) for f in graphs.values())
        return streams.configurations, streams.streams, versions, time.perf_counter() - started


def stream_costs(root: Path) -> dict[str, list[float]]:
    """Per shape, in ms: `build`, its design; `generate`, its stream
    generated and cached (the configuration lowered once, before); `new`,
    the two; `image`, FLMGemm's configuration values alone, made again."""
    streams = Streams(CompileCache(root))
    m, k, n = shapes()[0]
    warm = FLMGemm(M=m, K=k, N=n).resolve(NPU2)
    streams.stream(warm, design_of(warm), {})  # the configuration, lowered once
    costs = {"build": [], "generate": [], "new": [], "image": []}
    for m, k, n in shapes()[1:]:
        op = FLMGemm(M=m, K=k, N=n).resolve(NPU2)
        started = time.perf_counter()
        design = design_of(op)
        built = time.perf_counter()
        streams.stream(op, design, {})
        done = time.perf_counter()
        image(op)
        costs["image"].append(1e3 * (time.perf_counter() - done))
        costs["build"].append(1e3 * (built - started))
        costs["generate"].append(1e3 * (done - built))
        costs["new"].append(1e3 * (done - started))
    return costs


def _spread(ms: list[float]) -> str:
    return f"median {statistics.median(ms):.1f} ms, largest {max(ms):.1f} ms"


def interleaved(fns, repeats: int) -> list[float]:
    """The best time of each of `fns`, called in turn `repeats` times (so
    the machine's load falls on all alike)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            started = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - started)
    return best


def call_costs(repeats: int) -> tuple[float, float]:
    """Seconds per simulated call: from the stream cache, from a whole image."""
    op = FLMGemm(M=256, K=512, N=1024).resolve(NPU2)
    a, packed = op.example_inputs(np.random.default_rng(0))
    tensors = {"A": a, "B": b_blocks(packed, op.b_format)}
    design = design_of(op)
    streams = Streams()
    simulators = {}

    def on_stream():
        stream = streams.stream(op, design, {})  # a lookup after the first
        simulator = simulators.get(id(stream))
        if simulator is None:
            simulator = simulators[id(stream)] = Simulator(
                stream.lowered.design, lowered=stream.lowered
            )
        return simulator.run(tensors, stream.params)

    whole = Simulator(design)
    params = op.runtime_params()

    def on_image():
        return whole.run(tensors, params)

    assert np.array_equal(on_stream()["C"].view(np.uint16), on_image()["C"].view(np.uint16))
    return tuple(interleaved([on_stream, on_image], repeats))


def measure(repeats: int) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as root:
        configurations, streams, versions, seconds = compiled(Path(root) / "a")
        costs = stream_costs(Path(root) / "b")
    stream_call, image_call = call_costs(repeats)
    distinct = len({(k, n) for _, k, n in shapes()})
    return [
        (
            "shapes (M 256..16384)",
            f"{len(shapes())} over {distinct} (K, N) of {len(PROJECTIONS)} projections",
        ),
        ("graph versions compiled", f"{versions} ({seconds:.1f} s, images included)"),
        ("configurations compiled", str(configurations)),
        ("streams generated", str(streams)),
        (
            "new stream, warm configuration: the design at a new M + its sequence lowered + cached",
            f"{_spread(costs['new'])}; goal < 5 ms met by "
            f"{sum(t < 5 for t in costs['new'])} of {len(costs['new'])} (both parts grow with "
            "the sequence's statements: M x N)",
        ),
        ("new stream, part: the design at the new M", _spread(costs["build"])),
        (
            "new stream, part of the design: FLMGemm's configuration values, made again",
            _spread(costs["image"]),
        ),
        ("new stream, part: its sequence lowered + cached", _spread(costs["generate"])),
        (
            "call on a cached stream / on a cached whole image",
            f"{stream_call * 1e3:.2f} ms / {image_call * 1e3:.2f} ms = "
            f"{stream_call / image_call:.2f}x (goal: no slower)",
        ),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="calls per call measurement")
    parser.add_argument(
        "--write-readme", action="store_true", help="write the table into the package README"
    )
    args = parser.parse_args(argv)
    text = markdown_table(("measure", "result"), measure(args.repeats))
    print(text)
    if args.write_readme:
        python = ".".join(map(str, sys.version_info[:3]))
        note = f"Measured on a shared 2-core machine, Python {python}, sim backend:\n\n"
        write_readme_section(README, "sweep", note + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
