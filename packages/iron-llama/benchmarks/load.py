"""Where `Model.from_pretrained` spends its time, phase by phase, beside a
plain copy of the same weight bytes into a fresh buffer (what an upload
would cost: the checkpoint is in the page cache) and again into the same,
now touched, buffer (what is left once first touch is paid). On a backend
whose memory is the host's (cpu, reference) the weights are read where
the checkpoint maps them, not copied; the load is then given as a
multiple of the plain copy into fresh memory (the goal: at most 0.5x).

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/load.py [--layers 16] [--backend cpu] [--write-readme]

Uses the 1b-shaped synthetic model that `decode.py` writes into the user
cache (written here too if missing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

README = Path(__file__).parents[1] / "README.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, help="upload threads (default: the graph's)")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    from iron.dispatch import cache_home
    from iron.llama import Model, ensure_synthetic
    from iron.llama.config import LlamaConfig
    from iron.llama.weights import LlamaWeights
    from iron.lm.checkpoint import Checkpoint
    from iron.lm.tokenizer import Tokenizer

    phases = [("import iron.llama", time.perf_counter() - started)]
    directory = cache_home() / "models" / f"1b-shaped-{args.layers}"
    ensure_synthetic(directory, "1b-shaped", args.layers)

    def timed(label, fn):
        started = time.perf_counter()
        result = fn()
        phases.append((label, time.perf_counter() - started))
        return result

    config = LlamaConfig.from_file(directory)
    checkpoint = Checkpoint.open(directory)
    weights = timed(
        "read (map, check names and shapes)", lambda: LlamaWeights.load(checkpoint, config)
    )
    tokenizer = timed("tokenizer", lambda: Tokenizer.from_pretrained(directory))
    model = timed(
        "graph function, RoPE table",
        lambda: Model(
            config,
            weights,
            tokenizer,
            backend=args.backend,
            release=checkpoint.release,
            copy=checkpoint.copyto,
            in_place=checkpoint.owns,
        ),
    )
    for label, specs in model.ahead_versions():
        timed(f"compile the {label} version", lambda specs=specs: model.forward.compile(**specs))
    nbytes = timed(
        "upload the weights (or hold them in place), host kernels ready",
        lambda: model.load(progress=False, threads=args.threads),
    )
    held = model.forward.held_in_place()
    # the same number of bytes, from warm memory into fresh memory, as the arena gets
    # them; then again into the same, now touched, memory: the difference is first touch
    source, fresh = np.ones(256 << 20, np.uint8), np.zeros(nbytes, np.uint8)
    copies = []
    for _ in range(2):
        started = time.perf_counter()
        for start in range(0, nbytes, source.size):
            np.copyto(fresh[start : start + source.size], source[: nbytes - start])
        copies.append(time.perf_counter() - started)
    total = sum(seconds for _, seconds in phases)
    loading = total - phases[0][1]  # from_pretrained's share: everything but the import
    lines = [
        f"{args.layers} layers, backend {args.backend}, {nbytes / 1e9:.2f} GB of weights, "
        f"{len(held)} of {len(model.forward.residents.weights)} weights read in place "
        f"(load average {os.getloadavg()[0]:.1f}):",
        "",
        "| phase | seconds |",
        "|---|---|",
        *(f"| {label} | {seconds:.2f} |" for label, seconds in phases),
        f"| total | {total:.2f} |",
        *(
            f"| (a plain copy of {nbytes / 1e9:.2f} GB into {memory} memory) | {seconds:.2f} |"
            for memory, seconds in zip(("fresh", "touched"), copies)
        ),
        "",
        f"Load (everything after the import): {loading:.2f} s, {loading / copies[0]:.2f}x the "
        "plain copy into fresh memory (goal: at most 0.5x).",
    ]
    print("\n".join(lines))
    if args.write_readme:
        from iron.core.benchmarking import write_readme_section

        write_readme_section(README, "load", "\n".join(lines))
        print(f"wrote {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
