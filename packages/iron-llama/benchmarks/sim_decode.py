"""Simulated decode against the reference backend, on the demo's model, in one run.

The demo's tiny synthetic Llama (seed 0) on `sim` (every step's NPU design
run by iron-design's simulator behind iron-dispatch's simulated XRT) and on
`reference` (each step's numpy reference over the same graph): after the
demo's prompt, decode steps in interleaved rounds, the median ms per token
of each and their ratio. Then one profiled round of sim's decode says where
its token goes: the simulator's replays (the kernel models they call, by
kernel, and the moves of elements between them), the machine runs that
record (designs whose offsets move per token), the simulated XRT's driving
of the program, and the graph function around it. Profiled shares are of
the profiled run (cProfile weighs Python calls more than numpy's work).

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/sim_decode.py [--quick] [--write-readme]

--write-readme puts the ratio into this package's README (bench:sim-decode)
and the profile into iron-design's (bench:sim-profile).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import Batch
from iron.dispatch.sim_xrt import SimRun
from iron.llama import Model, ensure_synthetic

#: the module (the package's `simulate` names the function)
simulate_module = importlib.import_module("iron.design.simulate")
replay_module = importlib.import_module("iron.design.replay")

README = Path(__file__).parents[1] / "README.md"
DESIGN_README = Path(__file__).parents[2] / "iron-design" / "README.md"
PROMPT = "Iron is the fourth most common element"  # the demo's


def per_token(model: Model, ids: list[int], steps: int) -> float:
    """Seconds per decode step after a prefill of `ids`."""
    model.reset()
    model.prefill(ids)
    start = time.perf_counter()
    for i in range(steps):
        model.decode(ids[i % len(ids)])
    return (time.perf_counter() - start) / steps


def ratio_table(models: dict[str, Model], ids: list[int], steps: int, rounds: int):
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):  # interleaved: what runs beside slows both alike
        for name, model in models.items():
            times[name].append(per_token(model, ids, steps))
    median = {name: statistics.median(t) for name, t in times.items()}
    ratio = median["sim"] / median["reference"]
    rows = [[name, f"{1000 * median[name]:.2f}", f"{1 / median[name]:,.1f}"] for name in models]
    text = markdown_table(["backend", "ms per token", "tokens/s"], rows)
    note = (
        f"sim / reference: {ratio:.1f}x (medians of {rounds} interleaved rounds of {steps} "
        "decode steps after the demo's prompt)"
    )
    return f"{text}\n\n{note}", median["sim"]


def _key(function) -> tuple[str, int, str]:
    """A function's key in `pstats` (file, first line, name)."""
    code = function.__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def profile_table(model: Model, ids: list[int], steps: int, seconds_per_token: float) -> str:
    """Where a sim decode token goes: one profiled round, its shares scaled
    to the unprofiled `seconds_per_token`."""
    model.reset()
    model.prefill(ids)
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(steps):
        model.decode(ids[i % len(ids)])
    profiler.disable()
    stats = pstats.Stats(
        profiler
    ).stats  # key -> (calls, primitive calls, own, cumulative, callers)
    total = sum(entry[2] for entry in stats.values())

    def cumulative(function) -> tuple[float, int]:
        entry = stats.get(_key(function), (0, 0, 0.0, 0.0, {}))
        return entry[3], entry[0]

    # where a replay calls kernel models: call by call, or a batch form's two
    # parts (`compute` once per flush, `write` once per call)
    callers = (_key(replay_module.play), _key(replay_module._Plan.compute))
    parts = {}
    for batch in (o for o in gc.get_objects() if isinstance(o, Batch)):
        parts[_key(batch.compute)] = " (batched: computes)"
        parts[_key(batch.write)] = " (batched: writes)"
    kernels: Counter = Counter()
    calls: Counter = Counter()
    for key, entry in stats.items():
        filename, _, name = key
        if filename == "~" or filename.endswith(("simulate.py", "replay.py")):
            continue
        for caller in callers:
            edge = entry[4].get(caller)
            if edge is not None:
                kernels[f"`{name}`{parts.get(key, '')}"] += edge[3]
                calls[f"`{name}`{parts.get(key, '')}"] += edge[1]
    replays, replay_count = cumulative(simulate_module._Replay.run)
    records, record_count = cumulative(simulate_module.Simulator._machine_run)
    runs, run_count = cumulative(simulate_module.Simulator.run)
    driving, _ = cumulative(SimRun.start)
    rows = []

    def row(what: str, seconds: float, count: int = 0) -> None:
        ms = 1000 * seconds_per_token * seconds / total
        times = f"{count / steps:,.0f}" if count else ""
        each = f"{1000 * ms / (count / steps):,.1f}" if count else ""
        rows.append([what, f"{100 * seconds / total:.1f}%", f"{ms:.2f}", times, each])

    top = kernels.most_common(3)
    for name, seconds in top:
        row(f"kernel model {name}", seconds, calls[name])
    others = [n for n in kernels if n not in dict(top)]
    row("other kernel models", sum(kernels[n] for n in others), sum(calls[n] for n in others))
    row(
        "replays besides the models: moves, captures, resets",
        replays - sum(kernels.values()),
        replay_count,
    )
    row("machine runs that record (offsets that move per token)", records, record_count)
    row("Simulator.run besides: tensors in and out", runs - replays - records, run_count)
    row("simulated XRT: program steps, views, syncs", driving - runs)
    row("graph function, host steps, sampling", total - driving)
    header = ["where", "share (profiled)", "ms per token", "per token", "µs each"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 4 steps: a smoke run")
    parser.add_argument(
        "--write-readme", action="store_true", help="write the tables into the READMEs"
    )
    parser.add_argument("--model-dir", type=Path, help="where the demo model is (written once)")
    args = parser.parse_args(argv)
    steps, rounds = (4, 2) if args.quick else (16, 5)
    directory = args.model_dir or Path(tempfile.mkdtemp(prefix="iron-sim-decode-")) / "tiny"
    ensure_synthetic(directory, "tiny", seed=0)
    models = {
        b: Model.from_pretrained(directory, backend=b, progress=False) for b in ("sim", "reference")
    }
    ids = models["sim"].tokenizer.prompt(PROMPT)
    for model in models.values():  # compile and record every version first
        per_token(model, ids, 2)
    ratio, sim_seconds = ratio_table(models, ids, steps, rounds)
    print(ratio)
    profile = profile_table(models["sim"], ids, steps, sim_seconds)
    print()
    print(profile)
    if args.write_readme:
        write_readme_section(README, "sim-decode", ratio)
        write_readme_section(DESIGN_README, "sim-profile", profile)
        print(f"wrote the tables into {README} and {DESIGN_README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
