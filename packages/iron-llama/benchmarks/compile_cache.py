"""A compile-cache hit against a cold compile: the 16-layer synthetic Llama
graph on `sim`, in one run.

Each of the app's ahead versions (decode and the 256- and 128-row prompt
buckets) is compiled by a graph function of a fresh session: first into an
empty cache (cold: designs built, programs planned, MLIR written), then
again into the cache that now holds them (a hit: the key is looked up
before anything is built, and the programs are read from the entry). The
designs built and programs planned in each are counted; a hit's count is
the row of issue 30 ("a hit builds no design and no program"). What a hit
still costs is the recording and the memory plan of each version, which
decide its key.

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/compile_cache.py [--quick] [--write-readme]

--write-readme puts the table into this package's README (bench:compile-cache).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import iron.dispatch.image as image_module
import iron.dispatch.program as program_module
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.dispatch import CompileCache, Session, graph
from iron.dispatch.backends.sim import SimBackend
from iron.llama import Model, ensure_synthetic

README = Path(__file__).parents[1] / "README.md"
#: what the backend's compile built, and the designs the simulated device built to load
BUILT = {"designs": 0, "programs": 0, "loaded": 0, "compiling": False, "seconds": 0.0}


def counting() -> None:
    """Count every design built and every set of programs planned, and
    time the backend's compiles."""
    design_of, plan_programs = program_module.design_of, image_module.plan_programs
    compile_image = SimBackend.compile

    def designs(op):
        BUILT["designs" if BUILT["compiling"] else "loaded"] += 1
        return design_of(op)

    def programs(*args):
        BUILT["programs"] += 1
        return plan_programs(*args)

    def timed(self, *args, **kwargs):
        BUILT["compiling"], start = True, time.perf_counter()
        try:
            return compile_image(self, *args, **kwargs)
        finally:
            BUILT["compiling"] = False
            BUILT["seconds"] += time.perf_counter() - start

    program_module.design_of, image_module.plan_programs = designs, programs
    SimBackend.compile = timed


def compile_versions(model: Model, mode: str) -> tuple[float, dict, int]:
    """Seconds to compile every ahead version in a fresh session, what it
    built, and the backend's cache hits."""
    BUILT.update(designs=0, programs=0, loaded=0, seconds=0.0)
    session = Session()
    forward = graph(model.forward.fn, name=model.forward.name, backend="sim", device="npu2",
                    mode=mode, session=session)  # fmt: skip
    start = time.perf_counter()
    for _, specs in model.ahead_versions():
        forward.compile(**specs)
    seconds = time.perf_counter() - start
    hits = session.backend("sim").hits
    session.close()
    return seconds, dict(BUILT), hits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 layers, a smoke run")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    layers = 2 if args.quick else 16
    work = Path(tempfile.mkdtemp(prefix="iron-compile-cache-"))
    os.environ["IRON_CACHE_HOME"] = str(work / "cache")
    (work / "cache").mkdir()
    ensure_synthetic(work / "model", "tiny", layers=layers, seed=0)
    model = Model.from_pretrained(work / "model", backend="reference", max_seq_len=256,
                                  progress=False)  # fmt: skip
    counting()
    rows = []
    for mode, plan in (("auto", "full ELF"), ("separate", "xclbin")):  # Llama runs on npu2 only
        CompileCache().clear()
        cold, cold_built, _ = compile_versions(model, mode)
        hit, hit_built, hits = compile_versions(model, mode)
        versions = len(model.ahead_versions())
        for label, seconds, built in (("cold", cold, cold_built), ("cache hit", hit, hit_built)):
            ratio = "-" if label == "cold" else (
                f"{cold / hit:.1f}x; the backend's compile "
                f"{cold_built['seconds'] / hit_built['seconds']:.0f}x ({hits} of {versions} hit)"
            )  # fmt: skip
            rows.append([f"{plan}, {label}", f"{seconds * 1e3:,.0f}",
                         f"{built['seconds'] * 1e3:,.1f}", str(built["designs"]),
                         str(built["programs"]), str(built["loaded"]), ratio])  # fmt: skip
    table = markdown_table(
        ["ahead versions", "ms, in all", "ms, backend compile", "designs built",
         "programs planned", "designs the simulator loads", "cold / hit"],
        rows,
    )  # fmt: skip
    text = (
        f"{layers}-layer synthetic Llama (tiny dims), `sim`, npu2, the app's "
        f"{len(model.ahead_versions())} ahead versions, each compile in a fresh session "
        f"(shared 2-core machine, Python {sys.version.split()[0]}):\n\n{table}\n\n"
        "In all: recording each version, its memory plan, the backend's compile and loading "
        "it. Designs built and programs planned are counted inside the backend's compile; the "
        "simulated device of a fresh session then builds the designs it runs (its hardware), "
        "which a hit's entry cannot hold (designs carry code)."
    )
    print(text)
    if args.write_readme:
        write_readme_section(README, "compile-cache", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
