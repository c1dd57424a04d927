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
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    LocalBuffer,
    Loop,
    Obj,
    ObjectFifo,
    Release,
    Tensor,
    Tile,
    Worker,
    core,
    forward,
    join,
    memtile,
    shim,
    split,
)
from iron.design.manifest import broken_constraints, load
from iron.design.model import element_type
from iron.ops.gemm.common import (
    PRECISE,
    check_columns,
    check_core_memory,
    emulated_budget,
    most_columns,
    row_blocks,
)
from iron.ops.gemm.core_kernels import (
    ACCUMULATOR,
    cast_columns_kernel,
    cast_kernel,
    matmul_kernel,
    zero_kernel,
)
from iron.ops.gemm.tiling import (
    blocked,
    columns_of_row_blocks,
    mmul_shape,
    rounds,
    stride_fits,
    unblocked_cols,
    unblocked_rows,
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


def core_buffers(tile_m, tile_k, tile_n, dtype_in, dtype_out, c_depth=1) -> dict[str, int]:
    """Bytes one GEMM core holds: A and B tiles double buffered; C
    accumulated over K in the accumulator's type (float32 for bf16 in,
    int32 for int8), which is C itself, double buffered, when C has that
    type, else a core buffer plus `c_depth` C tiles it is narrowed into;
    the stack."""
    size_in, out = as_dtype(dtype_in).itemsize, as_dtype(dtype_out).itemsize
    tiles = {"A": 2 * tile_m * tile_k * size_in, "B": 2 * tile_k * tile_n * size_in}
    if out == 4:
        tiles["C"] = 2 * tile_m * tile_n * 4
    else:
        tiles |= {"accumulator": tile_m * tile_n * 4, "C": c_depth * tile_m * tile_n * out}
    return tiles | {"stack": STACK_BYTES}


def c_depth(device: Device, tile_m, tile_k, tile_n, dtype_in, dtype_out) -> int:
    """Objects of a core's C fifo: 2 (the core accumulates the next tile
    while the last drains) wherever a core's memory holds them, else 1."""
    two = core_buffers(tile_m, tile_k, tile_n, dtype_in, dtype_out, c_depth=2)
    return 2 if sum(two.values()) <= device.core_bytes else 1


#: which tile a define of mm.cc is
TILE_OF_DEFINE = {"DIM_M": "tile_m", "DIM_K": "tile_k", "DIM_N": "tile_n"}


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
        # 16-row tiles, the smallest mm.cc takes on either generation (aie2's
        # 4x8x4 bf16 mmul expanded 4 x 4, aie2p's 8x8x8 2 x 2)
        Case({"M": 192, "K": 64, "N": 128, "tile_m": 16, "tile_n": 32, "num_aie_columns": 2}),
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
        check_columns(self, streams=2)  # B, and A on column 0
        columns = self.num_aie_columns
        if columns is not None:
            require(
                self,
                "N",
                self.N % (self.tile_n * columns) == 0,
                f"a multiple of tile_n x num_aie_columns = {self.tile_n * columns} (each "
                "column takes the same number of tile_n-wide blocks)",
            )
        if self.device is not None:
            wrap = self.device.limits("shim").max_wrap  # Device.shim_wrap_bits
            require(
                self,
                "tile_m",
                CORE_ROWS * self.tile_m <= wrap,
                f"at most {wrap // CORE_ROWS}: a row block's {CORE_ROWS} x tile_m rows are one "
                f"dimension of a shim BD, which wraps at {wrap}",
            )
        tm, tk, tn = self.tile_m, self.tile_k, self.tile_n
        buffers = core_buffers(tm, tk, tn, self.dtype_in, self.dtype_out)
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
        for name in TILE_OF_DEFINE.values():
            require(self, name, getattr(self, name) >= 1, "at least 1")
        self._check_kernel()
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

    def _check_kernel(self):
        """What mlir-aie's mm.cc asserts of the tile it is built for (its
        manifest's constraints), on the device's generation or, before a
        device is known, on both."""
        archs = [self.device.arch] if self.device is not None else ["aie2", "aie2p"]
        din = element_type(self.dtype_in).name
        tiles = (self.tile_m, self.tile_k, self.tile_n)
        for arch in archs:
            kernel = matmul_kernel(arch, din, *tiles, mmul_shape(arch, din), self.b_col_maj)
            for entry, constraint, _ in broken_constraints([load("iron.ops.gemm")], kernel, arch):
                rule = constraint.rule
                named = [p for d, p in TILE_OF_DEFINE.items() if d in rule]
                for define, parameter in TILE_OF_DEFINE.items():
                    rule = rule.replace(define, parameter)
                require(
                    self,
                    named[0] if named else "dtype_in",
                    False,
                    f"{entry.source.removeprefix('aie_kernels/')} {entry.symbol} needs {rule} "
                    f"({constraint.cites})",
                )

    @staticmethod
    def design(M, K, N, b_col_maj, c_col_maj, dtype_in, dtype_out, tile_m, tile_k, tile_n,
               num_aie_columns, device) -> Design:  # fmt: skip
        """The whole-array design: see `whole_array`."""
        return whole_array(
            M, K, N, b_col_maj, c_col_maj, element_type(dtype_in).name, element_type(dtype_out).name,
            (tile_m, tile_k, tile_n), num_aie_columns, device,
        )  # fmt: skip

    def tune(self, device):
        def fits(columns):
            return self.N % (self.tile_n * columns) == 0

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
        (A, B) when given, else of standard-normal inputs. The budget: on
        aie2p (bf16 emulated through bfp16) or an unknown device
        max(1e-2, 0.1 / sqrt(K)) (`common.emulated_budget`), on aie2 2e-4."""
        if self.integer:
            return Tolerance.exact() if self.dtype_out.kind == "i" else Tolerance.relative(2**-8)
        device = device or self.device
        if device is None or emulated(device, self.dtype_in):
            budget = emulated_budget(self.K)
        else:
            budget = PRECISE
        a, b = inputs if inputs is not None else (None, None)
        return product_tolerance(budget, self.K, mean_abs(a), mean_abs(b))


def whole_array(M, K, N, b_col_maj, c_col_maj, dtype_in, dtype_out, tiles, columns, device):
    """C = A B on `columns` x 4 cores. Core (i, c) computes one tile_m x
    tile_n tile of C at a time: rows i of a 4 tile_m-row block of A, columns
    c of a group of `columns` tile_n-wide blocks of B; it accumulates over K
    in core memory (in the accumulator's type; narrowed to C once at the
    end) while A and B arrive in tile_k slices.

    - A: as mlir-aie's whole_array example distributes it
      (programming_examples/basic/matrix_multiplication/whole_array), through
      min(4, columns) shim and memtile paths (2 for 3 columns: each path
      feeds the same number of core rows): path p takes 4 / paths
      consecutive core rows, one object per (row block, column
      group, K slice) from the shim of column p into its memtile, split into
      those rows' tile_m x tile_k tiles, each broadcast to its row's cores in
      every column, read as r x s blocks;
    - B: per column, tile_k x tile_n objects (tile_n x tile_k from a
      column-major B, which the kernel reads transposed) through its memtile
      to its 4 cores, read as s x t blocks;
    - C: per column, the 4 cores' tiles joined in its memtile, read back out
      as row-major rows, or (c_col_maj) as columns the drain writes into C's
      rows. The kernel always writes row-major r x t blocks (mm.cc's
      C_COL_MAJ path is never built: aie2's int8 matmul ignores it); a
      narrowing cast writes the column-major blocks itself, a 4-byte C is
      read column by column. A core's C fifo is 2 deep wherever its memory
      holds two tiles.

    The runtime works a row block per round (a row block and column group
    where one shim pattern cannot hold all the groups): A once per column
    group, each column's B for every group, each column's C tiles."""
    tm, tk, tn = tiles
    arch = device.arch
    r, s, t = mmul_shape(arch, dtype_in)
    acc = ACCUMULATOR[dtype_in]
    direct = dtype_out == acc
    row_blocks, groups, k_steps = M // (CORE_ROWS * tm), N // (tn * columns), K // tk
    block_rows = CORE_ROWS * tm
    lanes = range(CORE_ROWS)
    cols = range(columns)
    # as many as the columns allow, each feeding the same number of core rows
    paths = max(p for p in range(1, CORE_ROWS + 1) if CORE_ROWS % p == 0 and p <= columns)
    per_path = CORE_ROWS // paths

    def worker(i, c):
        return f"core_{i}_{c}"

    matmul = matmul_kernel(arch, dtype_in, tm, tk, tn, (r, s, t), b_col_maj)
    if direct:
        narrow = None
    elif c_col_maj:
        narrow = cast_columns_kernel(acc, tm, tn, r, t)
    else:
        narrow = cast_kernel(acc, tm * tn)
    workers = []
    for c in cols:
        for i in lanes:
            a, b, out = f"A{i}", f"B{c}_cores", f"C{i}_{c}"
            target = Obj(out) if direct else Buf("acc")
            acquire, release = (Acquire(a), Acquire(b)), (Release(a), Release(b))
            product = Call(matmul, (Obj(a), Obj(b), target))
            zero = Call(zero_kernel(matmul), (target,))
            # the first K step is peeled so that a core waiting for its next tile
            # waits at the top of its body, holding nothing
            rest = Loop(k_steps - 1, (*acquire, product, *release))
            if direct:
                first = (*acquire, Acquire(out), zero, product, *release)
                body, buffers = (*first, rest, Release(out)), ()
            else:
                count = () if c_col_maj else (tm * tn,)
                cast = Call(narrow, (Buf("acc"), Obj(out), *count))
                first = (*acquire, zero, product, *release)
                body = (*first, rest, Acquire(out), cast, Release(out))
                buffers = (LocalBuffer("acc", tm * tn, acc),)
            workers.append(Worker(worker(i, c), body, stack_size=STACK_BYTES, buffers=buffers))

    b_object = blocked(tn, tk, t, s) if b_col_maj else blocked(tk, tn, s, t)
    # a join's memtile sends one core's tile per BD: each is read out on its own
    if not c_col_maj:
        c_object = unblocked_rows(tm, tn, r, t)
    elif direct:
        c_object = columns_of_row_blocks(tm, tn, r, t)
    else:
        c_object = unblocked_cols(tm, tn, r, t)
    depth = c_depth(device, tm, tk, tn, element_type(dtype_in).numpy, element_type(dtype_out).numpy)
    fifos, links = [], []
    for p in range(paths):
        rows_of_path = range(p * per_path, (p + 1) * per_path)
        fifos.append(
            ObjectFifo(f"A_in{p}", per_path * tm * tk, dtype_in, shim(p), (memtile(f"a_split{p}"),))
        )
        fifos += [
            ObjectFifo(f"A{i}", tm * tk, dtype_in, memtile(f"a_split{p}"),
                       tuple(core(worker(i, c)) for c in cols), dims_to_stream=blocked(tm, tk, r, s))
            for i in rows_of_path
        ]  # fmt: skip
        links.append(
            split(
                f"a_split{p}",
                f"A_in{p}",
                [f"A{i}" for i in rows_of_path],
                [j * tm * tk for j in range(per_path)],
                tile=Tile(p, 1),
            )
        )
    for c in cols:
        fifos += [
            ObjectFifo(f"B{c}", tk * tn, dtype_in, shim(c), (memtile(f"b_forward{c}"),)),
            ObjectFifo(f"B{c}_cores", tk * tn, dtype_in, memtile(f"b_forward{c}"),
                       tuple(core(worker(i, c)) for i in lanes), dims_to_stream=b_object),
            ObjectFifo(f"C{c}", block_rows * tn, dtype_out, memtile(f"c_join{c}"), (shim(c),),
                       dims_to_stream=c_object),
        ]  # fmt: skip
        fifos += [
            ObjectFifo(f"C{i}_{c}", tm * tn, dtype_out, core(worker(i, c)),
                       (memtile(f"c_join{c}"),), depth=depth)
            for i in lanes
        ]  # fmt: skip
        links += [
            forward(f"b_forward{c}", f"B{c}", f"B{c}_cores"),
            join(f"c_join{c}", [f"C{i}_{c}" for i in lanes], f"C{c}", [i * tm * tn for i in lanes]),
        ]

    b_row = (
        (tn * K, (k_steps, tn, tk), (tk, K, 1))
        if b_col_maj
        else (tn, (k_steps, tk, tn), (tk * N, N, 1))
    )
    c_row = (
        (tn * M, (CORE_ROWS, tn, tm), (tm, M, 1)) if c_col_maj else (tn, (block_rows, tn), (N, 1))
    )

    def round_of(block, first, count):
        """The runtime's tasks for row block `block` and the `count` column
        groups from `first`: the groups are each pattern's iteration
        dimension (A's with stride 0: the same row block for every group)."""
        tasks = []
        for p in range(paths):
            first_row = block * block_rows + p * per_path * tm
            sizes = (count, k_steps, per_path * tm, tk)
            tasks.append(Fill(f"A_in{p}", "A", TAP(first_row * K, sizes, (0, tk, K, 1))))
        for c in cols:
            (b_step, sizes, strides), b_group = b_row, b_row[0] * columns
            tasks.append(
                Fill(
                    f"B{c}",
                    "B",
                    TAP((first * columns + c) * b_step, (count, *sizes), (b_group, *strides)),
                )
            )
            (c_step, sizes, strides), c_group = c_row, c_row[0] * columns
            rows = block * block_rows * (1 if c_col_maj else N)
            tasks.append(
                Drain(
                    f"C{c}",
                    "C",
                    TAP(
                        rows + (first * columns + c) * c_step, (count, *sizes), (c_group, *strides)
                    ),
                )
            )
        return tasks

    # all of a row block's column groups in one pattern each, where the shim's
    # iteration count and stride fields hold them; else one round per group
    together = groups <= device.shim_max_iterations and all(
        stride_fits(device, step * columns, dtype) for step, dtype in
        ((b_row[0], dtype_in), (c_row[0], dtype_out))
    )  # fmt: skip
    if together:
        work = [round_of(block, 0, groups) for block in range(row_blocks)]
    else:
        work = [round_of(block, g, 1) for block in range(row_blocks) for g in range(groups)]
    shim_column = {f"A_in{p}": p for p in range(paths)}
    shim_column |= {f"B{c}": c for c in cols} | {f"C{c}": c for c in cols}
    a_shape, b_shape = (M, K), ((N, K) if b_col_maj else (K, N))
    return Design(
        f"gemm_{M}x{K}x{N}",
        device,
        (
            Tensor("A", a_shape, dtype_in, IN),
            Tensor("B", b_shape, dtype_in, IN),
            Tensor("C", (N, M) if c_col_maj else (M, N), dtype_out, OUT),
        ),
        fifos=tuple(fifos),
        workers=tuple(workers),
        links=tuple(links),
        sequence=rounds(device, work, shim_column.__getitem__),
    )
