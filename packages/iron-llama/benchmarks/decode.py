"""Prefill and decode: the IRON graph on the reference backend against the float32 oracle.

The 1b-shaped synthetic preset with 2 decoder layers (Llama 3.2 1B's widths,
heads and 128256-token vocabulary; random weights): a prefill of 128 tokens,
then 32 decode steps. Both sides are fed the same tokens (the oracle's
greedy choices, teacher-forced), so the run also gives the graph's KL from
the oracle at these shapes. Each side runs in a fresh process, so its peak
RSS (VmHWM) is its own: the graph's includes uploading the weights into its
arena, the oracle's its float32 temporaries.

    uv run --package iron-llama python packages/iron-llama/benchmarks/decode.py [--write-readme]
    ... decode.py --quick      # the tiny preset, 16 prompt tokens, 4 steps: a smoke run
    ... decode.py --layers 16  # all of Llama 3.2 1B's layers (a 2.3 GiB synthetic file)

--write-readme puts the table into the package README between its
bench:decode markers.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from iron.core.benchmarking import write_readme_section

README = Path(__file__).parents[1] / "README.md"


def run_side(side: str, directory: Path, prompt: int, steps: int, tokens: Path, out: Path) -> None:
    """One side in this process: prefill, then `steps` decodes; logits, tokens
    and figures into `out` (.npz). The model is fed `tokens` (the oracle's
    greedy choices); the oracle makes them."""
    from iron.llama import Model, Oracle, OracleModel
    from iron.llama.metrics import resident_bytes

    started = time.perf_counter()
    if side == "model":
        model = Model.from_pretrained(directory, backend="reference", progress=False)
        fed = np.load(tokens)
    else:
        model = OracleModel(Oracle.from_pretrained(directory))
    load = time.perf_counter() - started
    vocab = model.oracle.config.vocab_size if side == "oracle" else model.config.vocab_size
    ids = [0, *np.random.default_rng(0).integers(2, vocab, prompt - 1).tolist()]
    seconds, rows, chosen = [], [], []
    for step in range(steps + 1):
        started = time.perf_counter()
        logits = model.prefill(ids) if step == 0 else model.decode(chosen[-1])
        seconds.append(time.perf_counter() - started)
        rows.append(logits)
        chosen.append(int(np.argmax(logits)) if side == "oracle" else int(fed[step]))
    if side == "oracle":
        np.save(tokens, np.array(chosen))
    peak, steady = resident_bytes()
    figures = {"load": load, "ttft": seconds[0], "decode": float(np.mean(seconds[1:])),
               "peak": peak, "steady": steady}  # fmt: skip
    np.savez(out, logits=np.array(rows), figures=json.dumps(figures))


def measure(directory: Path, prompt: int, steps: int) -> tuple[dict, dict]:
    """(figures per side, accuracy), each side in a child process."""
    from iron.llama.checks import kl_divergence

    work = Path(tempfile.mkdtemp(prefix="iron-llama-bench-"))
    results = {}
    for side in ("oracle", "model"):  # the oracle first: it makes the tokens
        out = work / f"{side}.npz"
        subprocess.run(
            [sys.executable, __file__, "--child", side, "--model-dir", str(directory),
             "--prompt", str(prompt), "--steps", str(steps), "--tokens", str(work / "tokens.npy"),
             "--out", str(out)],
            check=True,
        )  # fmt: skip
        with np.load(out) as data:
            results[side] = (data["logits"], json.loads(str(data["figures"])))
    (expected, oracle), (got, model) = results["oracle"], results["model"]
    kl = [kl_divergence(e, g) for e, g in zip(expected, got)]
    agree = int(np.sum(expected.argmax(axis=-1) == got.argmax(axis=-1)))
    accuracy = {"mean": float(np.mean(kl)), "max": float(np.max(kl)), "agree": agree,
                "steps": len(kl)}  # fmt: skip
    return {"model": model, "oracle": oracle}, accuracy


def table(figures: dict, accuracy: dict, preset: str, prompt: int, steps: int) -> str:
    model, oracle = figures["model"], figures["oracle"]

    def mib(n):
        return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"

    rows = [
        ("load (read, compile, upload)", f"{model['load']:.2f} s", f"{oracle['load']:.2f} s", "-"),
        (f"time to first token ({prompt}-token prompt)", f"{model['ttft'] * 1e3:,.0f} ms",
         f"{oracle['ttft'] * 1e3:,.0f} ms", f"{oracle['ttft'] / model['ttft']:.2f}x"),
        (f"decode ({steps} steps)", f"{1 / model['decode']:.2f} tokens/s",
         f"{1 / oracle['decode']:.2f} tokens/s", f"{oracle['decode'] / model['decode']:.2f}x"),
        ("peak RSS (VmHWM)", mib(model["peak"]), mib(oracle["peak"]), "-"),
        ("steady RSS (VmRSS)", mib(model["steady"]), mib(oracle["steady"]), "-"),
    ]  # fmt: skip
    header = ("measure", "IRON graph, reference backend", "float32 oracle", "graph speed-up")
    lines = [
        f"{preset}; Python {platform.python_version()}, {platform.machine()}, one run:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        f"Teacher-forced over the {accuracy['steps']} positions: KL(oracle || graph) mean "
        f"{accuracy['mean']:.2e}, max {accuracy['max']:.2e}; top-1 agrees at "
        f"{accuracy['agree']}/{accuracy['steps']}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset, 16 tokens, 4 steps")
    parser.add_argument("--write-readme", action="store_true")
    parser.add_argument("--model-dir", type=Path, help="where the synthetic model is kept")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=32, help="decode steps")
    parser.add_argument(
        "--layers", type=int, default=2, help="decoder layers of the 1b-shaped model"
    )
    parser.add_argument("--child", choices=("model", "oracle"), help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_side(args.child, args.model_dir, args.prompt, args.steps, args.tokens, args.out)
        return

    from iron.dispatch import cache_home
    from iron.llama import ensure_synthetic

    if args.quick:
        preset, layers, prompt, steps = "tiny", None, 16, 4
        directory = args.model_dir or Path(tempfile.mkdtemp(prefix="iron-llama-tiny-"))
        label = "tiny preset (quick run)"
    else:
        preset, layers, prompt, steps = "1b-shaped", args.layers, args.prompt, args.steps
        directory = args.model_dir or cache_home() / "models" / f"1b-shaped-{layers}"
        label = f"1b-shaped preset, {layers} layers (Llama 3.2 1B widths, 128256-token vocabulary)"
    if ensure_synthetic(directory, preset, layers):
        print(f"wrote the synthetic model to {directory}", file=sys.stderr)
    figures, accuracy = measure(directory, prompt, steps)
    text = table(figures, accuracy, label, prompt, steps)
    print(text)
    if args.write_readme:
        write_readme_section(README, "decode", text)
        print(f"wrote {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
