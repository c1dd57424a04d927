"""FLMGemm: C = epilogue(A @ B), clamped, the FastFlowLM `mm` overlay's
contract. M, K, N, the epilogue and the clamp bounds are runtime values, so
one image per configuration serves every shape; only the per-shape program
(`program()`, see `iron.ops.flm.schedule`) changes. M is also a per-call
(dispatch-time) value: one operator of capacity `max_M` serves every M up
to it, a runtime sequence per M (`sequence(M=...)`)."""

from __future__ import annotations

import enum
import math

import attrs
import numpy as np

from iron.core import (
    IN,
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
    tunable,
)
from iron.core.numerics import mean_abs, product_tolerance, round_to_bf16, sigmoid
from iron.ops.flm import packing
from iron.ops.flm.packing import GROUP, GROUP_BYTES, BFormat, Choice, Rounding, packed_b_size
from iron.ops.flm.schedule import (
    A_DEPTH,
    C_DEPTH,
    CT_K_FOR_TILE_N,
    K_TILE,
    M_CHUNK,
    M_TILE,
    Pool,
    Program,
    build_program,
    memtile_pool,
    plan_slabs,
)

STACK_BYTES = 0xD00  # the fused kernel's stack: aiecc measured up to 3296 B on npu1
LUT_BYTES = 5248  # aie2's activation tables (lut_based_ops), linked with any activation
CT_OUT_LEN = 512  # C values a core drains per chunk
TILE_MA_CHOICES = (64, 32, 16)  # must divide M_TILE and be a multiple of 2 x 8 (two mmul rows)


class Epilogue(Choice):
    """The activation fused into C's drain. Declaration order is the wire
    format (the RTP word and the shipped overlay's output_mode)."""

    NONE = "none"
    GELU = "gelu"
    SILU = "silu"
    SIGMOID = "sigmoid"

    @property
    def mode(self) -> int:
        return list(Epilogue).index(self)


#: per-architecture error budget against the accumulated mass, by rounding
#: (IRON's hardware measurements: aie2p emulates the bf16 mmul with bfp16)
ERROR_BUDGET = {
    ("aie2p", Rounding.CONV_EVEN): 0.004,
    ("aie2p", Rounding.FLOOR): 0.05,
    ("aie2", Rounding.CONV_EVEN): 0.0002,
    ("aie2", Rounding.FLOOR): 0.002,
}


def _choice(kind: type[enum.Enum], parameter: str):
    def convert(value):
        try:
            return kind(value)
        except ValueError:
            choices = ", ".join(m.value for m in kind)
            raise OperatorError(f"FLMGemm: {parameter}={value!r}: one of {choices}") from None

    return convert


def _clamp(value):
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise OperatorError(f"FLMGemm: clamp={value!r}: None or a pair (lo, hi)") from None
    return lo, hi


def _modes(value):
    convert = _choice(Epilogue, "epilogue_modes")
    return tuple(sorted({convert(v) for v in value}, key=lambda e: e.mode))


def k_block_product(a, b) -> np.ndarray:
    """One 512-deep k-block's contribution to the float32 accumulator.

    A product of a bf16 (8 significant bits) and a decoded B value (8) is
    exact in float64, and so is the sum of 512 of them unless they span more
    than 28 binades; the rounding to float32 is then the only one, so every
    summation order gives the same bits (the model's tiles and the
    reference's whole matrix agree exactly)."""
    return (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(np.float32)


def finish(acc, epilogue: Epilogue, lo: float, hi: float, rounding: Rounding) -> np.ndarray:
    """The drain's arithmetic, in float32 on the accumulator: the epilogue
    (GELU is the sigmoid form x * sigmoid(1.702 x); SILU x * sigmoid(x)),
    then the clamp, then one rounding to bf16."""
    x = np.asarray(acc, np.float32)
    if epilogue is Epilogue.GELU:
        x = x * sigmoid(np.float32(1.702) * x)
    elif epilogue is Epilogue.SILU:
        x = x * sigmoid(x)
    elif epilogue is Epilogue.SIGMOID:
        x = sigmoid(x)
    x = np.minimum(np.maximum(x, np.float32(lo)), np.float32(hi))
    return round_to_bf16(x, floor=rounding is Rounding.FLOOR)


def l1_fit(
    device: Device,
    tile_n: int,
    ct_k: int,
    b_format: BFormat,
    activations: bool,
    tile_ma: int | None = None,
) -> tuple[int, int] | None:
    """(tile_ma, L1 B depth) that fit a core's memory beside the stack, the
    float32 accumulator, C's chunks and (aie2 with an activation) the LUTs:
    a double-buffered B first, then the tallest A tile (or `tile_ma`)."""
    budget = device.core_bytes - STACK_BYTES
    if activations and device.arch == "aie2":
        budget -= LUT_BYTES
    fixed = M_TILE * tile_n * 4 + CT_OUT_LEN * 2 * C_DEPTH
    b_chunk = packed_b_size(ct_k, tile_n, b_format)
    for depth in (2, 1):
        for ma in TILE_MA_CHOICES if tile_ma is None else (tile_ma,):
            if fixed + ma * ct_k * 2 * A_DEPTH + depth * b_chunk <= budget:
                return ma, depth
    return None


@attrs.frozen
class FLMGemm(Operator):
    """C[:M] = clamp(epilogue(A[:M] @ B (K, N))) and C[M:] = 0 (exactly),
    bf16 in and out, B pre-packed (`pack_b`). A is (max_M, K) and C
    (max_M, N): `max_M` is the capacity, a build parameter; M, the rows a
    call computes, is per call (`g(FLMGemm(K=.., N=.., max_M=..), a, b,
    M=rows)`). `FLMGemm(M=256, ...)` is capacity 256 at M = 256; given
    only max_M, M defaults to it. Rules: M and max_M multiples of 64 x
    compute rows, M at most max_M, K a multiple of 512, N of tile_n; tile_n
    64 (128 on aie2p at K = 512 when N allows); only the verified (tile_n,
    ct_k) pairs; bfp16 B needs block-float hardware. `epilogue_modes` are
    the activations compiled into the image; `epilogue` and `clamp` select
    among them at run time."""

    K: int
    N: int
    epilogue: Epilogue = attrs.field(default=Epilogue.NONE, converter=_choice(Epilogue, "epilogue"))
    clamp: tuple[float, float] | None = attrs.field(default=None, converter=_clamp)
    rounding: Rounding = attrs.field(
        default=Rounding.CONV_EVEN, converter=_choice(Rounding, "rounding")
    )
    b_format: BFormat = attrs.field(default=BFormat.BFP16, converter=_choice(BFormat, "b_format"))
    epilogue_modes: tuple[Epilogue, ...] = attrs.field(default=tuple(Epilogue), converter=_modes)
    tile_n: int | None = tunable()
    ct_k: int | None = tunable()
    tile_ma: int | None = tunable()
    #: the capacity: A's and C's rows (part of the identity, unlike M)
    max_M: int | None = attrs.field(default=None, kw_only=True)
    #: the rows one call computes (filled from max_M when not given)
    M: int | None = per_call(None)

    cases = (
        Case({"M": 256, "K": 512, "N": 1024}),
        Case({"M": 512, "K": 1024, "N": 1024, "epilogue": "silu", "clamp": (-4.0, 4.0)}),
        Case(
            {
                "M": 256,
                "K": 1024,
                "N": 640,
                "b_format": "bf16",
                "epilogue": "gelu",
                "rounding": "floor",
            }
        ),
        Case({"M": 256, "K": 512, "N": 1536, "epilogue": "sigmoid"}),
        Case({"K": 512, "N": 1024, "max_M": 1024, "M": 512}),
    )

    def __attrs_post_init__(self) -> None:
        # M and max_M name each other's default: fill whichever is missing
        # before the shape rule and the checks read them
        if self.max_M is None and self.M is None:
            raise OperatorError("FLMGemm: max_M: give the capacity max_M, or M (the capacity then)")
        if self.max_M is None:
            object.__setattr__(self, "max_M", self.M)
        if self.M is None:
            object.__setattr__(self, "M", self.max_M)
        super().__attrs_post_init__()

    @staticmethod
    def arg_spec(max_M, K, N, b_format):
        if b_format is BFormat.BFP16:
            b = ArgSpec("B", (K * N // GROUP, GROUP_BYTES), np.uint8, IN)
        else:
            b = ArgSpec("B", (K * N,), bf16, IN)
        return [ArgSpec("A", (max_M, K), bf16, IN), b, ArgSpec("C", (max_M, N), bf16, OUT)]

    @property
    def k_iters(self) -> int:
        return self.K // K_TILE

    @property
    def activations(self) -> bool:
        """Whether any activation is compiled in (aie2 then links its LUTs)."""
        return any(e is not Epilogue.NONE for e in self.epilogue_modes)

    @property
    def unit_rows(self) -> int:
        """The rows M and max_M come in: one core's 64 per compute row of
        the device (64 before the device is known)."""
        return M_TILE * (self.device.compute_rows if self.device is not None else 1)

    def validate(self) -> None:
        require(
            self,
            "max_M",
            self.max_M > 0 and self.max_M % M_TILE == 0,
            f"a positive multiple of {M_TILE} (one core's rows)",
        )
        require(
            self,
            "K",
            self.K > 0 and self.K % K_TILE == 0,
            f"a positive multiple of {K_TILE} (one k-block)",
        )
        require(self, "N", self.N > 0, "positive")
        require(
            self,
            "epilogue",
            self.epilogue in self.epilogue_modes,
            "one of the epilogue_modes compiled in "
            f"({', '.join(e.value for e in self.epilogue_modes)})",
        )
        if self.clamp is not None:
            lo, hi = self.clamp
            require(self, "clamp", lo <= hi, "(lo, hi) with lo <= hi, neither NaN")
        pairs = ", ".join(f"{n}:{k}" for n, k in CT_K_FOR_TILE_N.items())
        if self.tile_n is not None:
            require(
                self,
                "tile_n",
                self.tile_n in CT_K_FOR_TILE_N,
                f"one of {', '.join(map(str, CT_K_FOR_TILE_N))} (verified (tile_n, ct_k) "
                f"pairs {pairs})",
            )
            require(self, "N", self.N % self.tile_n == 0, f"a multiple of tile_n={self.tile_n}")
            if self.ct_k is not None:
                require(
                    self,
                    "ct_k",
                    CT_K_FOR_TILE_N[self.tile_n] == self.ct_k,
                    f"({self.tile_n}, {self.ct_k}) is not a verified (tile_n, ct_k) pair "
                    f"({pairs}); others miscompute silently on hardware",
                )
        if self.tile_ma is not None:
            require(
                self,
                "tile_ma",
                self.tile_ma in TILE_MA_CHOICES,
                f"divides {M_TILE} and is a multiple of 16",
            )
        if self.device is not None:
            self._validate_on(self.device)
        self.check_call(M=self.M)

    def check_call(self, *, M: int) -> None:
        """Refuse a call's M before anything runs: a whole number of units
        (64 x compute rows: a misaligned M would hang the device) up to the
        capacity."""
        rows, device = self.unit_rows, self.device
        why = (
            f"on {device.name} ({M_TILE} rows x {device.compute_rows} compute rows)"
            if device is not None
            else "(one core's rows)"
        )
        if int(M) <= 0 or int(M) % rows:
            raise OperatorError(f"FLMGemm: M={int(M)}: a positive multiple of {rows} {why}")
        if int(M) > self.max_M:
            raise OperatorError(f"FLMGemm: M={int(M)}: at most max_M={self.max_M} (A's rows)")

    def _validate_on(self, device: Device) -> None:
        for name in ("tile_n", "ct_k"):
            require(
                self,
                name,
                getattr(self, name) is not None,
                "unset; construct without device= and call resolve(device), which fills it",
            )
        rows = device.compute_rows
        require(
            self,
            "max_M",
            self.max_M % (M_TILE * rows) == 0,
            f"a multiple of {M_TILE * rows} on {device.name} ({M_TILE} rows x {rows} compute rows)",
        )
        require(
            self,
            "b_format",
            self.b_format is BFormat.BF16 or device.block_float,
            f"bfp16 needs block-float hardware, which {device.name} lacks; use 'bf16'",
        )
        pool = memtile_pool(device, self.tile_n, self.b_format)
        require(
            self,
            "tile_n",
            pool.slots >= 1,
            f"leaves no room for one {pool.slot_bytes}-byte B slot in the memtile",
        )
        fit = self.tile_ma and l1_fit(
            device, self.tile_n, self.ct_k, self.b_format, self.activations, self.tile_ma
        )
        require(
            self,
            "tile_ma",
            fit,
            f"does not fit {device.name}'s {device.core_bytes}-byte core memory at "
            f"tile_n={self.tile_n}, ct_k={self.ct_k}, even with single-buffered B",
        )
        # a one-unit slab fitting is what every M needs (plan_slabs): max_M stands for all
        units = self.max_M // (M_TILE * rows * M_CHUNK)
        require(
            self,
            "K",
            plan_slabs(units, self.k_iters, pool.slots, device) is not None,
            "even a one-unit slab needs more passes over the B pool per column block than "
            f"{device.task_queue_depth} pushes of {device.max_repeat_count} can queue",
        )

    def tune(self, device: Device) -> dict:
        tile_n = self.tile_n
        if tile_n is None:  # 128 halves A's traffic, which pays only with a single k-block
            wide = device.arch == "aie2p" and self.K == K_TILE and self.N % 128 == 0
            tile_n = 128 if wide else 64
        ct_k = self.ct_k or CT_K_FOR_TILE_N.get(tile_n)
        fit = ct_k and l1_fit(device, tile_n, ct_k, self.b_format, self.activations)
        return {"tile_n": tile_n, "ct_k": ct_k, "tile_ma": fit[0] if fit else None}

    # ---- the shared image and the per-shape program ------------------------

    def on(self, device: Device | None = None) -> FLMGemm:
        """This operator resolved on `device`, or on its own device."""
        op = self.resolve(device) if device is not None else self
        if op.device is None:
            raise OperatorError(
                "FLMGemm: device: needs a device; pass one or call resolve(device) first"
            )
        return op

    def configuration(self, device: Device | None = None) -> str:
        """The identity of the shared image: every parameter but M, K, N,
        epilogue and clamp, e.g. FLM_GEMM_tn64_ck128_ma32_mc1_emf_conv_even_bfp16_npu2."""
        op = self.on(device)
        mask = sum(1 << e.mode for e in op.epilogue_modes)
        dev = op.device
        width = "" if dev.columns == dev.max_columns else f"x{dev.columns}"
        return (
            f"FLM_GEMM_tn{op.tile_n}_ck{op.ct_k}_ma{op.tile_ma}_mc{M_CHUNK}_em{mask:x}_"
            f"{op.rounding.value}_{op.b_format.value}_{dev.name}{width}"
        )

    def pool(self, device: Device | None = None) -> Pool:
        """Each column's memtile budget and its B slot count."""
        op = self.on(device)
        return memtile_pool(op.device, op.tile_n, op.b_format)

    @staticmethod
    def design(
        max_M, M, K, N, epilogue, clamp, rounding, b_format, epilogue_modes, tile_n, ct_k,
        tile_ma, device,
    ):  # fmt: skip
        """The iron-design `Design` of this call: its configuration's image
        and this shape's runtime sequence (`iron.ops.flm.design`)."""
        from iron.ops.flm import design

        fields = dict(max_M=max_M, M=M, K=K, N=N, epilogue=epilogue, clamp=clamp)
        fields.update(rounding=rounding, b_format=b_format, epilogue_modes=epilogue_modes)
        op = FLMGemm(**fields, tile_n=tile_n, ct_k=ct_k, tile_ma=tile_ma, device=device)
        return design.build(op)

    def at(self, M: int) -> FLMGemm:
        """This operator at a call's M (checked first)."""
        self.check_call(M=M)
        return self if int(M) == self.M else attrs.evolve(self, M=int(M))

    def sequence(self, *, M: int) -> tuple:
        """The runtime sequence at a call's M, over the image's
        configuration: M's rows, and the zero rows up to max_M."""
        from iron.ops.flm import design

        op = self.on().at(M)
        return tuple(design.sequence(op, op.program()))

    def runtime_params(self, *, M: int | None = None) -> dict[str, int]:
        """The design's parameter words at a call's M (default: the
        operator's), all derived from M, K, N, the epilogue and the clamp:
        the values one image takes per call."""
        from iron.ops.flm import design

        return design.runtime_params(self.at(self.M if M is None else M))

    def program(self, device: Device | None = None, *, resident: bool = True) -> Program:
        """The per-shape schedule as plain data. `resident=False` streams
        every slab (B read once per unit, as a per-row-block fifo would)."""
        return build_program(self.on(device), resident)

    # ---- B packing ----------------------------------------------------------

    def _layout(self) -> tuple[int, int]:
        if self.tile_n is None or self.ct_k is None:
            raise OperatorError(
                "FLMGemm: tile_n: B's layout depends on tile_n and ct_k; resolve(device) first"
            )
        return self.tile_n, self.ct_k

    def pack_b(self, B) -> np.ndarray:
        """A (K, N) weight in the layout and format this operator reads."""
        tile_n, ct_k = self._layout()
        if np.shape(B) != (self.K, self.N):
            raise OperatorError(f"FLMGemm: B: shape {np.shape(B)}, expected ({self.K}, {self.N})")
        return packing.pack_b(B, tile_n, ct_k, self.b_format, self.rounding)

    def unpack_b(self, packed) -> np.ndarray:
        """The (K, N) float32 values a packed B holds, as the cores read them."""
        return packing.unpack_b(packed, self.K, self.N, *self._layout(), self.b_format)

    # ---- numerics -----------------------------------------------------------

    def reference(self, a, b, *, M: int | None = None):
        """C at the call's M (default: the operator's): rows M.. are 0."""
        M = self.M if M is None else int(M)
        self.check_call(M=M)
        B = self.unpack_b(b)
        acc = np.zeros((M, self.N), np.float32)
        for k in range(0, self.K, K_TILE):  # the accumulator's k order
            acc += k_block_product(a[:M, k : k + K_TILE], B[k : k + K_TILE])
        lo, hi = self.clamp if self.clamp is not None else (-np.inf, np.inf)
        c = np.zeros((self.max_M, self.N), bf16)
        c[:M] = finish(acc, self.epilogue, lo, hi, self.rounding)
        return c

    @property
    def input_scale(self) -> float:
        """Example inputs' scale: 4.0, or 0.5 under an activation (IRON's)."""
        return 4.0 if self.epilogue is Epilogue.NONE else 0.5

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """A standard normal and B uniform on [0, 1), both times `input_scale`;
        B packed as this operator reads it."""
        scale = self.input_scale
        a = (rng.standard_normal((self.max_M, self.K)) * scale).astype(np.float32).astype(bf16)
        b = (rng.random((self.K, self.N)) * scale).astype(np.float32).astype(bf16)
        return [a, self.pack_b(b)]

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """relative 0.04, atol = budget * mass with mass = K * mean|A| * mean|B|
        (the error tracks the accumulated magnitude, not |C|, which cancels)
        and the budget per architecture and rounding (ERROR_BUDGET), of
        `inputs` (A's first M rows, B packed or dense (K, N)) when given. Without data, the
        mass is that of `example_inputs`: K * s*sqrt(2/pi) * s/2 at scale s."""
        device = device or self.device
        if device is None:
            raise OperatorError("FLMGemm: device: the error budget is per architecture")
        budget = ERROR_BUDGET[device.arch, self.rounding]
        if inputs is None:
            s = self.input_scale
            return product_tolerance(budget, self.K, s * math.sqrt(2 / math.pi), s / 2)
        a, b = inputs
        dense = b if np.ndim(b) == 2 and np.shape(b) == (self.K, self.N) else self.unpack_b(b)
        return product_tolerance(budget, self.K, mean_abs(np.asarray(a)[: self.M]), mean_abs(dense))
