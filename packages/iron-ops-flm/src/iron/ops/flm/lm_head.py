"""LMHead: Gemma 4's output head for one token, the final RMS norm folded
in: logits = softcap(W (norm(x) * w)), the weight in bf16 or the family's
bfp16ebs8, streamed from DDR once, in column blocks of rows."""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Device, Operator, Tolerance, bf16, require
from iron.core.numerics import mean_abs
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Release,
    Scalar,
    Tensor,
    Tile,
    Worker,
    core,
    join,
    memtile,
    shim,
    shipped,
    split,
)
from iron.ops.flm import gemma4, kernel_math
from iron.ops.flm.gemma4 import EPS, check_aie2p
from iron.ops.flm.packing import GROUP, GROUP_BYTES, Rounding
from iron.ops.flm.transfers import split_count
from iron.ops.flm.weights import WeightFormat, pack_rows, unpack_rows, weight_format

#: x and the norm weight reach every core in chunks of this many bf16
CHUNK = 256
#: weight rows a core multiplies per round (a tile of ROWS x dim)
ROWS = 4
#: cores per column: the compute rows
CORES_PER_COLUMN = 4
#: device error per unit of product mass: h is rounded to bf16 (2^-9) before
#: the multiply, the rest sums in float32
BUDGET = 2.0**-8
#: the Pade tanh's largest error (kernel_math.tanh), scaled by the cap
TANH_ERROR = 1e-4
#: rows of W the reference widens to float32 at once (64 MiB of float32)
REFERENCE_BLOCK = 64 << 20


@attrs.frozen
class LMHead(Operator):
    """logits (vocab,) = softcap(W (rms_norm(x) * norm)) for one token, bf16
    in and out: x (dim,), the final norm's weight (dim,), W (vocab, dim)
    row-major in bf16 (the tied embedding table itself) or packed bfp16ebs8
    (`pack`). softcap None leaves the logits uncapped. npu2 only."""

    dim: int
    vocab: int
    softcap: float | None = gemma4.SOFTCAP
    weights: WeightFormat = attrs.field(
        default=WeightFormat.BF16, converter=weight_format("LMHead")
    )
    eps: float = EPS

    host = "iron.ops.flm.host:lm_head"
    cases = (
        Case({"dim": 256, "vocab": 2048}),
        Case({"dim": 512, "vocab": 1024, "weights": "bfp16"}),
        Case({"dim": 256, "vocab": 1024, "softcap": None}),
    )

    @staticmethod
    def arg_spec(dim, vocab, weights):
        if weights is WeightFormat.BFP16:
            w = ArgSpec("W", (vocab * dim // GROUP, GROUP_BYTES), np.uint8, IN)
        else:
            w = ArgSpec("W", (vocab, dim), bf16, IN)
        return [
            ArgSpec("x", (dim,), bf16, IN),
            ArgSpec("norm", (dim,), bf16, IN),
            w,
            ArgSpec("logits", (vocab,), bf16, OUT),
        ]

    def validate(self) -> None:
        require(
            self, "dim", self.dim > 0 and self.dim % CHUNK == 0, f"a positive multiple of {CHUNK}"
        )
        require(self, "vocab", self.vocab > 0, "positive")
        if self.softcap is not None:
            require(self, "softcap", self.softcap > 0 and math.isfinite(self.softcap), "positive")
        require(self, "eps", self.eps > 0, "positive")
        check_aie2p(self, self.device)
        if self.device is not None:
            rows = self.rows_per_round(self.device)
            require(
                self,
                "vocab",
                self.vocab % rows == 0,
                f"a multiple of {rows} on {self.device.name}: {ROWS} rows for each of "
                f"{CORES_PER_COLUMN} cores x {self.device.columns} columns a round",
            )
            need = core_bytes(self.dim, self.weights)
            require(
                self,
                "dim",
                need <= self.device.core_bytes,
                f"a core holds x and two {ROWS}-row tiles of W: {need} B of "
                f"{self.device.core_bytes} at this dim",
            )

    @staticmethod
    def rows_per_round(device: Device) -> int:
        return ROWS * CORES_PER_COLUMN * device.columns

    def pack(self, W, rounding: Rounding = Rounding.CONV_EVEN) -> np.ndarray:
        """The (vocab, dim) weight as this operator reads it."""
        require(
            self, "W", np.shape(W) == (self.vocab, self.dim), f"shape ({self.vocab}, {self.dim})"
        )
        return pack_rows(W, self.weights, rounding)

    # ---- numerics ---------------------------------------------------------------

    def reference(self, x, norm, W):
        h = gemma4.rms_norm(x, norm, self.eps)
        z = np.empty(self.vocab, np.float32)
        step = max(1, REFERENCE_BLOCK // (4 * self.dim))
        for start in range(0, self.vocab, step):
            rows = slice(start, min(start + step, self.vocab))
            z[rows] = self._rows(W, rows) @ h
        if self.softcap is not None:
            z = gemma4.softcap(z, self.softcap)
        return z.astype(bf16)

    def _rows(self, W, rows: slice) -> np.ndarray:
        if self.weights is WeightFormat.BF16:
            return np.asarray(W[rows], np.float32)
        per_row = self.dim // GROUP
        part = W[rows.start * per_row : rows.stop * per_row]
        return unpack_rows(part, rows.stop - rows.start, self.dim, self.weights)

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """x standard normal, the norm weight near 1, W with rows of unit
        norm's scale (0.05 / sqrt(dim / 256)), so logits land near +-10."""
        x = rng.standard_normal(self.dim).astype(bf16)
        norm = (1 + 0.1 * rng.standard_normal(self.dim)).astype(bf16)
        W = rng.standard_normal((self.vocab, self.dim)) * (2.0 / math.sqrt(self.dim))
        return [x, norm, self.pack(W)]

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """relative 0.04 (the bf16 logits) with atol = BUDGET * dim *
        mean|h| * mean|W| (h = norm(x) * w, rounded to bf16 before the
        multiply: the error tracks the product's mass) plus the Pade tanh's
        error times the cap; of `inputs` (x, norm, W) when given, else of
        `example_inputs`' scales."""
        if inputs is None:
            mean_h, mean_w = (
                1.0 * math.sqrt(2 / math.pi),
                2.0 / math.sqrt(self.dim) * math.sqrt(2 / math.pi),
            )
        else:
            x, norm, W = inputs
            mean_h = mean_abs(gemma4.rms_norm(x, norm, self.eps))
            mean_w = mean_abs(self._rows(W, slice(0, min(self.vocab, 4096))))
        cap = 0.0 if self.softcap is None else TANH_ERROR * self.softcap
        return Tolerance.relative(0.04, atol=BUDGET * self.dim * mean_h * mean_w + cap)

    @staticmethod
    def design(dim, vocab, softcap, weights, eps, device):
        """Every core of the array holds x, normalises it itself and
        multiplies its rows of W, ROWS at a time, straight from DDR: a
        column's memtile splits each 4 x ROWS-row block among its cores,
        and joins their soft-capped logits back to DDR."""
        return head_design(dim, vocab, softcap, weights, eps, device)


def core_bytes(dim: int, weights: WeightFormat) -> int:
    """What one core of the design holds: x (bf16), two weight tiles, two x
    chunks, two output objects, the stack, state."""
    tile = ROWS * dim * 2 if weights is WeightFormat.BF16 else ROWS * dim // GROUP * GROUP_BYTES
    return dim * 2 + 2 * tile + 2 * CHUNK * 2 + 2 * ROWS * 2 + 1024 + 64


# ---- the design --------------------------------------------------------------------------


FIRST_CORE_ROW = 2
SOURCE = "kernels/gemma4_lm_head.cc"


def load_model(chunk, xbuf, stats, state, dim):
    """x chunk into xbuf at the cursor; its squares (lane_dot) added to the
    running sum, which restarts at the first chunk."""
    at = int(state[0])
    if at == 0:
        stats[0] = 0
    xbuf[at : at + len(chunk)] = chunk
    stats[0] = np.float32(stats[0] + kernel_math.lane_dot(chunk, chunk))
    state[0] = (at + len(chunk)) % dim


def norm_model(w, xbuf, stats, state, dim, eps_bits):
    """At the first chunk 1/sqrt(sum / dim + eps); each chunk of xbuf
    becomes bf16(x * inv * w) in place."""
    at = int(state[1])
    if at == 0:
        stats[1] = kernel_math.rsqrt(
            np.float32(stats[0]) / np.float32(dim) + kernel_math.bits_float(eps_bits)
        )
    x = kernel_math.f32(xbuf[at : at + len(w)])
    xbuf[at : at + len(w)] = (x * stats[1] * kernel_math.f32(w)).astype(bf16)
    state[1] = (at + len(w)) % dim


def capped(z, cap_bits) -> np.ndarray:
    """softcap of float32 z: z (1/cap) in float32, the Pade tanh, times cap;
    cap_bits 0 is no cap."""
    if cap_bits == 0:
        return z
    cap = kernel_math.bits_float(cap_bits)
    return kernel_math.tanh(z * (np.float32(1) / cap)) * cap


def rows_model(w, xbuf, out, dim, cap_bits, *, weights: WeightFormat):
    """out[r] = bf16(softcap(lane_dot(W row r, x))) for the tile's rows."""
    dense = unpack_rows(w, len(out), dim, weights)
    out[:] = capped(kernel_math.lane_dot(dense, kernel_math.f32(xbuf[:dim])), cap_bits).astype(bf16)


def head_kernels(dim: int, weights: WeightFormat) -> tuple[Kernel, Kernel, Kernel]:
    source = shipped("iron.ops.flm", SOURCE)
    chunk, xbuf = Memref((CHUNK,), "bf16"), Memref((dim,), "bf16")
    state, stats = Memref((4,), "i32"), Memref((4,), "f32")
    i32 = Scalar()
    load = Kernel("gemma4_head_load", (chunk, xbuf, stats, state, i32), source, load_model)
    norm = Kernel("gemma4_head_norm", (chunk, xbuf, stats, state, i32, i32), source, norm_model)
    if weights is WeightFormat.BF16:
        tile, symbol = Memref((ROWS * dim,), "bf16"), "gemma4_head_rows_bf16"
    else:
        tile, symbol = Memref((ROWS * dim // GROUP,), "bfp16ebs8"), "gemma4_head_rows_bfp16"
    rows = Kernel(
        symbol,
        (tile, xbuf, Memref((ROWS,), "bf16"), i32, i32),
        source,
        functools.partial(rows_model, weights=weights),
    )
    return load, norm, rows


def head_design(dim, vocab, softcap, weights, eps, device) -> Design:
    cols, per_col = device.columns, CORES_PER_COLUMN
    rows_per_round = ROWS * per_col * cols
    rounds, chunks = vocab // rows_per_round, dim // CHUNK
    bfp = weights is WeightFormat.BFP16
    wtype = "bfp16ebs8" if bfp else "bf16"
    per_row = dim // GROUP if bfp else dim  # weight elements per row
    tile = ROWS * per_row
    load, norm, multiply = head_kernels(dim, weights)
    eps_bits = kernel_math.float_bits(eps)
    cap_bits = 0 if softcap is None else kernel_math.float_bits(softcap)
    names = [[f"head_{c}_{r}" for r in range(per_col)] for c in range(cols)]
    fifos = [
        ObjectFifo(
            "xin", (CHUNK,), "bf16", shim(), tuple(core(n) for col in names for n in col), depth=2
        )
    ]
    links, workers, sequence = [], [], []
    for c in range(cols):
        fifos.append(
            ObjectFifo(f"w{c}", (per_col * tile,), wtype, shim(), (memtile(f"wsplit{c}"),))
        )
        fifos += [
            ObjectFifo(f"w{c}_{r}", (tile,), wtype, memtile(f"wsplit{c}"), (core(names[c][r]),))
            for r in range(per_col)
        ]
        links.append(
            split(
                f"wsplit{c}",
                f"w{c}",
                [f"w{c}_{r}" for r in range(per_col)],
                [r * tile for r in range(per_col)],
                tile=Tile(c, 1),
            )
        )
        fifos += [
            ObjectFifo(f"o{c}_{r}", (ROWS,), "bf16", core(names[c][r]), (memtile(f"ojoin{c}"),))
            for r in range(per_col)
        ]
        fifos.append(
            ObjectFifo(f"o{c}", (per_col * ROWS,), "bf16", memtile(f"ojoin{c}"), (shim(),))
        )
        links.append(
            join(
                f"ojoin{c}",
                [f"o{c}_{r}" for r in range(per_col)],
                f"o{c}",
                [r * ROWS for r in range(per_col)],
                tile=Tile(c, 1),
            )
        )
        for r in range(per_col):
            w, o = f"w{c}_{r}", f"o{c}_{r}"
            body = (
                Loop(chunks, [Acquire("xin"), Call(load, (Obj("xin"), Buf("x"), Buf("stats"), Buf("state"), dim)), Release("xin")]),
                Loop(chunks, [Acquire("xin"), Call(norm, (Obj("xin"), Buf("x"), Buf("stats"), Buf("state"), dim, eps_bits)), Release("xin")]),
                Loop(rounds, [Acquire(w), Acquire(o), Call(multiply, (Obj(w), Buf("x"), Obj(o), dim, cap_bits)), Release(w), Release(o)]),
            )  # fmt: skip
            buffers = (
                LocalBuffer("x", (dim,), "bf16"),
                LocalBuffer("stats", (4,), "f32"),
                LocalBuffer("state", (4,), "i32", initial_value=0),
            )
            workers.append(
                Worker(names[c][r], body, tile=Tile(c, FIRST_CORE_ROW + r), buffers=buffers)
            )
        # column c's block of round t: rows t * rows_per_round + c * per_col * ROWS, contiguous
        block = per_col * tile
        d0 = CHUNK // GROUP if bfp else CHUNK
        sequence.append(
            Fill(
                f"w{c}",
                "W",
                TAP(c * block, (rounds, block // d0, d0), (rows_per_round * per_row, d0, 1)),
            )
        )
        hi, lo = split_count(rounds, device.limits("shim").max_wrap)
        sequence.append(
            Drain(
                f"o{c}",
                "logits",
                TAP(
                    c * per_col * ROWS,
                    (hi, lo, per_col * ROWS),
                    (lo * rows_per_round, rows_per_round, 1),
                ),
            )
        )
    sequence = [Fill("xin", "x"), Fill("xin", "norm"), *sequence]
    tensors = (
        Tensor("x", (dim,), "bf16", IN),
        Tensor("norm", (dim,), "bf16", IN),
        Tensor("W", (vocab * per_row,) if bfp else (vocab, dim), wtype, IN),
        Tensor("logits", (vocab,), "bf16", OUT),
    )
    cap = "nocap" if softcap is None else f"cap{softcap:g}"
    return Design(
        f"gemma4_lm_head_{dim}x{vocab}_{weights.value}_{cap}",
        device,
        tensors,
        tuple(fifos),
        tuple(workers),
        tuple(sequence),
        links=tuple(links),
    )
