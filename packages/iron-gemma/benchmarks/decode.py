"""Gemma 4 E2B-shaped decode and prefill on IRON's cpu backend against
transformers in the same run, and the simulated device's DDR bytes per
decode token against the weights the decode reads.

    uv run python packages/iron-gemma/benchmarks/decode.py \\
        [--layers 4] [--tokens 8] [--transformers PYTHON] [--sim] [--write-readme]

The model is the `e2b-shaped` synthetic preset (E2B's widths and
vocabulary, `--layers` layers instead of 35, so the 262144-row head weighs
more in a token than it does in E2B). Each side prefills the same 512-token
prompt (time to first token) and decodes the same `--tokens` fed tokens.
The share of the memory-bandwidth limit is (bytes a decode token must read:
the decode's weights at their stored size and the KV rows it attends over)
x tokens/s over this machine's read bandwidth, measured in the same run (a
sum over a 512 MiB array, best of 3). `--transformers` names an interpreter
with torch and transformers (never dependencies of iron-gemma): it runs
`hf_side.py` on the checkpoint with float32 and bf16 weights. `--sim` runs
one decode token on the simulated device and sums the DDR bytes its steps
moved (the trace), beside the bytes of the weights it reads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from iron.core.benchmarking import markdown_table, write_readme_section
from iron.dispatch import cache_home
from iron.dispatch.sim_xrt import read_trace
from iron.gemma import Model, ensure_synthetic
from iron.gemma.config import GemmaConfig

README = Path(__file__).parents[1] / "README.md"
HF_SIDE = Path(__file__).with_name("hf_side.py")
PROMPT = 512
#: FastFlowLM's published Gemma 4 E2B figures on a Krackan NPU (npu2)
FLM_E2B_KRACKAN = {"decode tok/s": 20.5, "context": 1024, "prefill tok/s": 689.0}
HEADER = ["side", "weights", "TTFT 512 s", "prefill tok/s", "decode tok/s", "MB read / token",
          "share of bandwidth"]  # fmt: skip
SIM_HEADER = ["weights", "decode weights MB", "DDR MB per decode token (sim)", "DDR / weights"]


def read_bandwidth() -> float:
    """Bytes/s numpy reads on this machine: a sum over 512 MiB, best of 3."""
    array = np.ones(64 << 20, np.float64)
    best = min(_timed(array.sum) for _ in range(3))
    return array.nbytes / best


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def decode_weight_bytes(model: Model) -> int:
    """The stored bytes of every weight the decode version reads: the
    layers' blobs and norms, the per-layer projections, the final norm,
    the head, one RoPE row per layer."""
    weights = model.plan.weights
    names = [n for n in weights if n.endswith((".decode.weights", ".decode.norms", ".decode"))]
    names += [
        "model.norm.weight",
        "head",
        *(["per_layer.norm"] if "per_layer.norm" in weights else []),
    ]
    rope = sum(weights[f"rope.{k}"].shape[1] * 2 for k in set(model.config.layer_types))
    return sum(weights[n].nbytes for n in names) + rope


def kv_bytes(config: GemmaConfig, context: int) -> int:
    """The KV-cache bytes a token at position `context` attends over, all layers."""
    total = 0
    for i in range(config.num_hidden_layers):
        rows = min(context + 1, config.sliding_window) if config.is_sliding(i) else context + 1
        total += 2 * rows * config.num_key_value_heads * config.layer_head_dim(i) * 2
    return total


def run_iron(directory: Path, weights: str, prompt, fed) -> dict:
    model = Model.from_pretrained(directory, backend="cpu", weight_format=weights, progress=False)
    model.prefill(prompt)
    for token in fed:
        model.decode(token)
    metrics = model.metrics
    per_token = decode_weight_bytes(model) + kv_bytes(model.config, len(prompt) + len(fed) // 2)
    return {"ttft": metrics.ttft_seconds, "steps": list(metrics.decode_seconds),
            "bytes": per_token}  # fmt: skip


def run_transformers(python: str, directory: Path, dtype: str, prompt, fed) -> dict:
    with tempfile.TemporaryDirectory() as work:
        ids, tokens = Path(work) / "prompt.npy", Path(work) / "fed.npy"
        np.save(ids, np.asarray(prompt)), np.save(tokens, np.asarray(fed))
        out = subprocess.run(
            [python, str(HF_SIDE), "--model-dir", str(directory), "--dtype", dtype,
             "--prompt-ids", str(ids), "--tokens", str(tokens)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return {"ttft": figures["ttft_seconds"], "steps": figures["decode_seconds"], "bytes": None}


def sim_ddr(directory: Path, weights: str) -> tuple[int, int]:
    """(DDR bytes one simulated decode token moved, the decode's weight bytes)."""
    model = Model.from_pretrained(directory, backend="sim", weight_format=weights,
                                  trace_size=1 << 16, progress=False)  # fmt: skip
    model.prefill([2])  # one token: the decode version only
    model.decode(5)
    version = next(v for s, v in model.forward.versions.items() if s[0][1][0] == 1)
    moved = sum(record["bytes"] for record in read_trace(version.trace))
    return moved, decode_weight_bytes(model)


def row(side: str, weights: str, figures: dict, bandwidth: float) -> list[str]:
    rate = len(figures["steps"]) / sum(figures["steps"])
    share = "" if figures["bytes"] is None else f"{figures['bytes'] * rate / bandwidth:.0%}"
    megabytes = "" if figures["bytes"] is None else f"{figures['bytes'] / 1e6:.0f}"
    return [side, weights, f"{figures['ttft']:.2f}", f"{PROMPT / figures['ttft']:.0f}",
            f"{rate:.2f}", megabytes, share]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (E2B has 35)")
    parser.add_argument("--tokens", type=int, default=8, help="decode tokens timed")
    parser.add_argument("--transformers", metavar="PYTHON", help="an interpreter with torch")
    parser.add_argument("--sim", action="store_true", help="one simulated decode token's DDR bytes")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    directory = cache_home() / "models" / f"gemma-e2b-shaped-{args.layers}"
    ensure_synthetic(directory, "e2b-shaped", args.layers)
    config = GemmaConfig.from_file(directory)
    rng = np.random.default_rng(0)
    prompt = rng.integers(5, 512, PROMPT).tolist()  # the tokenizer's ids
    fed = rng.integers(5, 512, args.tokens).tolist()
    bandwidth = read_bandwidth()

    rows = []
    for weights in ("bf16", "bfp16"):
        rows.append(row("IRON cpu", weights, run_iron(directory, weights, prompt, fed), bandwidth))
        print(rows[-1], file=sys.stderr)
    if args.transformers:
        for dtype, label in (("float32", "f32"), ("bfloat16", "bf16")):
            figures = run_transformers(args.transformers, directory, dtype, prompt, fed)
            rows.append(row("transformers", label, figures, bandwidth))
            print(rows[-1], file=sys.stderr)
    flm = FLM_E2B_KRACKAN
    rows.append(["FastFlowLM, E2B (35 layers) on a Krackan NPU, published", "q4nx", "",
                 f"{flm['prefill tok/s']:.0f}", f"{flm['decode tok/s']} at {flm['context']} context",
                 "", ""])  # fmt: skip
    caption = (
        f"E2B-shaped synthetic model, {config.num_hidden_layers} layers "
        f"({config.num_kv_shared_layers} KV-shared), a {PROMPT}-token prompt, {args.tokens} "
        f"decode tokens; this machine reads {bandwidth / 1e9:.1f} GB/s (numpy, same run)."
    )
    texts = [caption, markdown_table(HEADER, rows)]
    if args.sim:
        sims = []
        for weights in ("bf16", "bfp16"):
            moved, stored = sim_ddr(directory, weights)
            sims.append(
                [weights, f"{stored / 1e6:.1f}", f"{moved / 1e6:.1f}", f"{moved / stored:.2f}"]
            )
        texts.append(markdown_table(SIM_HEADER, sims))
    print("\n\n".join(texts))
    if args.write_readme:
        write_readme_section(README, "decode", "\n\n".join(texts))


if __name__ == "__main__":
    main()
