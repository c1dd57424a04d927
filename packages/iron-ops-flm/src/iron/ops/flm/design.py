"""FLMGemm as an iron-design `Design`: one image per configuration, a
per-shape runtime sequence.

The image (fifos, links, workers, kernels) depends only on the
configuration: 4 compute rows x `device.columns` columns of cores, each
accumulating a 64 x tile_n block of C in float32.

- A: row r's 64-row blocks go from DDR to memtile r (a fifo of 64 x 512
  k-blocks, A_DEPTH deep) and on to every core of row r (a broadcast of
  tile_ma x ct_k tiles, ordered k-slice by k-slice by the memtile);
- B: column c's memtile holds the pool (a programmed link of
  `Pool.slots` k-block slots) that broadcasts ct_k-deep chunks to the
  column's cores; bfp16 B moves as bfp16ebs8 blocks, never as bytes;
- C: each core drains its accumulator in CT_OUT_LEN-value chunks, joined
  per column at the memtile (one chunk per core row) and written to DDR.
  Rows M..max_M of C (the capacity past a call's M) are written too: each
  core then zeroes as many chunks as its column's share of those rows
  (`iron_flm_zero_bf16`), which the sequence drains there, so C is wholly
  defined by the design and never by the host.

Every per-call value is a runtime parameter the cores read (k_iters, the
slab cut, each column's work and idle column blocks and zero chunks, the
epilogue and the clamp bounds as float32 bits) or lives in the runtime
sequence: per slab the pool's locks are armed (`SetLock`), its fill and drain tasks pushed
(`PoolTask`), and A, B and C moved by shim transfers whose access patterns
carry M, K and N. The sequence is cut into one group per (slab, column
block, unit), so no channel queues more than the device allows.
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import IN, OUT, bf16
from iron.core.numerics import round_to_bf16
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Finish,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    PoolTask,
    Release,
    Scalar,
    SetLock,
    Simulation,
    SlotBd,
    Tensor,
    Tile,
    Worker,
    aie_runtime_lib,
    core,
    forward,
    join,
    memtile,
    shim,
    shipped,
    simulate,
)
from iron.design.block_float import quantize
from iron.design.lut_based_ops import tanh_bf16 as tanh_lut
from iron.ops.flm.dequant import (
    BLOCK_BYTES,
    BLOCK_K,
    BLOCK_N,
    CT_K,
    TILE_N,
    encode_block,
    q4nx_size,
)
from iron.ops.flm.gemm import (
    CT_OUT_LEN,
    LUT_BYTES,
    STACK_BYTES,
    Epilogue,
    FLMGemm,
    l1_fit,
)
from iron.ops.flm.packing import GROUP, BFormat, Rounding, S, T, read_chunk
from iron.ops.flm.schedule import A_DEPTH, C_DEPTH, K_TILE, M_TILE, Program, pushes

FIRST_CORE_ROW = 2  # rows 0 and 1 are the shim and the memtile


# ---- the kernels' arithmetic ---------------------------------------------------------
#
# kernels/{arch}/mm_fused.cc and kernels/dequant_q4nx.cc (listed in
# kernels/manifest.json), one rounding mode per kernel: the operator's
# (`Rounding`), which the kernels set.

#: k per MAC step: the 8 of aie2p's 8x8x8 and of aie2's 4x8x4 mmul
MAC_K = 8


def block_product(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """C + A B as the float32 accumulator takes it from 8-k MAC steps: each
    step's products summed exactly (float64) and rounded to float32, then
    added to the accumulator (rounding), step after step. On aie2p both
    operands are bfp16 there, so a step's sum is exact in float32 anyway.
    (iron-ops-gemm's core_kernels has the same function for mm.cc; this
    family does not depend on that one.)"""
    m, k = A.shape
    steps = np.einsum(
        "mbj,bjn->bmn",
        A.reshape(m, k // MAC_K, MAC_K).astype(np.float64),
        B.reshape(k // MAC_K, MAC_K, -1).astype(np.float64),
    ).astype(np.float32)
    total = np.array(C, np.float32)
    for step in steps:
        total += step
    return total


def mm_model(a, b, acc, tile, *, tile_n: int, ct_k: int, b_format: BFormat, arch: str, floor: bool):
    """iron_flm_mm_bfp16 / iron_flm_mm_bf16: the accumulator's rows of A
    tile `tile` += a (tile_ma x ct_k) @ one B chunk, in 8-k steps
    (`block_product`). aie2p converts the A tile to bfp16ebs8 (blocks of 8 k
    of one row, in the kernel's rounding mode) before the 8x8x8 multiply,
    and a bf16 B chunk the same way (the AIE API's emulated bf16 mmul); a
    bfp16 B is as packed. aie2 multiplies bf16 as it is."""
    rows = slice(tile * len(a), (tile + 1) * len(a))
    B = _decoded(b.tobytes(), b.dtype, tile_n, ct_k, b_format, arch == "aie2p", floor)
    A = _a_tile(a.tobytes(), a.shape, arch == "aie2p", floor)
    acc[rows] = block_product(A, B, acc[rows])


@functools.lru_cache(maxsize=64)
def _a_tile(raw: bytes, shape: tuple, emulated: bool, floor: bool) -> np.ndarray:
    """An A tile's values as the multiply reads them (aie2p: through bfp16),
    converted once for the columns that share it (a broadcast)."""
    values = np.frombuffer(raw, bf16).reshape(shape).astype(np.float32)
    return quantize(values, axis=1, floor=floor) if emulated else values


@functools.lru_cache(maxsize=64)
def _decoded(raw: bytes, dtype, tile_n: int, ct_k: int, b_format: BFormat, emulated: bool, floor):
    """A chunk's values as the multiply reads them, decoded once for the A
    tiles and cores that share it (a broadcast reaches every core of the
    column)."""
    values = read_chunk(np.frombuffer(raw, dtype), tile_n, ct_k, b_format)
    if emulated and b_format is BFormat.BF16:
        values = quantize(values, axis=0, floor=floor)
    return values


def _round(x, floor: bool) -> np.ndarray:
    return round_to_bf16(np.asarray(x, np.float32), floor=floor).astype(np.float32)


def _sigmoid(x: np.ndarray, c: float, arch: str, floor: bool) -> np.ndarray:
    """mm_fused.h's sigmoid(x c) = 0.5 + 0.5 tanh(x c / 2): x c / 2 one
    float32 rounding; tanh: aie2p aie::tanh (float32 tanh, its own error not
    published) stored as bf16, aie2 mlir-aie's table of the argument rounded
    to bf16; the sum exact."""
    h = np.asarray(x, np.float32) * (np.float32(c) * np.float32(0.5))
    if arch == "aie2":
        t = tanh_lut(_round(h, floor), floor=floor).astype(np.float32)
    else:
        t = _round(np.tanh(h), floor)
    return np.float32(0.5) + np.float32(0.5) * t


def drain_model(acc, c, chunk, mode, lo_bits, hi_bits, *, rounding: Rounding, arch: str) -> None:
    """iron_flm_drain_bf16: C chunk `chunk` (CT_OUT_LEN values: whole rows
    of the accumulator) = the epilogue (GELU x sigmoid(1.702 x), SiLU x
    sigmoid(x), each product one float32 rounding; `_sigmoid`), the clamp,
    one rounding to bf16; the rows are then zeroed for the next unit."""
    floor = rounding is Rounding.FLOOR
    rows = acc.reshape(-1, CT_OUT_LEN)[chunk]
    x = np.asarray(rows, np.float32)
    epilogue = list(Epilogue)[mode]
    if epilogue is Epilogue.GELU:
        x = x * _sigmoid(x, 1.702, arch, floor)
    elif epilogue is Epilogue.SILU:
        x = x * _sigmoid(x, 1.0, arch, floor)
    elif epilogue is Epilogue.SIGMOID:
        x = _sigmoid(x, 1.0, arch, floor)
    lo, hi = np.array([lo_bits, hi_bits], np.int32).view(np.float32)
    c[:] = round_to_bf16(np.minimum(np.maximum(x, lo), hi), floor=floor)
    rows[:] = 0


def zero_model(c) -> None:
    """iron_flm_zero_bf16: a C chunk of zeros (a row past the call's M)."""
    c[:] = 0


# ---- the image ----------------------------------------------------------------------


def _names(rows: int, cols: int):
    return [[f"core_{c}_{r}" for r in range(rows)] for c in range(cols)]


def _b_dtype(b_format: BFormat) -> str:
    return "bfp16ebs8" if b_format is BFormat.BFP16 else "bf16"


def _kernels(op: FLMGemm) -> tuple[Kernel, Kernel, Kernel]:
    arch = op.device.arch
    tile_n, ct_k, tile_ma = op.tile_n, op.ct_k, op.tile_ma
    bfp16 = op.b_format is BFormat.BFP16
    chunk = ct_k * tile_n // (GROUP if bfp16 else 1)
    mask = sum(1 << e.mode for e in op.epilogue_modes)
    floor = op.rounding is Rounding.FLOOR
    flags = (
        f"-DMM_FUSED_TILE_M={M_TILE}",
        f"-DMM_FUSED_TILE_K={K_TILE}",
        f"-DMM_FUSED_TILE_N={tile_n}",
        f"-DMM_FUSED_TILE_MA={tile_ma}",
        f"-DMM_FUSED_CT_K={ct_k}",
        f"-DMM_FUSED_OUT_CHUNK={CT_OUT_LEN}",
        f"-DMM_FUSED_EPILOGUE_MODE_MASK={mask}",
        *(["-DMM_FUSED_BFP16_B"] if bfp16 else []),
        # aie2p multiplies bf16 B through bfp16, as A
        *(["-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16"] if arch == "aie2p" and not bfp16 else []),
        *([] if floor else ["-DROUND_CONV_EVEN"]),
    )
    # aie2's epilogues read tanh through mlir-aie's table: the object links it
    tables = (
        {"extra_sources": (aie_runtime_lib("AIE2/lut_based_ops.cpp"),),
         "include_dirs": (aie_runtime_lib("AIE2"),)}
        if arch == "aie2" and op.activations else {}
    )  # fmt: skip
    source = shipped("iron.ops.flm", f"kernels/{arch}/mm_fused.cc", **tables)
    acc = Memref((M_TILE, tile_n), "f32")
    mm = Kernel(
        "iron_flm_mm_bfp16" if bfp16 else "iron_flm_mm_bf16",
        (Memref((tile_ma, ct_k), "bf16"), Memref((chunk,), _b_dtype(op.b_format)), acc, Scalar()),
        source,
        functools.partial(
            mm_model, tile_n=tile_n, ct_k=ct_k, b_format=op.b_format, arch=arch, floor=floor
        ),
        flags,
    )
    drain = Kernel(
        "iron_flm_drain_bf16",
        (acc, Memref((CT_OUT_LEN,), "bf16"), Scalar(), Scalar(), Scalar(), Scalar()),
        source,
        functools.partial(drain_model, rounding=op.rounding, arch=arch),
        flags,
    )
    zero = Kernel("iron_flm_zero_bf16", (Memref((CT_OUT_LEN,), "bf16"),), source, zero_model, flags)
    return mm, drain, zero


def _core_body(op: FLMGemm, col: int, row: int) -> tuple:
    """Per slab class (the slab cut has at most two slab sizes): the column
    blocks this core works on, unit by unit, then the ones it only drains
    A through; then the zero chunks of rows M..max_M."""
    mm, drain, zero = _kernels(op)
    a, b, c = f"A{row}_cores", f"B{col}", f"C{col}_{row}"
    k_slices, a_tiles = K_TILE // op.ct_k, M_TILE // op.tile_ma
    k_slice = [Acquire(b)]
    for tile in range(a_tiles):
        k_slice += [Acquire(a), Call(mm, (Obj(a), Obj(b), Buf("acc"), tile)), Release(a)]
    k_slice.append(Release(b))
    out = []
    for chunk in range(M_TILE * op.tile_n // CT_OUT_LEN):
        args = (Buf("acc"), Obj(c), chunk, Param("epilogue"), Param("clamp_lo"), Param("clamp_hi"))
        out += [Acquire(c), Call(drain, args), Release(c)]
    unit = (Loop(Param("k_iters"), [Loop(k_slices, k_slice)]), *out)
    skip = (Loop(Param("k_iters"), [Loop(k_slices * a_tiles, [Acquire(a), Release(a)])]),)
    body = []
    for size in ("big", "small"):
        units = Param(f"units_{size}")
        slab = (
            Loop(Param(f"work_{col}"), [Loop(units, unit)]),
            Loop(Param(f"idle_{col}"), [Loop(units, skip)]),
        )
        body.append(Loop(Param(f"slabs_{size}"), slab))
    body.append(Loop(Param(f"zeros_{col}"), [Acquire(c), Call(zero, (Obj(c),)), Release(c)]))
    return tuple(body)


def image(op: FLMGemm) -> tuple:
    """(fifos, links, workers, params) of `op`'s configuration."""
    device = op.device
    rows, cols = device.compute_rows, device.columns
    names = _names(rows, cols)
    pool = op.pool()
    bdtype = _b_dtype(op.b_format)
    per_value = GROUP if op.b_format is BFormat.BFP16 else 1
    _, b_depth = l1_fit(device, op.tile_n, op.ct_k, op.b_format, op.activations, op.tile_ma)
    ct_k, tile_ma, tile_n = op.ct_k, op.tile_ma, op.tile_n
    # each 64 x 512 k-block of A leaves the memtile k-slice by k-slice, A tile by A tile
    a_order = [(K_TILE // ct_k, ct_k), (M_TILE // tile_ma, tile_ma * K_TILE), (tile_ma, K_TILE)]
    fifos, links = [], []
    for r in range(rows):
        fifos += [
            ObjectFifo(
                f"A{r}", (M_TILE, K_TILE), "bf16", shim(), (memtile(f"a{r}", depth=A_DEPTH),)
            ),
            ObjectFifo(
                f"A{r}_cores",
                (tile_ma, ct_k),
                "bf16",
                memtile(f"a{r}"),
                tuple(core(names[c][r]) for c in range(cols)),
                dims_to_stream=(*a_order, (ct_k, 1)),
            ),
        ]
        links.append(forward(f"a{r}", f"A{r}", f"A{r}_cores", tile=Tile(r % cols, 1)))
    for c in range(cols):
        chunk = ct_k * tile_n // per_value
        fifos += [
            ObjectFifo(
                f"B{c}_in",
                (pool.slot_elems,),
                bdtype,
                shim(),
                (memtile(f"pool{c}", depth=pool.slots),),
            ),
            ObjectFifo(
                f"B{c}",
                (chunk,),
                bdtype,
                memtile(f"pool{c}"),
                tuple(core(names[c][r]) for r in range(rows)),
                depth=b_depth,
            ),
        ]
        links.append(forward(f"pool{c}", f"B{c}_in", f"B{c}", tile=Tile(c, 1), programmed=True))
        fifos += [
            ObjectFifo(f"C{c}_{r}", (CT_OUT_LEN,), "bf16", core(names[c][r]), (memtile(f"c{c}"),))
            for r in range(rows)
        ]
        fifos.append(
            ObjectFifo(
                f"C{c}", (rows * CT_OUT_LEN,), "bf16", memtile(f"c{c}"), (shim(),), depth=C_DEPTH
            )
        )
        offsets = [r * CT_OUT_LEN for r in range(rows)]
        links.append(
            join(f"c{c}", [f"C{c}_{r}" for r in range(rows)], f"C{c}", offsets, tile=Tile(c, 1))
        )
    lut = device.arch == "aie2" and op.activations  # aie2 links its activation tables
    buffers = (
        # zero once in the image: each drain zeroes the rows it finishes for the next unit
        LocalBuffer("acc", (M_TILE, tile_n), "f32", initial_value=0.0),
        *([LocalBuffer("lut", (LUT_BYTES,), "u8")] if lut else []),
    )
    workers = [
        Worker(
            names[c][r],
            _core_body(op, c, r),
            tile=Tile(c, FIRST_CORE_ROW + r),
            stack_size=STACK_BYTES,
            buffers=buffers,
        )
        for c in range(cols)
        for r in range(rows)
    ]
    params = (
        "k_iters",
        "epilogue",
        "clamp_lo",
        "clamp_hi",
        *(f"{what}_{size}" for size in ("big", "small") for what in ("slabs", "units")),
        *(f"{what}_{c}" for c in range(cols) for what in ("work", "idle", "zeros")),
    )
    return tuple(fifos), tuple(links), tuple(workers), params


# ---- the per-shape program -----------------------------------------------------------------


def _slab_classes(program: Program) -> list[tuple[int, int]]:
    """(slabs, units) of the big slabs, then of the small ones: divmod's
    spread gives at most two sizes, the larger first."""
    sizes = [s.units for s in program.slabs]
    classes = [(sizes.count(n), n) for n in dict.fromkeys(sizes)]
    if len(classes) > 2 or sizes != sorted(sizes, reverse=True):
        raise ValueError(
            f"{program.configuration}: slab sizes {sizes} are not two runs, larger first"
        )
    return [*classes, (0, 0)][:2]


def runtime_params(op: FLMGemm, program: Program | None = None) -> dict[str, int]:
    """The parameter words the cores read for this call."""
    program = program or op.program()
    cols = op.device.columns
    blocks = program.column_blocks(op.tile_n, cols)
    most = max(len(b) for b in blocks)
    lo, hi = op.clamp if op.clamp is not None else (-np.inf, np.inf)
    lo_bits, hi_bits = (int(v) for v in np.array([lo, hi], np.float32).view(np.int32))
    (big, units_big), (small, units_small) = _slab_classes(program)
    params = {
        "k_iters": program.k_iters,
        "epilogue": op.epilogue.mode,
        "clamp_lo": lo_bits,
        "clamp_hi": hi_bits,
        "slabs_big": big,
        "units_big": units_big,
        "slabs_small": small,
        "units_small": units_small,
    }
    pad_units = op.max_M // op.unit_rows - program.units
    per_unit = M_TILE * op.tile_n // CT_OUT_LEN  # a core's chunks of a unit's column block
    for c in range(cols):
        params[f"work_{c}"] = len(blocks[c])
        params[f"idle_{c}"] = most - len(blocks[c])
        params[f"zeros_{c}"] = pad_units * len(blocks[c]) * per_unit
    return params


def sequence(op: FLMGemm, program: Program) -> list:
    """The runtime sequence of one call (see the module docstring)."""
    device, K, N, tile_n = op.device, op.K, op.N, op.tile_n
    rows, cols = device.compute_rows, device.columns
    per_value = GROUP if op.b_format is BFormat.BFP16 else 1
    unit_rows = M_TILE * rows
    chunk_rows = CT_OUT_LEN // tile_n
    k_iters, pool = program.k_iters, program.pool
    blocks = program.column_blocks(tile_n, cols)
    n_blocks = max(len(b) for b in blocks)
    out = []
    for s, slab in enumerate(program.slabs):

        def group(block: int, unit: int) -> str:
            return f"s{s}b{block}u{unit}"  # noqa: B023

        last = slab.units - 1
        working = [c for c in range(cols) if blocks[c]]
        out += [SetLock(f"pool{c}", i, slab.b_uses) for c in working for i in range(slab.b_slots)]
        tasks = {}  # column block -> pool tasks issued there
        for c in working:
            for fill, passes, take, give in (
                (True, slab.fill_passes, slab.b_uses, slab.b_uses),
                (False, slab.drain_passes, 1, 1),
            ):
                bds = [SlotBd(i, take, give) for i in range(slab.b_slots)]
                done = 0
                for push in pushes(len(blocks[c]), passes, device):
                    done += push.repeat_count
                    until = group((done - 1) // passes, last)  # the last block it serves
                    task = PoolTask(f"pool{c}", fill, bds, push.repeat_count, until)
                    tasks.setdefault(push.block, []).append(task)
        for j in range(n_blocks):
            for u in range(slab.units):
                if u == 0:
                    out += tasks.get(j, [])
                    for c in (c for c in working if len(blocks[c]) > j):
                        cb = blocks[c][j]
                        column = k_iters * pool.slot_elems  # a column block of B, in elements
                        reads = slab.units if not slab.resident else 1
                        tap = TAP(cb * tile_n * K // per_value, (reads, 1, 1, column), (0, 0, 0, 1))
                        out.append(Fill(f"B{c}_in", "B", tap, group=group(j, last)))
                    for r in range(rows):
                        tap = TAP(
                            slab.first * unit_rows * K + r * M_TILE * K,
                            (slab.units, k_iters, M_TILE, K_TILE),
                            (unit_rows * K, K_TILE, K, 1),
                        )
                        out.append(Fill(f"A{r}", "A", tap, group=group(j, last)))
                for c in (c for c in working if len(blocks[c]) > j):
                    # one join object is chunk q of every core row: rows
                    # r*64 + q*chunk_rows + i of the unit
                    tap = TAP(
                        blocks[c][j] * tile_n + (slab.first + u) * unit_rows * N,
                        (M_TILE // chunk_rows, rows, chunk_rows, tile_n),
                        (chunk_rows * N, M_TILE * N, N, 1),
                    )
                    out.append(Drain(f"C{c}", "C", tap, group=group(j, u)))
                out.append(Finish(group(j, u)))
    return out + _zero_rows(op, program, blocks)


def _zero_rows(op: FLMGemm, program: Program, blocks) -> list:
    """Rows M..max_M of C: per column block, one drain of the zero chunks
    its column's cores make for it (`zeros_{c}` counts them over all the
    column's blocks), its rows in order. Every chunk holds zeros, so which
    chunk lands where does not matter, only that each row is written once."""
    unit_rows, N, tile_n = op.unit_rows, op.N, op.tile_n
    pad_units = op.max_M // unit_rows - program.units
    if pad_units == 0:
        return []
    out = []
    for j in range(max(len(b) for b in blocks)):
        for c in (c for c in range(len(blocks)) if len(blocks[c]) > j):
            tap = TAP(
                program.M * N + blocks[c][j] * tile_n,
                (pad_units, unit_rows, tile_n),
                (unit_rows * N, N, 1),
            )
            out.append(Drain(f"C{c}", "C", tap, group=f"zero{j}"))
        out.append(Finish(f"zero{j}"))
    return out


def build(op: FLMGemm, program: Program | None = None) -> Design:
    """`op`'s design: its configuration's image and, from `program` (by
    default `op.program()`), this call's runtime sequence."""
    program = program or op.program()
    fifos, links, workers, params = image(op)
    bshape = (op.K * op.N // GROUP,) if op.b_format is BFormat.BFP16 else (op.K * op.N,)
    tensors = (
        Tensor("A", (op.max_M, op.K), "bf16", IN),
        Tensor("B", bshape, _b_dtype(op.b_format), IN),
        Tensor("C", (op.max_M, op.N), "bf16", OUT),
    )
    return Design(
        op.configuration(),
        op.device,
        tensors,
        fifos,
        workers,
        sequence(op, program),
        links=links,
        params=params,
    )


def b_blocks(packed: np.ndarray, b_format: BFormat) -> np.ndarray:
    """A packed B as the design's B tensor: (K*N/8,) bfp16ebs8 blocks (9
    bytes each), or the bf16 values as they are."""
    if BFormat(b_format) is BFormat.BF16:
        return np.asarray(packed)
    return np.ascontiguousarray(packed, np.uint8).view(np.dtype((np.void, 9))).reshape(-1)


def run(op: FLMGemm, A, B, program: Program | None = None) -> Simulation:
    """Simulate one call of `op` (resolved) on A (max_M, K) bf16 and packed B
    with iron-design's simulator; `run(...)["C"]` is C and `.traffic` the
    bytes every transfer moved."""
    program = program or op.program()
    tensors = {"A": np.asarray(A), "B": b_blocks(B, op.b_format)}
    return simulate(build(op, program), tensors, runtime_params(op, program))


def transfer_bytes(design: Design) -> dict[str, int]:
    """DDR bytes the runtime sequence's transfers move, per tensor, summed
    from their access patterns (what the simulator's counters measure)."""
    moved = dict.fromkeys((t.name for t in design.tensors), 0)
    for task in design.tasks():
        tensor = design.tensor(task.tensor)
        count = task.tap.count if task.tap is not None else tensor.size
        moved[tensor.name] += count * design.fifo(task.fifo).element.nbytes
    return moved


# ---- DequantBFP -------------------------------------------------------------------------


def dequant_design(K: int, N: int, device) -> Design:
    """DequantBFP's design: column c dequantizes column blocks c, c + cols,
    ... (64 n each: q4nx block rows 2cb and 2cb + 1, contiguous in q). A
    q4nx block (32 n x 256 k) gives 1024 bfp16ebs8 blocks: two k-slices x
    4 runs of 128, one run per 8 n, which the drain places."""
    cols = min(device.columns, N // TILE_N)
    per_block = BLOCK_N * BLOCK_K // GROUP  # bfp16 blocks out of one q4nx block
    kernel = Kernel(
        "iron_flm_dequant_q4nx",
        (Memref((BLOCK_BYTES,), "u8"), Memref((per_block,), "bfp16ebs8")),
        shipped("iron.ops.flm", "kernels/dequant_q4nx.cc"),
        encode_block,
    )
    fifos, workers = [], []
    for c in range(cols):
        name = f"dequant_{c}"
        fifos += [
            ObjectFifo(f"q{c}", (BLOCK_BYTES,), "u8", shim(), (core(name),)),
            ObjectFifo(f"b{c}", (per_block,), "bfp16ebs8", core(name), (shim(),)),
        ]
        body = (
            Acquire(f"q{c}"),
            Acquire(f"b{c}"),
            Call(kernel, (Obj(f"q{c}"), Obj(f"b{c}"))),
            Release(f"q{c}"),
            Release(f"b{c}"),
        )
        workers.append(Worker(name, body, tile=Tile(c, FIRST_CORE_ROW)))
    k_quarters = K // BLOCK_K  # q4nx blocks along k
    # one q4nx block's output: its k-slices a slice apart, in runs of 8 n
    slices, runs, run = BLOCK_K // CT_K, BLOCK_N // T, CT_K // S * T
    sequence = []
    for cb in range(N // TILE_N):
        c = cb % cols
        rows = TAP.linear(2 * k_quarters * BLOCK_BYTES, offset=2 * cb * k_quarters * BLOCK_BYTES)
        sequence.append(Fill(f"q{c}", "q", rows, group=f"cb{cb}"))
        for half in range(2):  # n 0..31, then 32..63 of the column block
            tap = TAP(
                cb * K * TILE_N // GROUP + half * runs * run,
                (k_quarters, slices, runs, run),
                (slices * per_block, TILE_N // T * run, run, 1),
            )
            sequence.append(Drain(f"b{c}", "B", tap, group=f"cb{cb}"))
        sequence.append(Finish(f"cb{cb}"))
    tensors = (
        Tensor("q", (q4nx_size(K, N),), "u8", IN),
        Tensor("B", (K * N // GROUP,), "bfp16ebs8", OUT),
    )
    return Design(f"dequant_bfp_K{K}_N{N}", device, tensors, fifos, workers, sequence)
