"""The Gemma 4 operators at E2B widths: time per call of the cpu backend's
host kernels (bf16 weights, every core) against a float32 numpy baseline
(the same arithmetic with the weights already widened to float32, as a
numpy port keeps them) in the same run; and the DDR bytes the simulator
counts for one decode token of each layer type against the layer's weight
bytes.

    uv run python packages/iron-ops-flm/benchmarks/gemma4.py [--quick] [--write-readme]

--quick runs the scaled-down widths (a check that the script works).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

# idle OpenMP workers sleep, as under the cpu backend's session (a spinning
# one on a shared host costs each parallel launch a scheduler quantum)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba
import numpy as np

from iron.core import Device, bf16
from iron.core.benchmarking import markdown_table, median_seconds, write_readme_section
from iron.ops.flm import decode_design, gemma4, host
from iron.ops.flm.decode_layer import DecodeLayer
from iron.ops.flm.lm_head import LMHead
from iron.ops.flm.prefill_attention import PrefillAttention
from iron.ops.flm.prefill_sliding_attention import PrefillSlidingAttention

README = Path(__file__).parents[1] / "README.md"
NPU2 = Device.from_name("npu2")
CPU_HEADER = ["operator", "shape", "host kernel ms", "numpy float32 ms", "ratio"]
TRAFFIC_HEADER = [
    "layer type",
    "weights MB",
    "weights read MB",
    "KV read KB",
    "other DDR KB",
    "DDR / weights",
]


def layer_ops(quick: bool, max_l: int) -> list[DecodeLayer]:
    geometry = (
        {**gemma4.GEMMA4_E2B, "hidden": 256, "intermediate": 512, "head_dim": 64,
         "global_head_dim": 128, "heads": 4, "kv_heads": 2, "window": 128}
        if quick
        else gemma4.GEMMA4_E2B
    )  # fmt: skip
    return [
        DecodeLayer(layer_type=t, max_l=max_l, **geometry).resolve(NPU2) for t in gemma4.LAYER_TYPES
    ]


# ---- float32 numpy baselines ---------------------------------------------------------------


def head_baseline(op: LMHead, x, norm, W):
    W32 = np.asarray(W, np.float32)
    return lambda: gemma4.softcap(W32 @ gemma4.rms_norm(x, norm), op.softcap)


def prefill_baseline(op, q, k, v, cache, L_begin, L_end):
    n = L_end - L_begin
    positions, keys, values = op.key_source(cache, k, v, L_begin, L_end)
    q32 = q[:n].astype(np.float32)
    keys, values = keys.astype(np.float32), values.astype(np.float32)
    seen = gemma4.visible(np.arange(L_begin, L_end), positions, op.window)
    return lambda: gemma4.attend(q32, keys, values, seen)


def layer_baseline(op: DecodeLayer, inputs, position):
    """The layer in numpy float32, its matrices unpacked to float32 once."""
    x, *rest = inputs
    ple, weights, norms, rope, cache = op.split_inputs(rest)
    mats, w = op.unpack_weights(weights), op.unpack_norms(norms)
    cache32 = cache.astype(np.float32)
    d = op.dim

    def step():
        resid = x.astype(np.float32)
        qkv = mats["qkv"] @ gemma4.rms_norm(resid, w["input"])
        q = gemma4.rotate(
            gemma4.rms_norm(qkv[: op.heads * d].reshape(op.heads, d), w["q_norm"]), rope[position]
        )
        first = 0 if op.is_global else max(0, position + 1 - op.window)
        slots = [op.slot(p) for p in range(first, position + 1)]
        ctx = gemma4.attend(
            q[None], cache32[0, slots], cache32[1, slots], np.ones((1, len(slots)), bool)
        )
        resid = resid + gemma4.rms_norm(mats["o"] @ ctx.reshape(-1), w["post_attention"])
        h2 = gemma4.rms_norm(resid, w["pre_feedforward"])
        m = gemma4.gelu_tanh(mats["gate"] @ h2) * (mats["up"] @ h2)
        resid = resid + gemma4.rms_norm(mats["down"] @ m, w["post_feedforward"])
        if op.per_layer:
            branch = gemma4.gelu_tanh(mats["per_layer_gate"] @ resid) * ple.astype(np.float32)
            resid = resid + gemma4.rms_norm(
                mats["per_layer_projection"] @ branch, w["post_per_layer_input"]
            )
        return resid * w["layer_scalar"]

    return step


def host_call(kernel, op, inputs, **values):
    reads = [s for s in op.arg_specs() if s.reads]
    arrays = [np.array(a, copy=True) if s.writes else a for a, s in zip(inputs, reads)]
    outs = [np.empty(s.shape, s.dtype) for s in op.arg_specs() if not s.reads]
    return lambda: kernel(op, *arrays, *outs, **values)


def row(name, shape, kernel_fn, baseline_fn, budget):
    t_kernel = median_seconds(kernel_fn, budget=budget, at_least=3)
    t_numpy = median_seconds(baseline_fn, budget=budget, at_least=3)
    return [
        name,
        shape,
        f"{t_kernel * 1e3:,.1f}",
        f"{t_numpy * 1e3:,.1f}",
        f"{t_numpy / t_kernel:.2f}x",
    ]


def cpu_rows(quick: bool) -> list[list[str]]:
    rng = np.random.default_rng(0)
    budget = 0.2 if quick else 2.0
    rows = []
    dim, vocab = (256, 2048) if quick else (1536, gemma4.VOCAB)
    head = LMHead(dim=dim, vocab=vocab).resolve(NPU2)
    x = rng.standard_normal(dim).astype(bf16)
    norm = (1 + 0.1 * rng.standard_normal(dim)).astype(bf16)
    W = np.empty((vocab, dim), bf16)
    for start in range(0, vocab, 16384):
        block = rng.standard_normal((min(16384, vocab - start), dim), np.float32)
        W[start : start + 16384] = block * np.float32(2 / math.sqrt(dim))
    rows.append(row("LMHead", f"{dim} x {vocab}", host_call(host.lm_head, head, [x, norm, W]),
                    head_baseline(head, x, norm, W), budget))  # fmt: skip
    del W
    geometry = {"heads": 8, "kv_heads": 1, "max_l": 4096, "chunk": 512}
    L_begin, L_end = (0, 128) if quick else (1024, 1536)
    for cls, extra in ((PrefillAttention, {}), (PrefillSlidingAttention, {})):
        params = {**geometry, **extra}
        if quick:
            params.update(heads=4, kv_heads=2, head_dim=64, chunk=128, max_l=512)
        op = cls(**params).resolve(NPU2)
        q, k, v, cache = op.example_inputs(rng)
        values = {"L_begin": L_begin, "L_end": L_end}
        rows.append(row(cls.__name__, f"rows {L_begin}..{L_end}, d {op.head_dim}",
                        host_call(host.prefill_attention, op, [q, k, v, cache], **values),
                        prefill_baseline(op, q, k, v, cache, L_begin, L_end), budget))  # fmt: skip
    position = 100 if quick else 1000
    for op in layer_ops(quick, max_l=4096 if not quick else 512):
        inputs = op.example_inputs(rng)
        rows.append(row(f"DecodeLayer {op.layer_type.value}", f"position {position}",
                        host_call(host.decode_layer, op, inputs, context_len=position),
                        layer_baseline(op, inputs, position), budget))  # fmt: skip
    return rows


def traffic_rows(quick: bool) -> list[list[str]]:
    """One simulated decode token per layer type: DDR bytes by tensor."""
    rng = np.random.default_rng(1)
    position = 100 if quick else 1000
    rows = []
    for op in layer_ops(quick, max_l=512 if quick else 4096):
        inputs = op.example_inputs(rng)
        run = decode_design.run(op, *inputs, context_len=position)
        moved = run.traffic.tensors
        weights = inputs[2].nbytes
        total = sum(t.read + t.written for t in moved.values())
        kv = moved["cache"].read
        other = total - moved["weights"].read - kv
        rows.append(
            [
                op.layer_type.value,
                f"{weights / 1e6:,.1f}",
                f"{moved['weights'].read / 1e6:,.1f}",
                f"{kv / 1e3:,.1f}",
                f"{other / 1e3:,.1f}",
                f"{total / weights:.4f}",
            ]
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scaled-down widths")
    parser.add_argument(
        "--write-readme", action="store_true", help="put the tables into the README"
    )
    args = parser.parse_args(argv)
    host.warm_up()
    cpu = markdown_table(CPU_HEADER, cpu_rows(args.quick))
    cpu += (
        f"\n\n{numba.get_num_threads()} numba threads on {numba.config.NUMBA_NUM_THREADS} allowed."
    )
    traffic = markdown_table(TRAFFIC_HEADER, traffic_rows(args.quick))
    print(cpu, traffic, sep="\n\n")
    if args.write_readme:
        if args.quick:
            raise SystemExit("--write-readme takes the E2B widths; drop --quick")
        write_readme_section(README, "gemma4-cpu", cpu)
        write_readme_section(README, "gemma4-traffic", traffic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
