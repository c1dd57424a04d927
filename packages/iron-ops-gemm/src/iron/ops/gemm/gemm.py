"""GEMM: C = A @ B on a grid of 4 cores per column, B and C optionally
stored column-major."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import (
    IN,
    OUT,
    ArgSpec,
    Case,
    Device,
    Operator,
    Tolerance,
    as_dtype,
    bf16,
    dtype_name,
    require,
    tunable,
)
from iron.core.numerics import mean_abs, product_tolerance, round_to_bf16
from iron.ops.gemm.common import (
    EMULATED,
    PRECISE,
    check_columns,
    check_core_memory,
    most_columns,
    row_blocks,
)

#: cores per column: each takes whole tile_m-row tiles of A and C
CORE_ROWS = 4
#: a GEMM core's stack (the matmul kernel's)
STACK_BYTES = 0xD00
#: the output dtypes each input dtype may produce
OUTPUTS = {bf16: (bf16, np.dtype(np.float32)), np.dtype(np.int8): (np.dtype(np.int32), bf16)}
#: int8 products are at most 128 x 128 = 2^14: K of them stay below 2^31
INT8_MAX_K = (2**31 - 1) // 2**14
#: bytes of B the reference upcasts at once (a float64 block for int8): the
#: host memory of a call is bounded by it, not by the weight; every row of A
#: reuses a block, so it is wider than GEMV's (1 MiB blocks ran 2.6x slower
#: at K = 8192)
UPCAST_BYTES = 4 << 20


def emulated(device: Device | None, dtype_in) -> bool:
    """Whether the kernel multiplies bf16 through bfp16: on aie2p."""
    return device is not None and device.arch == "aie2p" and as_dtype(dtype_in) == bf16


def mac_shape(device: Device | None, dtype_in) -> tuple[int, int, int]:
    """(r, s, t): the aie::mmul block the matmul kernel is built from: 8x8x8
    for bf16 emulated through bfp16, 4x8x8 otherwise (also what holds
    before a device is known)."""
    return (8, 8, 8) if emulated(device, dtype_in) else (4, 8, 8)


def bfp16_emulated(x: np.ndarray, axis: int) -> np.ndarray:
    """`x` as aie2p's bfp16 emulation of a bf16 MAC sees it (a model, for
    judging tolerances): blocks of 8 consecutive values along the reduction
    `axis` share the exponent of their largest, each keeping an 8-bit signed
    mantissa, rounded to nearest. float32 out; the axis must hold whole
    blocks."""
    moved = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    blocks = moved.reshape(*moved.shape[:-1], -1, 8)
    top = np.abs(blocks).max(axis=-1, keepdims=True)
    step = np.exp2(np.floor(np.log2(np.where(top > 0, top, 1))) - 6)  # top / step in [64, 128)
    quantised = np.clip(np.round(blocks / step), -128, 127) * step
    return np.moveaxis(quantised.reshape(moved.shape), -1, axis).astype(np.float32)


@attrs.frozen
class GEMM(Operator):
    """C = A @ B. A is (M, K); B is (K, N), or (N, K) with `b_col_maj` (a
    weight as shipped, [out, in], is read in place); C is (M, N), or (N, M)
    with `c_col_maj`. bf16 inputs accumulate in float32 and round once to
    bf16 (or not at all, to float32); int8 inputs accumulate exactly in
    int32, given as int32 or rounded once to bf16.

    Each of a column's 4 cores takes tile_m rows of A per tile and steps
    through K in tile_k slices; each column takes every
    num_aie_columns-th tile_n-wide block of B and C. Input and output
    dtypes are part of identity."""

    M: int
    K: int
    N: int
    b_col_maj: bool = False
    c_col_maj: bool = False
    dtype_in: np.dtype = attrs.field(default=bf16, converter=as_dtype)
    dtype_out: np.dtype = attrs.field(default=bf16, converter=as_dtype)
    tile_m: int = tunable(64)
    tile_k: int = tunable(64)
    tile_n: int = tunable(64)
    num_aie_columns: int | None = tunable()

    host = "iron.ops.gemm.host:gemm"  # the cpu backend's kernel
    cases = (
        Case({"M": 256, "K": 64, "N": 512, "num_aie_columns": 4}),
        Case({"M": 256, "K": 64, "N": 512, "b_col_maj": True, "num_aie_columns": 4}),
        Case({"M": 256, "K": 64, "N": 512, "c_col_maj": True, "num_aie_columns": 4}),
        Case({"M": 256, "K": 64, "N": 256}),  # the default: 4 columns on either device
        # float32 out: tile_n 32 keeps a core's double-buffered tiles in its 64 KiB
        Case({"M": 512, "K": 256, "N": 512, "dtype_out": "float32", "tile_n": 32,
              "num_aie_columns": 4}),
        Case({"M": 256, "K": 128, "N": 512, "dtype_in": "int8", "dtype_out": "int32",
              "num_aie_columns": 2}),
        Case({"M": 512, "K": 192, "N": 128, "dtype_in": "int8", "dtype_out": "bf16",
              "b_col_maj": True, "c_col_maj": True, "num_aie_columns": 1}),
        # 8-row tiles fit aie2's 4x8x8 MAC but not aie2p's emulated 8x8x8: npu2 refuses
        Case({"M": 96, "K": 64, "N": 128, "tile_m": 8, "tile_n": 32, "num_aie_columns": 2}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(M, K, N, b_col_maj, c_col_maj, dtype_in, dtype_out):
        return [
            ArgSpec("A", (M, K), dtype_in, IN),
            ArgSpec("B", (N, K) if b_col_maj else (K, N), dtype_in, IN),
            ArgSpec("C", (N, M) if c_col_maj else (M, N), dtype_out, OUT),
        ]

    @property
    def integer(self) -> bool:
        return self.dtype_in.kind == "i"

    def validate(self):
        for name in ("M", "K", "N"):
            require(self, name, getattr(self, name) >= 1, "at least 1")
        self._check_dtypes()
        self._check_tiles()
        check_columns(self, streams=2)  # B, and A on up to 4 of the columns
        columns = self.num_aie_columns
        if columns is not None:
            require(
                self,
                "num_aie_columns",
                columns >= CORE_ROWS or CORE_ROWS % columns == 0,
                f"1, 2, or at least {CORE_ROWS}: below {CORE_ROWS} columns the {CORE_ROWS} "
                "rows' A tiles are split evenly over the columns' shims",
            )
            require(
                self,
                "N",
                self.N % (self.tile_n * columns) == 0,
                f"a multiple of tile_n x num_aie_columns = {self.tile_n * columns} (each "
                "column takes the same number of tile_n-wide blocks)",
            )
        tm, tk, tn = self.tile_m, self.tile_k, self.tile_n
        size_in, size_out = self.dtype_in.itemsize, self.dtype_out.itemsize
        buffers = {"A": 2 * tm * tk * size_in, "B": 2 * tk * tn * size_in,
                   "C": 2 * tm * tn * size_out, "stack": STACK_BYTES}  # fmt: skip
        check_core_memory(self, f"tile_m x tile_k x tile_n = {tm}x{tk}x{tn}", buffers)

    def _check_dtypes(self):
        din, dout = self.dtype_in, self.dtype_out
        require(self, "dtype_in", din in OUTPUTS, "bf16 or int8")
        require(
            self,
            "dtype_out",
            dout.itemsize >= din.itemsize,
            f"at least as wide as dtype_in={dtype_name(din)} (the accumulator is never "
            "narrowed below the inputs)",
        )
        allowed = ", ".join(dtype_name(d) for d in OUTPUTS[din])
        require(
            self, "dtype_out", dout in OUTPUTS[din], f"one of {allowed} for {dtype_name(din)} in"
        )
        if self.integer:
            require(
                self,
                "K",
                self.K <= INT8_MAX_K,
                f"at most {INT8_MAX_K} for int8: K products of up to 128 x 128 must stay "
                "below 2^31 in the int32 accumulator",
            )

    def _check_tiles(self):
        r, s, t = mac_shape(self.device, self.dtype_in)
        where = f"on {self.device.name}" if self.device is not None else "on any device"
        block = f"the kernel computes 2 x 2 blocks of {r}x{s}x{t} MACs {where}"
        require(self, "tile_m", self.tile_m >= 1 and self.tile_m % (2 * r) == 0,
                f"a multiple of {2 * r} ({block})")  # fmt: skip
        require(self, "tile_k", self.tile_k >= 1 and self.tile_k % s == 0,
                f"a multiple of {s} ({block})")  # fmt: skip
        require(self, "tile_n", self.tile_n >= 1 and self.tile_n % (2 * t) == 0,
                f"a multiple of {2 * t} ({block})")  # fmt: skip
        rows = self.tile_m * CORE_ROWS
        require(
            self,
            "M",
            self.M % rows == 0,
            f"a multiple of tile_m x {CORE_ROWS} = {rows} (each of a column's "
            f"{CORE_ROWS} cores takes whole tile_m-row tiles)",
        )
        require(self, "K", self.K % self.tile_k == 0,
                f"a multiple of tile_k={self.tile_k} (whole reduction steps)")  # fmt: skip
        require(self, "N", self.N % self.tile_n == 0,
                f"a multiple of tile_n={self.tile_n} (whole column blocks)")  # fmt: skip

    def tune(self, device):
        def fits(columns):
            split = columns >= CORE_ROWS or CORE_ROWS % columns == 0
            return split and self.N % (self.tile_n * columns) == 0

        return {"num_aie_columns": most_columns(device, fits, streams=2)}

    def reference(self, A, B):
        # integer products and their sums are exact in float64 (< 2^53)
        wide = np.dtype(np.float64 if self.integer else np.float32)
        A = A.astype(wide)
        columns = B if self.b_col_maj else B.T  # (N, K): one row per output column
        product = np.empty((self.M, self.N), wide)
        for block in row_blocks(self.N, wide.itemsize * self.K, UPCAST_BYTES):
            product[:, block] = A @ columns[block].astype(wide).T
        if not self.integer:
            C = product.astype(self.dtype_out)
        else:
            C = product.astype(np.int32) if self.dtype_out.kind == "i" else round_to_bf16(product)
        return np.ascontiguousarray(C.T if self.c_col_maj else C)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """int8 to int32: exact. int8 to bf16: one rounding. bf16 in:
        relative 0.04 with an absolute floor of a budget times the product's
        mass, K * mean|A| * mean|B| (see `product_tolerance`): of `inputs`
        (A, B) when given, else of standard-normal inputs. The budget: 1e-2
        on aie2p (bf16 emulated through bfp16) or an unknown device, 2e-4 on
        aie2."""
        if self.integer:
            return Tolerance.exact() if self.dtype_out.kind == "i" else Tolerance.relative(2**-8)
        device = device or self.device
        budget = EMULATED if device is None or emulated(device, self.dtype_in) else PRECISE
        a, b = inputs if inputs is not None else (None, None)
        return product_tolerance(budget, self.K, mean_abs(a), mean_abs(b))
