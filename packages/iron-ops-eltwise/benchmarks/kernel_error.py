"""How far the row operators' designs, simulated with the models of
mlir-aie's kernels, land from the float64 formula: the figure each
operator's tolerance must cover, per generation.

    uv run --package iron-npu-ops-eltwise python packages/iron-ops-eltwise/benchmarks/kernel_error.py [--write-readme]

Inputs are unit-normal bf16 rows (RMSNorm's weight too; RoPE's angles a
table of random positions), 8 seeds per declared case. `rtol needed` is the
largest (|a - e| - atol) / |e| over all elements, with the operator's atol:
the operator's rtol must be at least that. --write-readme puts the table into
the package README between its kernel-error markers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from iron.core import Device, bf16
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import design_of, simulate
from iron.ops.eltwise import LayerNorm, RMSNorm, RoPE, Softmax, angle_table

README = Path(__file__).parents[1] / "README.md"
SEEDS = range(8)


def inputs(op, rng):
    given = {}
    for spec in op.arg_specs():
        if spec.name == "angles":
            positions = rng.integers(0, 8192, spec.shape[0])
            given["angles"] = angle_table(positions, spec.shape[1], 500000.0).astype(bf16)
        elif spec.reads:
            given[spec.name] = rng.standard_normal(spec.shape).astype(bf16)
    return given


def formula(op, given) -> np.ndarray:
    x = given["x"].astype(np.float64)
    if isinstance(op, RMSNorm):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + op.eps)
        return y * given["weight"].astype(np.float64) if op.weighted else y
    if isinstance(op, LayerNorm):
        centred = x - x.mean(axis=-1, keepdims=True)
        return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + op.eps)
    if isinstance(op, Softmax):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    a = np.repeat(given["angles"].astype(np.float64), op.rows // op.angle_rows, axis=0)
    cos, sin = a[:, 0::2], a[:, 1::2]
    if op.method == "two_halves":
        x1, x2 = np.split(x, 2, axis=-1)
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    y = np.empty_like(x)
    y[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin
    y[:, 1::2] = x[:, 1::2] * cos + x[:, 0::2] * sin
    return y


def measure(op) -> tuple[float, float]:
    """(rtol needed, max abs error) over SEEDS."""
    tolerance = op.tolerance()
    design = design_of(op)
    params = {"valid": op.cols} if isinstance(op, Softmax) else None
    needed = worst_abs = 0.0
    for seed in SEEDS:
        given = inputs(op, np.random.default_rng(seed))
        e = formula(op, given)
        diff = np.abs(simulate(design, given, params)["y"].astype(np.float64) - e)
        worst_abs = max(worst_abs, float(diff.max()))
        excess = np.maximum(diff - tolerance.atol, 0) / np.maximum(np.abs(e), 1e-300)
        needed = max(needed, float(excess.max()))
    return needed, worst_abs


def rows() -> list[list[str]]:
    table = []
    for cls in (RMSNorm, LayerNorm, Softmax, RoPE):
        for case in cls.cases:
            for device in ("npu1", "npu2"):
                op = cls(**case.params).resolve(Device.from_name(device))
                kernels = ", ".join(k.symbol for k in design_of(op).kernels)
                needed, worst = measure(op)
                tolerance = op.tolerance()
                table.append([
                    f"{cls.__name__}({case.label})", f"{device} ({op.device.arch})", kernels,
                    f"{needed:.4f}", f"{worst:.3g}", str(tolerance),
                    "yes" if needed <= tolerance.rtol else "NO",
                ])  # fmt: skip
    return table


def main() -> None:
    header = ["operator", "device", "kernels", "rtol needed", "max abs", "tolerance", "covered"]
    text = markdown_table(header, rows())
    print(text)
    if "--write-readme" in sys.argv[1:]:
        write_readme_section(README, "kernel-error", text)


if __name__ == "__main__":
    main()
