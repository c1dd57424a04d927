"""RoPE: rotary position embedding over rows of `cols`, and the angle table
it reads (`angle_table`, with Llama 3 frequency scaling)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Operator, bf16, require, tunable
from iron.ops.eltwise.common import ROUNDED, ROW_CAP, check_array, default_array

METHODS = ("two_halves", "interleaved")
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@attrs.frozen
class RoPE(Operator):
    """Rotates pairs of each row of `x` by the angles of its angle row.

    Row r of `angles` holds [cos f0, sin f0, cos f1, sin f1, ...] (see
    `angle_table`) and serves the rows/angle_rows CONSECUTIVE rows of `x`
    starting at r * rows/angle_rows: several heads of one position. Pair i
    is (x[i], x[i + cols/2]) for method "two_halves" (Hugging Face's
    rotate-half), (x[2i], x[2i + 1]) for "interleaved" (Meta's layout); it
    becomes (x1 cos fi - x2 sin fi, x2 cos fi + x1 sin fi). In float32,
    rounded once.
    """

    rows: int
    cols: int
    angle_rows: int = attrs.field(default=attrs.Factory(lambda self: self.rows, takes_self=True))
    method: str = "two_halves"
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()

    host = "iron.ops.eltwise.host:rope"  # the cpu backend's kernel

    cases = (
        Case({"rows": 32, "cols": 64, "angle_rows": 8, "num_aie_columns": 4}),
        Case({"rows": 32, "cols": 64, "angle_rows": 1}),  # one decode position, 32 heads
        Case({"rows": 64, "cols": 128, "angle_rows": 16, "method": "interleaved",
              "num_aie_columns": 2, "num_channels": 2}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(rows, cols, angle_rows, dtype=bf16):
        return [
            ArgSpec("x", (rows, cols), dtype, IN),
            ArgSpec("angles", (angle_rows, cols), dtype, IN),
            ArgSpec("y", (rows, cols), dtype, OUT),
        ]

    def validate(self):
        require(self, "rows", self.rows >= 1, "at least 1")
        require(
            self,
            "cols",
            32 <= self.cols <= ROW_CAP and self.cols % 32 == 0,
            f"a multiple of 32, at most {ROW_CAP} (each rotated half fills whole 16-lane "
            "vectors; a row is held whole in a core)",
        )
        require(
            self,
            "angle_rows",
            self.angle_rows >= 1 and self.rows % self.angle_rows == 0,
            f"must divide rows={self.rows} (each angle row serves rows/angle_rows "
            "consecutive rows)",
        )
        require(self, "method", self.method in METHODS, f"one of {', '.join(METHODS)}")
        # a core takes whole angle rows with their rows: x and the angles stream in
        check_array(self, "angle_rows", self.angle_rows, "angle rows", streams=2)

    def tune(self, device):
        return default_array(self, device, self.angle_rows, streams=2)

    @staticmethod
    def design(rows, cols, angle_rows, method, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import rows as row_designs  # loads iron.design on first use

        return row_designs.rope(
            rows, cols, angle_rows, method, num_aie_columns, num_channels, device
        )

    def reference(self, x, angles):
        x, angles = x.astype(np.float32), angles.astype(np.float32)
        per_angle_row = self.rows // self.angle_rows
        cos = np.repeat(angles[:, 0::2], per_angle_row, axis=0)
        sin = np.repeat(angles[:, 1::2], per_angle_row, axis=0)
        if self.method == "two_halves":
            x1, x2 = np.split(x, 2, axis=-1)
            y = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        else:
            x1, x2 = x[:, 0::2], x[:, 1::2]
            y = np.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).reshape(x.shape)
        return y.astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        # products of bf16 values are exact in float32; the rotated sum rounds once
        return ROUNDED


def angle_table(
    positions, cols: int, base: float, scaling: Mapping[str, float] | None = None
) -> np.ndarray:
    """The table RoPE reads: one float32 row per position, [cos(p f0),
    sin(p f0), cos(p f1), sin(p f1), ...] with f_i = base^(-2i/cols),
    shape (len(positions), cols). `scaling` is Llama 3's frequency scaling
    (Hugging Face's `rope_scaling` dict: factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings; a `rope_type` other
    than "llama3" is refused). Frequencies are computed in float64 and
    rounded to float32 once, like the float32 frequencies Hugging Face
    holds; each angle and its cos and sin are float64, rounded once. Cast to
    bf16 for the device input: `angle_table(...).astype(bf16)`."""
    positions = np.asarray(positions)
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        raise ValueError(f"angle_table: positions must be a 1-D integer array, got {positions!r}")
    if cols < 2 or cols % 2:
        raise ValueError(f"angle_table: cols={cols!r}: a positive even number (cos, sin pairs)")
    if base <= 1:
        raise ValueError(f"angle_table: base={base!r}: greater than 1")
    inv_freq = 1.0 / float(base) ** (np.arange(0, cols, 2, dtype=np.float64) / cols)
    if scaling is not None:
        inv_freq = _llama3_scaled(inv_freq, scaling)
    angles = positions.astype(np.float64)[:, None] * inv_freq.astype(np.float32).astype(np.float64)
    table = np.empty((len(positions), cols), np.float32)
    table[:, 0::2] = np.cos(angles)
    table[:, 1::2] = np.sin(angles)
    return table


def _llama3_scaled(inv_freq: np.ndarray, scaling: Mapping[str, float]) -> np.ndarray:
    """Llama 3's rescaling by wavelength: frequencies whose wavelength is
    under original/high_freq_factor are kept, those over
    original/low_freq_factor are divided by `factor`, and those between are
    blended."""
    kind = scaling.get("rope_type", scaling.get("type", "llama3"))
    if kind != "llama3":
        raise ValueError(f"angle_table: scaling of rope_type={kind!r}; only llama3 is supported")
    missing = [k for k in _LLAMA3_KEYS if k not in scaling]
    if missing:
        raise ValueError(f"angle_table: scaling lacks {', '.join(missing)}")
    factor, low, high, original = (float(scaling[k]) for k in _LLAMA3_KEYS)
    if not (factor > 0 and 0 < low < high and original > 0):
        raise ValueError(
            f"angle_table: scaling needs factor > 0 and 0 < low_freq_factor < high_freq_factor, "
            f"got {dict(scaling)!r}"
        )
    wavelength = 2 * np.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return np.where(
        wavelength < original / high,
        inv_freq,
        np.where(wavelength > original / low, inv_freq / factor, blended),
    )
