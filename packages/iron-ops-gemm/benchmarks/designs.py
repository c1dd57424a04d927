"""What each design takes of the device, and how far its kernels' numpy
models land from float64.

    uv run python packages/iron-ops-gemm/benchmarks/designs.py [--write-readme]

The first table: every declared case of the family's operators with a
design, on npu1 and npu2, and the gemm-family operators at Llama 3.2 1B's
shapes on npu2 (256-row prompts, a 2048-position cache). Per design: cores
used; the most core memory (L1) one core takes of its 64 KiB; the most one
memtile takes of its 512 KiB; the most runtime tasks live on one shim at
once (each holds one of its 16 BDs); and `iron.design.check`'s verdict. A
refused case shows the operator's rule.

The second: each design simulated on standard-normal data (int8: uniform)
against the exact answer in float64, rounded once to the output type: the
largest error, and the largest share of the operator's own tolerance
(|error| / (atol + rtol |exact|)) any element uses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs
import numpy as np

from iron.core import Device, OperatorError
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.core.numerics import round_to_bf16
from iron.design import check, design_of, simulate, usage
from iron.ops.gemm import GEMM, GEMV, MHA, GQAContext, GQAScores

README = Path(__file__).parents[1] / "README.md"
OPERATORS = (GEMM, GEMV, MHA, GQAScores, GQAContext)


def llama_cases():
    """(operator class, label, parameters) as iron.llama's graph builds them."""
    for label, k, n in (("q/o", 2048, 2048), ("k/v", 2048, 512), ("gate/up", 2048, 8192),
                        ("down", 8192, 2048)):  # fmt: skip
        yield GEMM, f"Llama prefill {label}: M=256,K={k},N={n},b_col_maj", {
            "M": 256, "K": k, "N": n, "b_col_maj": True}  # fmt: skip
    for label, m, k in (("q/o", 2048, 2048), ("k/v", 512, 2048), ("gate/up", 8192, 2048),
                        ("down", 2048, 8192), ("head", 128256, 2048)):  # fmt: skip
        yield GEMV, f"Llama decode {label}: M={m},K={k}", {"M": m, "K": k}
    yield MHA, "Llama prefill: 32 heads over 8, 256 rows, 4 pipelines", {
        "num_heads": 32, "seq_len": 256, "num_kv_heads": 8, "heads_interleaved": True,
        "num_pipelines": 4}  # fmt: skip
    for cls in (GQAScores, GQAContext):
        yield cls, "Llama decode: 32 heads over 8, 2048 positions", {
            "heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048}  # fmt: skip


def cases():
    for cls in OPERATORS:
        for case in cls.cases:
            for name in ("npu1", "npu2"):
                yield cls, case.label, case.params, Device.from_name(name)
    for cls, label, params in llama_cases():
        yield cls, label, params, Device.from_name("npu2")


def row(cls, label, params, device) -> list[str]:
    where = [cls.__name__, label, device.name]
    try:
        op = cls(**params).resolve(device)
    except OperatorError as refusal:
        return [*where, "", "", "", "", f"refused: {str(refusal).split(': ', 1)[1]}"]
    design = design_of(op)
    tiles = usage(design).values()
    l1 = max(t.memory_bytes for t in tiles if t.kind == "core")
    memtile = max((t.memory_bytes for t in tiles if t.kind == "memtile"), default=0)
    bds = max(t.bds for t in tiles if t.kind == "shim")
    report = check(design)
    verdict = "ok" if report.ok else f"{len(report.violations)} violations: {report.violations[0]}"
    return [
        *where,
        str(len(design.workers)),
        f"{l1:,} ({l1 / device.core_bytes:.0%})",
        f"{memtile:,}",
        f"{bds} of {device.bd_ids_per_shim}",
        verdict,
    ]


def measure() -> str:
    header = ["operator", "case", "device", "cores", "L1 per core, most (of 64 KiB)",
              "memtile bytes, most", "shim BDs live, most", "check"]  # fmt: skip
    return markdown_table(header, [row(*case) for case in cases()])


def exact_gemm(op, a, b):
    columns = b if op.b_col_maj else b.T
    c = a.astype(np.float64) @ columns.astype(np.float64).T
    return c.T if op.c_col_maj else c


def exact_gemv(op, a, x):
    return (a.astype(np.float64) @ x.astype(np.float64)[..., None])[..., 0]


def exact_scores(op, q, keys):
    n, g = op.valid, op.heads // op.kv_heads
    k = keys[:n].astype(np.float64)
    out = np.zeros((op.heads, op.max_seq_len))
    for h in range(op.heads):
        out[h, :n] = k[:, h // g] @ q[h].astype(np.float64) / np.sqrt(op.head_dim)
    return out


def exact_context(op, w, values):
    n, g = op.valid, op.heads // op.kv_heads
    v = values[:n].astype(np.float64)
    return np.stack([w[h, :n].astype(np.float64) @ v[:, h // g] for h in range(op.heads)])


def exact_mha(op, q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    n, g = op.seq_len, op.num_heads // op.kv_heads
    out = np.zeros(q.shape)
    for h in range(op.num_heads):
        s = q[h, :n] @ k[h // g, :n].T / np.sqrt(op.head_dim)
        s[np.triu_indices(n, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        out[h, :n] = (w / w.sum(axis=1, keepdims=True)) @ v[h // g, :n]
    return out


NUMERICS = [
    ("GEMM bf16, 256 x 256 x 256", GEMM(256, 256, 256), exact_gemm),
    (
        "GEMM bf16 -> float32, 256 x 256 x 256",
        GEMM(256, 256, 256, dtype_out="float32", tile_n=32),
        exact_gemm,
    ),
    (
        "GEMM int8 -> int32, 256 x 256 x 256",
        GEMM(256, 256, 256, dtype_in="int8", dtype_out="int32"),
        exact_gemm,
    ),
    (
        "GEMM int8 -> bf16, 256 x 256 x 256",
        GEMM(256, 256, 256, dtype_in="int8", dtype_out="bf16"),
        exact_gemm,
    ),
    ("GEMV, 2048 x 512", GEMV(2048, 512), exact_gemv),
    (
        "GQAScores, 32 over 8 heads, 200 of 256 positions",
        GQAScores(32, 8, 64, 256, valid=200),
        exact_scores,
    ),
    (
        "GQAContext, 32 over 8 heads, 200 of 256 positions",
        GQAContext(32, 8, 64, 256, valid=200),
        exact_context,
    ),
    ("MHA, 8 over 2 heads, 256 rows", MHA(8, 256, num_kv_heads=2, num_pipelines=4), exact_mha),
]


def inputs_for(op, rng):
    arrays = []
    for spec in op.arg_specs():
        if not spec.reads:
            continue
        if np.dtype(spec.dtype) == np.int8:
            arrays.append(rng.integers(-128, 128, spec.shape, dtype=np.int8))
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
    if isinstance(op, GQAContext):  # softmax weights: positive, summing to 1
        w = np.abs(arrays[0].astype(np.float32))
        arrays[0] = (w / w[:, : op.valid].sum(axis=1, keepdims=True)).astype(arrays[0].dtype)
    return arrays


def numerics() -> str:
    rows = []
    for label, op, exact in NUMERICS:
        for name in ("npu1", "npu2"):
            device = Device.from_name(name)
            try:
                resolved = op.resolve(device)
            except OperatorError:
                continue
            rng = np.random.default_rng(0)
            arrays = inputs_for(resolved, rng)
            specs = resolved.arg_specs()
            (out,) = [s for s in specs if s.writes]
            params = {"valid": op.valid} if hasattr(op, "valid") else None
            names = [s.name for s in specs if s.reads]
            design = design_of(attrs.evolve(resolved, valid=None) if params else resolved)
            got = simulate(design, dict(zip(names, arrays)), params)[out.name]
            want = exact(resolved, *arrays)
            if got.dtype.kind == "i":
                want = want.astype(np.int64)
            elif got.dtype != np.float32:
                want = round_to_bf16(want).astype(np.float64)
            got, want = got.astype(np.float64), np.asarray(want, np.float64)
            tolerance = resolved.tolerance(device, inputs=arrays)
            error = np.abs(got - want)
            with np.errstate(invalid="ignore"):  # 0 / 0 where an exact tolerance meets no error
                share = error / (tolerance.atol + tolerance.rtol * np.abs(want))
            rows.append([label, name, f"{error.max():.3g}", f"{np.nan_to_num(share).max():.3f}"])
    header = ["design", "device", "largest error vs float64", "largest share of tolerance"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-readme", action="store_true", help=f"write the table into {README.name}"
    )
    args = parser.parse_args(argv)
    text, figures = measure(), numerics()
    print(text, figures, sep="\n\n")
    if args.write_readme:
        write_readme_section(README, "designs", text)
        write_readme_section(README, "design-numerics", figures)
        print(f"wrote the tables into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
