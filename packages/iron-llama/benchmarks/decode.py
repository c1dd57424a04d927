"""Prefill and decode: the IRON graph on the cpu and reference backends against the float32 oracle.

The 1b-shaped synthetic preset (Llama 3.2 1B's widths, heads and
128256-token vocabulary; random weights) at 4 and 16 decoder layers: a
prefill of 128 tokens, then 32 decode steps. Every side is fed the same
tokens (the oracle's greedy choices, teacher-forced), so the run also gives
each backend's KL from the oracle at these shapes. Above 2 layers
(`--oracle-layers`) the float32 oracle is left out (it upcasts every weight
on every step: minutes per run); cpu's greedy tokens then feed reference
and the KL is reference's from cpu. Each side runs in a
fresh process, so its peak RSS (VmHWM) is its own.

Decode is memory-bound: a token reads every weight once. The same run
measures the bandwidth a 2-thread read stream reaches here (the plainest
streaming kernel: 64-bit words of a 512 MiB buffer folded by xor, which
moves more bytes per second than any GEMV can; five samples before,
between and after the sides: the limit is the median sample / weight
bytes per token), and each graph side's share of it from pairs: after its
measured steps, it decodes as many more, each followed by a stream
sample, and the share is the median ratio of a step's weight bytes per
second to the sample's rate. On a shared host, whatever runs beside slows
both halves of a pair alike; a best stream against a mean token
understated the share.

Prefill is compute-bound: its GEMMs (the layers' projections at the
prompt's rows) are nearly all its work. The same run measures the float32
sgemm rate numpy's BLAS reaches at those shapes (best of several, on every
core) and reports the time to first token as a multiple of the floor that
rate implies (GEMM flops / rate, the GEMMs alone): the cpu backend widens
bf16 to float32 for sgemm, as a host without bf16 arithmetic must.

`--llama-cpp PYTHON --gguf-converter PATH` adds llama.cpp (the peer people
run these models with on a CPU) on 2 threads: llama-cpp-python on a bf16
GGUF that llama.cpp's own converter (PATH: its convert_hf_to_gguf.py, of
the llama.cpp llama-cpp-python was built from) makes once from the same
checkpoint, beside it in the cache; run by `llama_side.py` with that
interpreter, which has llama-cpp-python built from source with native
flags and the converter's needs (see the README); the table then gives
the cpu side's decode speed and time to first token as ratios to it.

`--transformers PYTHON` adds transformers' `LlamaForCausalLM` (eager
attention, bf16 and float32 weights) as two more sides, on the same
checkpoint, prompt and fed tokens, run by `hf_side.py` with that
interpreter: one that has torch and transformers, which are not
dependencies of iron-llama (e.g. a venv made with
`pip install torch transformers`).

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/decode.py [--write-readme]
    ... decode.py --quick           # the tiny preset, 16 prompt tokens, 4 steps: a smoke run
    ... decode.py --layers 4 16     # the default; 16 layers write a 2.3 GiB synthetic file once
    ... decode.py --transformers /path/to/venv/bin/python   # transformers beside the graph
    ... decode.py --llama-cpp /path/to/venv/bin/python --gguf-converter /path/to/convert_hf_to_gguf.py

--write-readme puts the tables into the package README between its
bench:decode markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from iron.core.benchmarking import write_readme_section

README = Path(__file__).parents[1] / "README.md"
#: the graph's backends measured, beside the oracle
BACKENDS = ("cpu", "reference")
#: the stream: a bf16 matrix far larger than any cache
STREAM_BYTES = 512 << 20
#: stream samples taken before, between and after the sides
STREAM_SAMPLES = 5
#: transformers' sides (`--transformers`): name -> weight dtype
HF_SIDES = {"transformers bf16": "bfloat16", "transformers float32": "float32"}
HF_SIDE = Path(__file__).with_name("hf_side.py")
#: llama.cpp's side (`--llama-cpp`) and its threads: the cpu backend's 2
LLAMA_SIDE, LLAMA_THREADS = "llama.cpp bf16", 2
#: llama.cpp's OpenMP threads sleep when idle, as the cpu backend's do
#: (iron.dispatch.host.OPENMP_ENVIRONMENT): its default spins, which a shared
#: host punishes (one busy neighbour took its decode from 50 to 190-510 ms a
#: token here) and a quiet one rewards
LLAMA_ENVIRONMENT = {"OMP_WAIT_POLICY": "passive"}
LLAMA_SIDE_FILE = Path(__file__).with_name("llama_side.py")


def prompt_ids(vocab: int, prompt: int) -> list[int]:
    """The prompt every side prefills: token 0, then random tokens."""
    return [0, *np.random.default_rng(0).integers(2, vocab, prompt - 1).tolist()]


def run_side(
    side: str,
    directory: Path,
    prompt: int,
    steps: int,
    tokens: Path,
    out: Path,
    maker: bool,
    stream_bytes: int,
) -> None:
    """One side in this process: prefill, then `steps` decodes; logits and
    figures into `out` (.npz). The `maker` side makes the tokens (its greedy
    choices) every other side is fed. Once those figures are taken, a
    graph side decodes `steps` more tokens, each followed by a stream
    sample (`paired_shares`)."""
    from iron.llama import Model, Oracle, OracleModel
    from iron.lm.metrics import resident_bytes

    started = time.perf_counter()
    if side == "oracle":
        model = OracleModel(Oracle.from_pretrained(directory))
    else:
        model = Model.from_pretrained(directory, backend=side, progress=False)
    load = time.perf_counter() - started
    vocab = model.oracle.config.vocab_size if side == "oracle" else model.config.vocab_size
    ids = prompt_ids(vocab, prompt)
    fed = None if maker else np.load(tokens)
    seconds, rows, chosen = [], [], []
    for step in range(steps + 1):
        started = time.perf_counter()
        logits = model.prefill(ids) if step == 0 else model.decode(chosen[-1])
        seconds.append(time.perf_counter() - started)
        rows.append(logits)
        chosen.append(int(np.argmax(logits)) if maker else int(fed[step]))
    if maker:
        np.save(tokens, np.array(chosen))
    peak, steady = resident_bytes()
    figures = {"load": load, "ttft": seconds[0], "decode": float(np.mean(seconds[1:])),
               "peak": peak, "steady": steady}  # fmt: skip
    if side != "oracle":  # after the RSS figures: the stream's matrix is not the side's
        figures["paired"] = paired_shares(
            model, chosen[-1], weight_bytes(directory), steps, stream_bytes
        )
    np.savez(out, logits=np.array(rows), figures=json.dumps(figures))


def paired_shares(model, token: int, per_token: int, rounds: int, stream_bytes: int) -> list:
    """The share of the bandwidth limit, round by round: a decode step's
    weight bytes per second over the stream's rate sampled right after it.
    On a shared host both are slowed by whatever runs beside them, so a
    ratio of neighbours is steadier than a ratio of figures taken apart."""
    sample = stream_sampler(stream_bytes)
    shares = []
    for _ in range(rounds):
        started = time.perf_counter()
        model.decode(token)
        rate = per_token / (time.perf_counter() - started)
        shares.append(rate / sample())
    return sorted(shares)


def stream_sampler(nbytes: int):
    """A function timing one 2-thread read of `nbytes`: bytes per second.
    The kernel folds 64-bit words by xor, one contiguous block per task:
    nothing but loads, which no kernel that computes with the bytes can
    outrun."""
    import numba

    blocks = 64
    words = np.ones((blocks, nbytes // (8 * blocks)), np.uint64)
    folded = np.empty(blocks, np.uint64)
    read = _read_kernel()
    read(words, folded)  # the first call also compiles the kernel

    def sample() -> float:
        threads = numba.get_num_threads()
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        try:
            started = time.perf_counter()
            read(words, folded)
            return words.nbytes / (time.perf_counter() - started)
        finally:
            numba.set_num_threads(threads)

    return sample


def _read_kernel():
    from numba import njit, prange

    @njit(parallel=True)
    def read(words, folded):
        for block in prange(words.shape[0]):
            row, acc = words[block], np.uint64(0)
            for i in range(row.shape[0]):
                acc ^= row[i]
            folded[block] = acc

    return read


def import_problem(flag: str, python: str, modules: str) -> str | None:
    """Why `python` cannot import `modules` (comma-separated), or None."""
    try:
        found = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, text=True)
    except OSError as error:
        return f"{flag} {python}: cannot run it ({error.strerror})"
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{flag} {python} cannot import {modules}: {last}"
    return None


def prefill_gemms(directory: Path) -> list[tuple[int, int]]:
    """(N, K) of every GEMM a prefill runs, at the prompt's rows: each
    layer's projections, but only k and v of the last layer (the caches take
    every row; the rest of that layer and the head read one row: GEMVs)."""
    from iron.llama.config import LlamaConfig
    from iron.llama.weights import LlamaWeights, layer_tensor_name

    config = LlamaConfig.from_file(directory)
    shapes, last = LlamaWeights.expected_shapes(config), config.num_hidden_layers - 1
    return [
        shapes[layer_tensor_name(i, field)]
        for i in range(last + 1)
        for field in ("q", "k", "v", "o", "gate", "up", "down")
        if i < last or field in ("k", "v")
    ]


def sgemm_rate(gemms: list[tuple[int, int]], rows: int, repeats: int = 3) -> float:
    """Float32 flop/s numpy's BLAS reaches over one of each distinct GEMM
    shape (weight x activations^T, as the host GEMM runs them), each the
    best of `repeats`, weighted by how often the prefill runs it."""
    rng = np.random.default_rng(0)
    seconds = 0.0
    for (n, k), count in Counter(gemms).items():
        weight = rng.standard_normal((n, k), np.float32)
        rows_t = rng.standard_normal((rows, k), np.float32).T
        best = float("inf")
        for _ in range(repeats + 1):  # the first call also warms BLAS's threads
            started = time.perf_counter()
            np.matmul(weight, rows_t)
            best = min(best, time.perf_counter() - started)
        seconds += count * best
    return gemm_flops(gemms, rows) / seconds


def gemm_flops(gemms: list[tuple[int, int]], rows: int) -> int:
    return sum(2 * rows * n * k for n, k in gemms)


def weight_bytes(directory: Path) -> int:
    """The bytes of weights a decode step reads: every graph weight once."""
    from iron.llama.config import LlamaConfig
    from iron.llama.weights import LlamaWeights

    config = LlamaConfig.from_file(directory)
    shapes = LlamaWeights.expected_shapes(config)
    read = {n: s for n, s in shapes.items() if n != "model.embed_tokens.weight"}
    head = shapes["lm_head.weight" if "lm_head.weight" in shapes else "model.embed_tokens.weight"]
    return 2 * (sum(int(np.prod(s)) for s in read.values()) + int(np.prod(head)))


def measure(
    directory: Path,
    prompt: int,
    steps: int,
    stream_bytes: int,
    oracle: bool,
    transformers: str | None = None,
    llama: tuple[str, Path] | None = None,
    rounds: int = 1,
) -> tuple[dict, dict, list[float]]:
    """(figures per side, accuracy per side, stream samples in bytes/s),
    each side in a child process; the stream is measured between them.
    The first side (the oracle, else cpu) makes the tokens and is the
    baseline of the others' KL. With `transformers` (an interpreter that
    has torch and transformers) `HF_SIDES` run last; with `llama`
    (an interpreter with llama-cpp-python, a GGUF) llama.cpp's side.
    `rounds` > 1 runs every side that many times, interleaved, and gives
    each figure's median (`medians`); logits are the first round's."""
    from iron.lm.checks import kl_divergence

    with tempfile.TemporaryDirectory(prefix="iron-llama-bench-") as work:
        return _measure(
            Path(work), directory, prompt, steps, stream_bytes, oracle, transformers, llama,
            rounds, kl_divergence,
        )  # fmt: skip


def _measure(work, directory, prompt, steps, stream_bytes, oracle, transformers, llama, rounds,
             kl_divergence):  # fmt: skip
    from iron.llama.config import LlamaConfig

    streams = []
    sample = stream_sampler(stream_bytes)  # one buffer for every sample taken here
    sides = ("oracle", *BACKENDS) if oracle else BACKENDS
    vocab = LlamaConfig.from_file(directory).vocab_size
    np.save(work / "prompt.npy", np.array(prompt_ids(vocab, prompt), np.int64))
    if llama:
        sides = (*sides, LLAMA_SIDE)
    if transformers:
        sides = (*sides, *HF_SIDES)
    rounds_of = {side: [] for side in sides}
    for round_ in range(rounds):  # interleaved: each round runs every side once, in turn
        for side in sides:
            out = work / f"{side.replace(' ', '-')}.npz"
            streams += [sample() for _ in range(STREAM_SAMPLES)]
            common = ["--model-dir", str(directory), "--steps", str(steps),
                      "--tokens", str(work / "tokens.npy"), "--out", str(out)]  # fmt: skip
            if side == LLAMA_SIDE:
                command = [llama[0], str(LLAMA_SIDE_FILE), "run", "--gguf", str(llama[1]),
                           "--threads", str(LLAMA_THREADS),
                           "--prompt-ids", str(work / "prompt.npy"), *common[2:]]  # fmt: skip
            elif side in HF_SIDES:
                command = [transformers, str(HF_SIDE), "--dtype", HF_SIDES[side],
                           "--prompt-ids", str(work / "prompt.npy"), *common]  # fmt: skip
            else:
                maker = ["--maker"] if side == sides[0] and round_ == 0 else []
                command = [sys.executable, __file__, "--child", side, "--prompt", str(prompt),
                           "--stream-bytes", str(stream_bytes), *common, *maker]  # fmt: skip
            env = {**os.environ, **LLAMA_ENVIRONMENT} if side == LLAMA_SIDE else None
            subprocess.run(command, check=True, env=env)
            with np.load(out) as data:
                rounds_of[side].append((data["logits"], json.loads(str(data["figures"]))))
    results = {
        side: (runs[0][0], medians([f for _, f in runs])) for side, runs in rounds_of.items()
    }
    streams += [sample() for _ in range(STREAM_SAMPLES)]
    expected = results[sides[0]][0]
    accuracy = {}
    for side in sides[1:]:
        got = results[side][0]
        kl = [kl_divergence(e, g) for e, g in zip(expected, got)]
        agree = int(np.sum(expected.argmax(axis=-1) == got.argmax(axis=-1)))
        accuracy[side] = {"mean": float(np.mean(kl)), "max": float(np.max(kl)), "agree": agree,
                          "steps": len(kl), "baseline": sides[0]}  # fmt: skip
    return {side: figures for side, (_, figures) in results.items()}, accuracy, streams


def medians(rounds: list[dict]) -> dict:
    """One side's figures over its rounds: the median of each, every
    round's paired shares together, and how many rounds there were."""
    merged = {key: float(np.median([f[key] for f in rounds])) for key in ("load", "ttft", "decode")}
    for key in ("peak", "steady"):
        found = [f[key] for f in rounds if f[key] is not None]
        merged[key] = max(found) if found else None
    if "paired" in rounds[0]:
        merged["paired"] = sorted(share for f in rounds for share in f["paired"])
    return {**merged, "rounds": len(rounds)}


def table(figures, accuracy, streams: list, per_token: int, label: str, prompt, steps) -> str:
    """The limit in tokens/s is the median stream sample's; a graph side's
    share of it is the median of its paired shares (`paired_shares`)."""
    stream, best = float(np.median(streams)), max(streams)
    limit = stream / per_token  # tokens/s if a step only streamed its weights
    rounds = figures["cpu"].get("rounds", 1)

    def mib(n):
        return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"

    def column(side):
        f = figures[side]
        speed = 1 / f["decode"]
        share = ""
        if "paired" in f:
            paired = f["paired"]
            share = (f" ({np.median(paired):.0%} of the limit; "
                     f"{paired[0]:.0%}-{paired[-1]:.0%} over {len(paired)} pairs)")  # fmt: skip
        elif side != "oracle":
            share = f" ({speed / limit:.0%} of the median limit)"
        return [f"{f['load']:.2f} s", f"{f['ttft'] * 1e3:,.0f} ms",
                f"{speed:.2f} tokens/s{share}", mib(f["peak"]), mib(f["steady"])]  # fmt: skip

    names = ["load (read, compile, upload)", f"time to first token ({prompt}-token prompt)",
             f"decode ({steps} steps)", "peak RSS (VmHWM)", "steady RSS (VmRSS)"]  # fmt: skip
    oracle = ("oracle",) if "oracle" in figures else ()
    hf = tuple(side for side in (LLAMA_SIDE, *HF_SIDES) if side in figures)
    columns = [column(side) for side in (*BACKENDS, *oracle, *hf)]
    header = ("measure", *(f"IRON graph, {s} backend" for s in BACKENDS),
              *("float32 oracle" for _ in oracle), *hf)  # fmt: skip
    lines = [
        f"{label}; Python {platform.python_version()}, {platform.machine()}, one run"
        + (f", medians of {rounds} interleaved rounds:" if rounds > 1 else ":"),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *(
            "| " + " | ".join([name, *(c[i] for c in columns)]) + " |"
            for i, name in enumerate(names)
        ),
        "",
        f"Bandwidth limit: a 2-thread read stream moves {stream / 1e9:.1f} GB/s here (median of "
        f"{len(streams)} samples taken before, between and after the sides; best "
        f"{best / 1e9:.1f}); a token reads {decimal_bytes(per_token)} of weights, so at most "
        f"{limit:.2f} tokens/s. A side's share of the limit pairs each of {steps} more decode "
        f"steps with a stream sample taken right after it, in the side's process: the median "
        f"of the ratios (a step's weight bytes per second over the sample's rate). "
        + "Weights read per second while decoding: "
        + ", ".join(
            f"{side} {decimal_bytes(per_token / figures[side]['decode'])}/s"
            for side in ("cpu", *hf)
        )
        + ".",
    ]
    if LLAMA_SIDE in figures:
        cpu, peer = figures["cpu"], figures[LLAMA_SIDE]
        lines.append(
            f"cpu against llama.cpp ({LLAMA_THREADS} threads, OMP_WAIT_POLICY=passive, bf16 GGUF "
            f"of the same checkpoint, in this run): decode {peer['decode'] / cpu['decode']:.2f}x its speed "
            f"({1 / cpu['decode']:.2f} against {1 / peer['decode']:.2f} tokens/s), time to first "
            f"token {cpu['ttft'] / peer['ttft']:.2f}x its time ({milliseconds(cpu['ttft'])} "
            f"against {milliseconds(peer['ttft'])})."
        )
    if any(side in HF_SIDES for side in hf):
        lines.append(
            "transformers: LlamaForCausalLM with eager attention on the same checkpoint, "
            "torch on every core; its load includes widening the weights for float32."
        )
    for side, a in accuracy.items():
        graph = "graph" if a["baseline"] == "oracle" and side in BACKENDS else side
        lines.append(
            f"Teacher-forced over the {a['steps']} positions, {side}: KL({a['baseline']} || {graph}) mean "
            f"{a['mean']:.2e}, max {a['max']:.2e}; top-1 agrees at {a['agree']}/{a['steps']}."
        )
    return "\n".join(lines)


def prefill_floor(figures: dict, flops: int, rate: float) -> str:
    floor = flops / rate
    sides = [s for s in (*BACKENDS, LLAMA_SIDE, *HF_SIDES) if s in figures]
    multiples = ", ".join(f"{s} {figures[s]['ttft'] / floor:.1f}x" for s in sides)
    return (
        f"Prefill floor: the prompt's GEMMs are {flops / 1e9:.3g} GFLOP and float32 sgemm runs "
        f"{rate / 1e9:.3g} GFLOP/s here at their shapes (numpy's BLAS, every core), so a first "
        f"token takes at least {milliseconds(floor)}; time to first token is {multiples} that."
    )


def decimal_bytes(count: float) -> str:
    """2.47 GB, 1.31 MB, 12.4 kB: never a tiny model's "0.00 GB"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count:.0f} B"


def milliseconds(seconds: float) -> str:
    """2,197 ms, 14.7 ms, 0.0421 ms: three figures below ten, never "0 ms"."""
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.3g} ms"


def gguf_of(directory: Path, args) -> Path:
    """The bf16 GGUF of `directory` beside it, made by llama.cpp's converter
    the first time (`llama_side.py convert`)."""
    gguf = directory.with_name(directory.name + ".bf16.gguf")
    if not gguf.exists():
        print(f"writing {gguf} with llama.cpp's converter", file=sys.stderr)
        subprocess.run(
            [args.llama_cpp, str(LLAMA_SIDE_FILE), "convert", "--converter",
             str(args.gguf_converter), "--model-dir", str(directory), "--out", str(gguf)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return gguf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset, 16 tokens, 4 steps")
    parser.add_argument("--write-readme", action="store_true")
    parser.add_argument("--model-dir", type=Path, help="where the synthetic model is kept")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=32, help="decode steps")
    parser.add_argument(
        "--layers",
        type=int,
        nargs="+",
        default=[4, 16],
        help="decoder layers of the 1b-shaped model",
    )
    parser.add_argument(
        "--oracle-layers",
        type=int,
        default=2,
        help="run the oracle up to this many layers (above, cpu makes the tokens)",
    )
    parser.add_argument(
        "--transformers",
        metavar="PYTHON",
        help="an interpreter with torch and transformers: adds transformers' sides",
    )
    parser.add_argument(
        "--llama-cpp",
        metavar="PYTHON",
        help="an interpreter with llama-cpp-python: adds llama.cpp's side (needs --gguf-converter)",
    )
    parser.add_argument(
        "--gguf-converter",
        metavar="PATH",
        type=Path,
        help="llama.cpp's convert_hf_to_gguf.py, to make each model's bf16 GGUF once",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="run every side this many times, interleaved"
    )
    parser.add_argument("--child", choices=("oracle", *BACKENDS), help=argparse.SUPPRESS)
    parser.add_argument("--maker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stream-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_side(
            args.child, args.model_dir, args.prompt, args.steps, args.tokens, args.out,
            args.maker, args.stream_bytes,
        )  # fmt: skip
        return

    if args.transformers and (
        problem := import_problem("--transformers", args.transformers, "torch, transformers")
    ):
        parser.error(problem)  # before any side runs
    if args.llama_cpp:
        if args.gguf_converter is None or not args.gguf_converter.is_file():
            parser.error("--llama-cpp needs --gguf-converter: llama.cpp's convert_hf_to_gguf.py")
        if problem := import_problem("--llama-cpp", args.llama_cpp, "llama_cpp, gguf"):
            parser.error(problem)
    from iron.dispatch import cache_home
    from iron.llama import ensure_synthetic

    if args.quick:
        runs = [("tiny", None, args.model_dir or Path(tempfile.mkdtemp(prefix="iron-llama-tiny-")),
                 "tiny preset (quick run)")]  # fmt: skip
        prompt, steps, stream_bytes = 16, 4, 32 << 20
    else:
        runs = [("1b-shaped", layers, args.model_dir or cache_home() / "models" / f"1b-shaped-{layers}",
                 f"1b-shaped preset, {layers} layers (Llama 3.2 1B widths, 128256-token vocabulary)")
                for layers in args.layers]  # fmt: skip
        prompt, steps, stream_bytes = args.prompt, args.steps, STREAM_BYTES
    texts = []
    for preset, layers, directory, label in runs:
        if ensure_synthetic(directory, preset, layers):
            print(f"wrote the synthetic model to {directory}", file=sys.stderr)
        oracle = layers is None or layers <= args.oracle_layers
        gemms = prefill_gemms(directory)
        rate = sgemm_rate(gemms, prompt)  # before and after the sides: the best of both
        llama = args.llama_cpp and (args.llama_cpp, gguf_of(directory, args))
        figures, accuracy, stream = measure(
            directory, prompt, steps, stream_bytes, oracle, args.transformers, llama, args.rounds
        )
        rate = max(rate, sgemm_rate(gemms, prompt))
        per_token = weight_bytes(directory)
        text = table(figures, accuracy, stream, per_token, label, prompt, steps)
        texts.append(text + "\n" + prefill_floor(figures, gemm_flops(gemms, prompt), rate))
        print(texts[-1], flush=True)
    if args.write_readme:
        write_readme_section(README, "decode", "\n\n".join(texts))
        print(f"wrote {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
