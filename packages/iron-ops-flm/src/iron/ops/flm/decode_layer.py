"""DecodeLayer: one Gemma 4 decoder layer for one token, from the layer's
input to its output: the norms, the projections, q/k/v norms and RoPE, the
KV write, attention over the cache, the GELU-tanh MLP (double-wide on
KV-shared layers when the model says so), the per-layer-input branch and
the layer scalar.

`layer_type` is one of `global`, `swa`, `global_skip`, `swa_skip`; the
`_skip` types are the KV-shared layers (no k/v projection: they read the
cache the last earlier layer of their attention type wrote). The four take
the same model geometry and share ONE device configuration: they differ in
their runtime sequence and parameter words only, as `context_len` (the
tokens before this one, per call) does.

Buffers (bf16): x (hidden,), ple (per_layer,) this layer's per-layer input
for the token (absent when per_layer is 0), weights (the layer's
matrices, packed once by `pack_weights` in the order the cores stream
them; bf16 or bfp16ebs8 blocks), norms (`pack_norms`: the norm weights and
the layer scalar), rope (max_l, head_dim) the RoPE table of the layer's
attention type (`rope_table`), cache (2, rows, kv_heads, head_dim) K then V
with rows max_l (global, row p is position p) or a ring of `window`
(sliding, slot p % window), written at this token's row by the layers that
own it, and y (hidden,). The design is `iron.ops.flm.decode_design`.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from iron.core import (
    IN,
    INOUT,
    OUT,
    ArgSpec,
    Case,
    Device,
    Operator,
    OperatorError,
    Tolerance,
    bf16,
    per_call,
    require,
)
from iron.core.numerics import finite_abs
from iron.ops.flm import gemma4
from iron.ops.flm.gemma4 import EPS, LAYER_TYPES, check_aie2p
from iron.ops.flm.packing import GROUP, GROUP_BYTES, Choice
from iron.ops.flm.weights import WeightFormat, pack_rows, unpack_rows, weight_format

#: the vectors between stages move in chunks of CHUNK values; a weight tile
#: is ROWS rows x CHUNK columns; CORES cores share each projection, so a
#: round of outputs is CORES x ROWS = CHUNK rows
CHUNK, ROWS, CORES = 256, 16, 16
#: error of the layer per unit of each branch's size: the device rounds each
#: vector between stages to bf16 (2^-9) and has its own exp, tanh, sums
BUDGET = 2.0**-6


class LayerType(Choice):
    GLOBAL = "global"
    SWA = "swa"
    GLOBAL_SKIP = "global_skip"
    SWA_SKIP = "swa_skip"


def _layer_type(value):
    try:
        return LayerType(value)
    except ValueError:
        raise ValueError(
            f"DecodeLayer: layer_type={value!r}: one of {', '.join(LAYER_TYPES)}"
        ) from None


@attrs.frozen
class Phase:
    """One projection of the layer as the cores run it: `rows` outputs of
    `depth` inputs each, from the matrices `mats` (two for the MLP's gate
    and up, whose row blocks the cores take together)."""

    name: str
    rows: int
    depth: int
    mats: tuple[str, ...]

    @property
    def rounds(self) -> int:
        return self.rows // CHUNK

    @property
    def chunks(self) -> int:
        return self.depth // CHUNK


def core_of(column: int, row: int) -> int:
    """The core's place in the output chain: down column 0, up column 1,
    and so on (every step a neighbour), ending at the hub's neighbour."""
    return 4 * column + (row if column % 2 == 0 else 3 - row)


@attrs.frozen
class DecodeLayer(Operator):
    """One Gemma 4 decoder layer for one token (see the module docstring).
    The geometry is the model's (`gemma4.GEMMA4_E2B`, `GEMMA4_E4B`):
    head_dim of sliding layers, global_head_dim of full ones, intermediate
    (doubled on KV-shared layers with double_wide_mlp), per_layer (0: no
    per-layer inputs), window; max_l bounds the positions (the RoPE table's
    rows, a global cache's). context_len, per call: 0 <= context_len <
    max_l. npu2 only."""

    layer_type: LayerType = attrs.field(converter=_layer_type)
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    global_head_dim: int
    intermediate: int
    max_l: int
    double_wide_mlp: bool = False
    per_layer: int = 0
    window: int = 512
    eps: float = EPS
    weights: WeightFormat = attrs.field(
        default=WeightFormat.BF16, converter=weight_format("DecodeLayer")
    )
    context_len: int = per_call(0)

    host = "iron.ops.flm.host:decode_layer"

    cases = tuple(
        Case(
            {"layer_type": t, "hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64,
             "global_head_dim": 128, "intermediate": 512, "max_l": 512, "double_wide_mlp": True,
             "per_layer": 256, "window": 128, **extra}
        )
        for t, extra in (("global", {}), ("swa", {}), ("global_skip", {}),
                         ("swa_skip", {"weights": "bfp16"}), ("swa", {"per_layer": 0}))
    )  # fmt: skip

    # ---- derived ------------------------------------------------------------------------

    @property
    def is_global(self) -> bool:
        return self.layer_type in (LayerType.GLOBAL, LayerType.GLOBAL_SKIP)

    @property
    def is_skip(self) -> bool:
        return self.layer_type in (LayerType.GLOBAL_SKIP, LayerType.SWA_SKIP)

    @property
    def dim(self) -> int:
        """This layer's head dim."""
        return self.global_head_dim if self.is_global else self.head_dim

    @property
    def mlp(self) -> int:
        """This layer's MLP width."""
        return self.intermediate * (2 if self.double_wide_mlp and self.is_skip else 1)

    @property
    def cache_rows(self) -> int:
        return self.max_l if self.is_global else self.window

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def norms_size(self) -> int:
        return 4 * self.hidden + CHUNK + (self.hidden if self.per_layer else 0) + 2 * self.dim

    def phases(self) -> list[Phase]:
        """The projections in the order the cores run them."""
        q, kv, h = self.heads * self.dim, self.kv_heads * self.dim, self.hidden
        out = [
            Phase("qkv", q + (0 if self.is_skip else 2 * kv), h, ("qkv",)),
            Phase("o", h, q, ("o",)),
            Phase("gate_up", self.mlp, h, ("gate", "up")),
            Phase("down", h, self.mlp, ("down",)),
        ]
        if self.per_layer:
            out += [
                Phase("per_layer_gate", self.per_layer, h, ("per_layer_gate",)),
                Phase("per_layer_projection", h, self.per_layer, ("per_layer_projection",)),
            ]
        return out

    @property
    def weight_elements(self) -> int:
        return sum(p.rows * p.depth * len(p.mats) for p in self.phases())

    @staticmethod
    def arg_spec(hidden, per_layer, weights, weight_elements, norms_size, max_l, dim, cache_rows,
                 kv_heads, is_skip):  # fmt: skip
        if weights is WeightFormat.BFP16:
            w = ArgSpec("weights", (weight_elements // GROUP, GROUP_BYTES), np.uint8, IN)
        else:
            w = ArgSpec("weights", (weight_elements,), bf16, IN)
        return [
            ArgSpec("x", (hidden,), bf16, IN),
            *([ArgSpec("ple", (per_layer,), bf16, IN)] if per_layer else []),
            w,
            ArgSpec("norms", (norms_size,), bf16, IN),
            ArgSpec("rope", (max_l, dim), bf16, IN),
            ArgSpec("cache", (2, cache_rows, kv_heads, dim), bf16, IN if is_skip else INOUT),
            ArgSpec("y", (hidden,), bf16, OUT),
        ]

    @staticmethod
    def design(layer_type, hidden, heads, kv_heads, head_dim, global_head_dim, intermediate, max_l,
               double_wide_mlp, per_layer, window, eps, weights, context_len, device):  # fmt: skip
        """The design of a call at context_len (`iron.ops.flm.decode_design`):
        the configuration every layer type shares, this call's sequence."""
        from iron.ops.flm import decode_design

        op = DecodeLayer(
            layer_type, hidden, heads, kv_heads, head_dim, global_head_dim, intermediate, max_l,
            double_wide_mlp, per_layer, window, eps, weights, device=device,
        )  # fmt: skip
        return decode_design.build(op, context_len)

    # ---- rules ---------------------------------------------------------------------------

    def validate(self) -> None:
        for name in ("hidden", "intermediate"):
            value = getattr(self, name)
            require(self, name, value > 0 and value % CHUNK == 0, f"a positive multiple of {CHUNK}")
        require(
            self,
            "per_layer",
            self.per_layer >= 0 and self.per_layer % CHUNK == 0,
            f"0 (no per-layer inputs) or a multiple of {CHUNK}",
        )
        require(
            self,
            "kv_heads",
            self.kv_heads > 0 and self.heads % self.kv_heads == 0,
            f"divides heads={self.heads}",
        )
        for name in ("head_dim", "global_head_dim"):
            value = getattr(self, name)
            require(
                self,
                name,
                value >= 32 and value & (value - 1) == 0 and value <= 512,
                "a power of two from 32 to 512",
            )
        for name, dim in (("head_dim", self.head_dim), ("global_head_dim", self.global_head_dim)):
            q, kv = self.heads * dim, self.kv_heads * dim
            require(
                self,
                name,
                q % CHUNK == 0 and (q + 2 * kv) % CHUNK == 0,
                f"heads x {name} and (heads + 2 kv_heads) x {name} multiples of {CHUNK} "
                f"(rounds of {CHUNK} outputs); here {q} and {q + 2 * kv}",
            )
        require(self, "window", self.window > 0, "positive")
        require(self, "max_l", self.max_l > 0, "positive")
        require(self, "eps", self.eps > 0, "positive")
        self.check_call(context_len=self.context_len)
        check_aie2p(self, self.device)

    def runtime_params(self, *, context_len: int) -> dict[str, int]:
        """The design's parameter words for a call at `context_len` (its
        dispatch-time value), all derived from it."""
        from iron.ops.flm import decode_design

        self.check_call(context_len=context_len)
        return decode_design.params(self, context_len)

    def check_call(self, *, context_len: int) -> None:
        """Refuse a call's position before anything runs."""
        if not 0 <= context_len < self.max_l:
            raise OperatorError(
                f"DecodeLayer: context_len={context_len}: 0 <= context_len < max_l={self.max_l} "
                "(the RoPE table's rows and a global cache's)"
            )

    # ---- packing -------------------------------------------------------------------------

    def pack_weights(
        self, q, k, v, o, gate, up, down, per_layer_gate=None, per_layer_projection=None,
        rounding=None,
    ) -> np.ndarray:  # fmt: skip
        """The layer's matrices (transformers' (out, in) layouts; k and v
        None on a KV-shared layer; the per-layer ones None without
        per-layer inputs) in the order the cores stream them: per column of
        cores, per projection, per round of CHUNK outputs, per k-chunk, the
        ROWS x CHUNK tile of each of the column's cores (bf16, or bfp16ebs8
        blocks of 8 consecutive k of one row)."""
        mats = {"o": o, "gate": gate, "up": up, "down": down}
        if self.is_skip:
            require(self, "k", k is None and v is None, "None on a KV-shared layer")
            mats["qkv"] = q
        else:
            mats["qkv"] = np.concatenate([np.asarray(q), np.asarray(k), np.asarray(v)])
        if self.per_layer:
            mats["per_layer_gate"] = per_layer_gate
            mats["per_layer_projection"] = per_layer_projection
        columns = []
        for c in range(CORES // 4):
            order = [core_of(c, r) for r in range(4)]
            for phase in self.phases():
                tiles = []
                for name in phase.mats:
                    m = np.asarray(mats[name])
                    require(self, name, m.shape == (phase.rows, phase.depth),
                            f"shape ({phase.rows}, {phase.depth})")  # fmt: skip
                    packed = pack_rows(m, self.weights, *([] if rounding is None else [rounding]))
                    tiles.append(_tiled(packed, phase, self.weights)[:, order])
                # (rounds, mats, cores, chunks, rows, k) -> rounds, mats, chunks, cores, rows, k
                stacked = np.moveaxis(np.stack(tiles, axis=1), 3, 2)
                columns.append(stacked.reshape(-1, *stacked.shape[6:]))
        return np.concatenate(columns)

    def unpack_weights(self, blob) -> dict[str, np.ndarray]:
        """The float32 matrices a packed blob holds (as the cores read them),
        by projection name; qkv is q, k and v stacked."""
        per_elem = GROUP if self.weights is WeightFormat.BFP16 else 1
        flat = np.asarray(blob).reshape(-1, *(() if per_elem == 1 else (GROUP_BYTES,)))
        mats = {name: None for p in self.phases() for name in p.mats}
        parts = {name: [None] * 4 for name in mats}
        at = 0
        for c in range(CORES // 4):
            for phase in self.phases():
                count = phase.rows * phase.depth * len(phase.mats) // 4 // per_elem
                piece = flat[at : at + count]
                at += count
                k_units = CHUNK // per_elem
                shaped = piece.reshape(
                    phase.rounds, len(phase.mats), phase.chunks, 4, ROWS, k_units, *piece.shape[1:]
                )
                for s, name in enumerate(phase.mats):
                    parts[name][c] = shaped[:, s]
        for phase in self.phases():
            for name in phase.mats:
                cores = np.empty((phase.rounds, phase.chunks, CORES, ROWS, CHUNK), np.float32)
                for c in range(CORES // 4):
                    for r in range(4):
                        tile = parts[name][c][:, :, r]
                        rows = tile.reshape(-1, *tile.shape[3:])
                        dense = unpack_rows(rows, rows.shape[0], CHUNK, self.weights)
                        cores[:, :, core_of(c, r)] = dense.reshape(
                            phase.rounds, phase.chunks, ROWS, CHUNK
                        )
                mats[name] = cores.transpose(0, 2, 3, 1, 4).reshape(phase.rows, phase.depth)
        return mats

    def pack_norms(
        self, input, post_attention, pre_feedforward, post_feedforward, q_norm, k_norm=None,
        post_per_layer_input=None, layer_scalar=1.0,
    ) -> np.ndarray:  # fmt: skip
        """The norm weights and the layer scalar as the stages read them:
        input, post_attention, pre_feedforward, post_feedforward (hidden
        each), a CHUNK holding layer_scalar first, post_per_layer_input
        (hidden, with per-layer inputs), q_norm, k_norm (head_dim each;
        k_norm None on a KV-shared layer, which has none)."""
        scalar = np.zeros(CHUNK, np.float32)
        scalar[0] = float(np.asarray(layer_scalar, np.float32).reshape(-1)[0])
        k_norm = np.ones(self.dim) if k_norm is None else k_norm
        parts = [input, post_attention, pre_feedforward, post_feedforward, scalar]
        if self.per_layer:
            parts.append(post_per_layer_input)
        parts += [q_norm, k_norm]
        out = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in parts]).astype(bf16)
        require(self, "norms", out.size == self.norms_size, f"{self.norms_size} values")
        return out

    def unpack_norms(self, norms) -> dict[str, np.ndarray]:
        norms = gemma4.f32(norms)
        h, d = self.hidden, self.dim
        names = ["input", "post_attention", "pre_feedforward", "post_feedforward"]
        out = {name: norms[i * h : (i + 1) * h] for i, name in enumerate(names)}
        at = 4 * h
        out["layer_scalar"] = norms[at]
        at += CHUNK
        if self.per_layer:
            out["post_per_layer_input"] = norms[at : at + h]
            at += h
        out["q_norm"], out["k_norm"] = norms[at : at + d], norms[at + d : at + 2 * d]
        return out

    def rope_table(self, theta: float | None = None, partial_rotary_factor=None) -> np.ndarray:
        """The (max_l, head_dim) RoPE table of this layer's attention type,
        with Gemma 4's parameters unless given (`gemma4.ROPE`)."""
        default_theta, default_partial = gemma4.ROPE["global" if self.is_global else "swa"]
        theta = default_theta if theta is None else theta
        if partial_rotary_factor is None:
            partial_rotary_factor = default_partial
        return gemma4.rope_table(self.max_l, self.dim, theta, partial_rotary_factor)

    # ---- the cache's rows ------------------------------------------------------------------

    def slot(self, position: int) -> int:
        return position if self.is_global else position % self.window

    def read_runs(self, context_len: int) -> list[tuple[int, int]]:
        """(first slot, rows) runs of the cache a call reads: every position
        the token sees but its own when the layer writes it (that one is on
        chip), in position order."""
        first = 0 if self.is_global else max(0, context_len + 1 - self.window)
        last = context_len + 1 if self.is_skip else context_len
        runs: list[tuple[int, int]] = []
        for position in range(first, last):
            slot = self.slot(position)
            if runs and runs[-1][0] + runs[-1][1] == slot:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((slot, 1))
        return runs

    # ---- numerics ---------------------------------------------------------------------------

    def reference(self, x, *rest, context_len):
        self.check_call(context_len=context_len)
        ple, weights, norms, rope, cache = self.split_inputs(rest)
        mats, w = self.unpack_weights(weights), self.unpack_norms(norms)
        p, d = context_len, self.dim
        row = rope[p]
        resid = gemma4.f32(x)
        h = gemma4.rms_norm(resid, w["input"], self.eps)
        qkv = mats["qkv"] @ h
        q = gemma4.rotate(
            gemma4.rms_norm(qkv[: self.heads * d].reshape(self.heads, d), w["q_norm"], self.eps),
            row,
        )
        cache_out = np.array(cache, copy=True)
        if not self.is_skip:
            kv = qkv[self.heads * d :].reshape(2, self.kv_heads, d)
            k = gemma4.rotate(gemma4.rms_norm(kv[0], w["k_norm"], self.eps), row)
            v = gemma4.rms_norm(kv[1], None, self.eps)
            cache_out[0, self.slot(p)] = k.astype(bf16)
            cache_out[1, self.slot(p)] = v.astype(bf16)
        first = 0 if self.is_global else max(0, p + 1 - self.window)
        slots = [self.slot(pos) for pos in range(first, p + 1)]
        seen = np.ones((1, len(slots)), bool)
        ctx = gemma4.attend(q[None], cache_out[0, slots], cache_out[1, slots], seen).reshape(-1)
        resid = resid + gemma4.rms_norm(mats["o"] @ ctx, w["post_attention"], self.eps)
        h2 = gemma4.rms_norm(resid, w["pre_feedforward"], self.eps)
        m = gemma4.gelu_tanh(mats["gate"] @ h2) * (mats["up"] @ h2)
        resid = resid + gemma4.rms_norm(mats["down"] @ m, w["post_feedforward"], self.eps)
        if self.per_layer:
            branch = gemma4.gelu_tanh(mats["per_layer_gate"] @ resid) * gemma4.f32(ple)
            projected = mats["per_layer_projection"] @ branch
            resid = resid + gemma4.rms_norm(projected, w["post_per_layer_input"], self.eps)
        y = (resid * w["layer_scalar"]).astype(bf16)
        return y if self.is_skip else (cache_out, y)

    def split_inputs(self, rest):
        """(ple or None, weights, norms, rope, cache) of a call's inputs after x."""
        if self.per_layer:
            return tuple(rest)
        return (None, *rest)

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """A layer with transformers-like scales: x of rms 1, weights
        N(0, 1 / fan_in), norm weights near 1 (q/k norms near
        head_dim^-1/4, so scores are of order 1), a layer scalar near 1, the
        cache holding earlier tokens' normalised keys and values."""
        d, h = self.dim, self.hidden

        def matrix(rows, cols):
            return rng.standard_normal((rows, cols)) / math.sqrt(cols)

        def near(value, size):
            return value * (1 + 0.1 * rng.standard_normal(size))

        q_rows, kv_rows = self.heads * d, self.kv_heads * d
        skip = self.is_skip
        weights = self.pack_weights(
            matrix(q_rows, h),
            None if skip else matrix(kv_rows, h),
            None if skip else matrix(kv_rows, h),
            matrix(h, q_rows),
            matrix(self.mlp, h),
            matrix(self.mlp, h),
            matrix(h, self.mlp),
            *((matrix(self.per_layer, h), matrix(h, self.per_layer)) if self.per_layer else ()),
        )
        scale = d**-0.25
        norms = self.pack_norms(
            near(1, h), near(1, h), near(1, h), near(1, h), near(scale, d), near(scale, d),
            near(1, h) if self.per_layer else None, near(1, 1),
        )  # fmt: skip
        cache = rng.standard_normal((2, self.cache_rows, self.kv_heads, d))
        cache[0] *= scale
        inputs = [rng.standard_normal(h).astype(bf16)]
        if self.per_layer:
            inputs.append(rng.standard_normal(self.per_layer).astype(bf16))
        return [*inputs, weights, norms, self.rope_table(), cache.astype(bf16)]

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """relative 2^-6 with atol BUDGET * |layer scalar| * (rms of x +
        the rms of each branch's norm weight: a branch leaves its norm at
        that size) times 1 + the scores' spread (the q and k norm weights'
        rms product x sqrt(head_dim), a score's size), which turns score
        errors into weight errors; of `inputs` when given, else of
        `example_inputs`' scales. It also bounds the cache rows the layer
        writes (normalised keys and values, of order 1)."""
        if inputs is None:
            x_rms, branches, scalar, spread = 1.0, 3.0 if self.per_layer else 2.0, 1.0, 1.0
        else:
            x, *rest = inputs
            _, _, norms, _, _ = self.split_inputs(rest)
            w = self.unpack_norms(norms)
            x_rms = _rms(x)
            names = ["post_attention", "post_feedforward"]
            names += ["post_per_layer_input"] if self.per_layer else []
            branches = sum(_rms(w[n]) for n in names)
            scalar = abs(float(w["layer_scalar"]))
            spread = _rms(w["q_norm"]) * _rms(w["k_norm"]) * math.sqrt(self.dim)
        atol = BUDGET * max(scalar, 1.0) * (x_rms + branches * (1 + spread))
        return Tolerance.relative(2.0**-6, atol=atol)


def _rms(values) -> float:
    finite = finite_abs(values)
    return float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0


def _tiled(packed, phase: Phase, weights: WeightFormat) -> np.ndarray:
    """A packed (rows, depth) matrix as (rounds, CORES, chunks, ROWS, k) tiles."""
    per_elem = GROUP if weights is WeightFormat.BFP16 else 1
    k_units = CHUNK // per_elem
    rest = () if per_elem == 1 else (GROUP_BYTES,)
    shaped = np.asarray(packed).reshape(phase.rounds, CORES, ROWS, phase.chunks, k_units, *rest)
    return np.swapaxes(shaped, 2, 3)
