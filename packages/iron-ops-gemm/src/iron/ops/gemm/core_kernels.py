"""The core kernels this family's designs call, each with a numpy model of
its arithmetic on the layout its objects arrive in. Every kernel is listed
in ``kernels/manifest.json`` (`iron.design.manifest`).

mlir-aie's, at iron-design's pin: `matmul_<in>_<acc>` and `zero_<acc>` of
`{arch}/mm.cc`. Ours (kernels/, AIE API vectors): the narrowing casts
(cast.cc: the pin has an f32 -> bf16 cast for neither generation), the bf16
matvec (matvec.cc), the decode-attention kernels (gqa.cc) and the prefill
attention pipeline (mha.cc, aie2p).

The models follow the sources' arithmetic where it changes bits: which
products are exact, where a float32 accumulator rounds (block by block,
lane by lane, in the source's order), where a value is stored as bf16 or
converted to bfp16, and the one rounding of an output. Approximations whose
exact bits are not published (aie::exp2, aie::inv) are modelled by the
float32 function; so is the order in which a MAC unit adds the products of
one block, which the models sum exactly and round once.
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import bf16
from iron.core.numerics import round_to_bf16
from iron.design import Kernel, Memref, Scalar, aie_kernels, shipped
from iron.design.block_float import quantize
from iron.design.kernel_batch import batched

#: accumulator element type per input element type
ACCUMULATOR = {"bf16": "f32", "i8": "i32"}
#: float32 lanes of our kernels' accumulators (aie::accum<accfloat, 16>)
LANES = 16
#: products from which `lane_dots` adds step by step across all its dots
#: (a numpy call per step) rather than by a cumsum (the partial sums of
#: every step kept): the same additions, faster for a replay's stacks
STEPWISE = 1 << 15
#: the k (or head_dim) one MAC of the matmul shapes takes: s of r x s x t
BLOCK_K = 8


def _ours(file: str):
    return shipped("iron.ops.gemm", f"kernels/{file}")


# ---- shared arithmetic ------------------------------------------------------------------


def sum_lanes(lanes: np.ndarray) -> np.ndarray:
    """The last axis (16 float32 lanes) added pairwise by halves, lane k with
    k + width/2 (`iron::sum_lanes` in kernels/iron_gemm.h; the eltwise
    family's row models add the same way, `iron.ops.eltwise.rows.sum_lanes`,
    which this family does not import to stay light)."""
    lanes = np.asarray(lanes, np.float32)
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    return lanes[..., 0]


def lane_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot products over the last axis as our kernels take them: 16 float32
    lanes, lane l accumulating the exact bf16 products of elements l, l + 16,
    ... in order (one rounding per step), then `sum_lanes`."""
    products = np.asarray(a, np.float32) * np.asarray(b, np.float32)  # exact
    steps = products.reshape(*products.shape[:-1], -1, LANES)
    if products.size < STEPWISE:
        return sum_lanes(np.cumsum(steps, axis=-2, dtype=np.float32)[..., -1, :])
    lanes = steps[..., 0, :].copy()  # the same additions, a step across every dot at a time
    for step in range(1, steps.shape[-2]):
        lanes += steps[..., step, :]
    return sum_lanes(lanes)


def block_product(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """C + A B as a float32 accumulator takes it from MACs over blocks of 8
    k: each block's products summed (exactly, in float64) and rounded to
    float32, then added to the accumulator (rounding), block after block.
    (iron-ops-flm's design has the same function for its own kernels.)"""
    m, k = A.shape
    steps = np.einsum(
        "mbj,bjn->bmn",
        A.reshape(m, k // BLOCK_K, BLOCK_K).astype(np.float64),
        B.reshape(k // BLOCK_K, BLOCK_K, -1).astype(np.float64),
    ).astype(np.float32)
    total = np.array(C, np.float32)
    for step in steps:
        total += step
    return total


# ---- blocked tiles ---------------------------------------------------------------------


def unblock(flat: np.ndarray, rows: int, cols: int, r: int, c: int, *, transposed=False):
    """The (rows, cols) matrix held in `flat` as (rows/r, cols/c) blocks of
    r x c, blocks and their elements row-major; `transposed`: blocks ordered
    (cols/c, rows/r), each stored c x r (mm.cc's column-major C)."""
    if transposed:
        return flat.reshape(cols // c, rows // r, c, r).transpose(1, 3, 0, 2).reshape(rows, cols)
    return flat.reshape(rows // r, cols // c, r, c).transpose(0, 2, 1, 3).reshape(rows, cols)


def block(matrix: np.ndarray, r: int, c: int, *, transposed=False) -> np.ndarray:
    """The inverse of `unblock`: `matrix` laid out in blocks, flat."""
    rows, cols = matrix.shape
    if transposed:
        return matrix.reshape(rows // r, r, cols // c, c).transpose(2, 0, 3, 1).ravel()
    return matrix.reshape(rows // r, r, cols // c, c).transpose(0, 2, 1, 3).ravel()


# ---- matmul (mlir-aie mm.cc) -----------------------------------------------------------


def matmul_model(a, b, c, *, m, k, n, r, s, t, b_col_maj, emulated):
    """`matmul_<in>_<acc>` of mm.cc: C += A B on one core's tiles, A (m, k)
    in r x s blocks, B (k, n) in s x t blocks (`b_col_maj`: (n, k) in t x s
    blocks, blocks ordered along n first), C (m, n) in r x t blocks,
    row-major (the designs never build mm.cc with C_COL_MAJ).

    int8: exact int32 sums. bf16: `block_product` over the K blocks of 8 in
    order (mm.cc's `C00.mac(A0, B0)` over i in colA). `emulated` (aie2p,
    AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16): each 8 x 8 A tile and the
    transposed B tile are converted to bfp16ebs8 first, blocks of 8
    consecutive k, rounded half to even (mm.cc sets conv_even for the
    conversion: `aie::swap_rounding(aie::rounding_mode::conv_even)`); the
    aie_api line followed is mmul_bf16_bf16<8, 8, 8>::mac in
    detail/aie2p/mmul_bf16_bf16.hpp, ``::to_v64bfp16ebs8(acc_a)`` and
    ``::to_v64bfp16ebs8(acc_b)`` before ``mac_8x8_8x8T_conf``. A block's
    product is then exact (8-bit mantissas, one exponent per operand block),
    so only the accumulator rounds."""
    A = unblock(a, m, k, r, s)
    B = unblock(b, n, k, t, s).T if b_col_maj else unblock(b, k, n, s, t)
    C = unblock(c, m, n, r, t)
    if c.dtype == np.int32:
        C = (C + A.astype(np.int64) @ B.astype(np.int64)).astype(np.int32)
    else:
        A, B = A.astype(np.float32), B.astype(np.float32)
        if emulated:
            A, B = quantize(A, axis=1), quantize(B, axis=0)
        C = block_product(A, B, C)
    c[:] = block(C, r, t)


def zero_model(c):
    c[:] = 0


def matmul_kernel(arch, dtype_in, m, k, n, rst, b_col_maj) -> Kernel:
    """mlir-aie's `matmul_<in>_<acc>` from `{arch}/mm.cc`, built for one
    m x k x n tile and r x s x t mmul; the bf16 kernel on aie2p multiplies
    through bfp16 (AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16), as mlir-aie's
    aie2p GEMMs build it."""
    acc = ACCUMULATOR[dtype_in]
    r, s, t = rst
    emulated = arch == "aie2p" and dtype_in == "bf16"
    flags = [f"-DDIM_M={m}", f"-DDIM_K={k}", f"-DDIM_N={n}", f"-D{dtype_in}_{acc}_ONLY"]
    flags += ["-DB_COL_MAJ"] * b_col_maj
    flags += ["-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16"] * emulated
    model = functools.partial(
        matmul_model, m=m, k=k, n=n, r=r, s=s, t=t, b_col_maj=b_col_maj, emulated=emulated
    )
    args = (Memref(m * k, dtype_in), Memref(k * n, dtype_in), Memref(m * n, acc))
    return Kernel(f"matmul_{dtype_in}_{acc}", args, aie_kernels(f"{arch}/mm.cc"), model, flags)


def zero_kernel(matmul: Kernel) -> Kernel:
    """mlir-aie's `zero_<acc>` over the matmul's C tile, from the same build
    of `{arch}/mm.cc` (its `*_ONLY` define selects the one combination)."""
    c = matmul.args[2]
    return Kernel(f"zero_{c.dtype}", (c,), matmul.source, zero_model, matmul.flags)


# ---- narrowing casts (kernels/cast.cc) ----------------------------------------------------


def cast_model(source, out, count):
    """One rounding to bf16, to nearest even: float32 as it is; int32 as a
    whole (through float64, which holds it exactly; the kernel keeps the
    bits that decide the rounding, see cast.cc)."""
    wide = source[:count].astype(np.float64) if source.dtype == np.int32 else source[:count]
    out[:count] = round_to_bf16(wide)


def cast_columns_model(source, out, *, m, n, r, t):
    """`cast_model` of an (m, n) tile held in r x t row-major blocks, written
    as t x r blocks ordered along m first (the layout mm.cc's C_COL_MAJ
    would write), so the memtile can read the tile's columns."""
    wide = source.astype(np.float64) if source.dtype == np.int32 else source
    out[:] = round_to_bf16(block(unblock(wide, m, n, r, t), r, t, transposed=True))


def cast_kernel(source_dtype, count) -> Kernel:
    """`iron_cast_{f32,i32}_bf16(in, out, count)` (kernels/cast.cc)."""
    args = (Memref(count, source_dtype), Memref(count, "bf16"), Scalar("i32"))
    return Kernel(f"iron_cast_{source_dtype}_bf16", args, _ours("cast.cc"), cast_model)


def cast_columns_kernel(source_dtype, m, n, r, t) -> Kernel:
    """`iron_cast_{f32,i32}_bf16_cols(in, out)` (kernels/cast.cc), built for
    one m x n tile of r x t blocks."""
    args = (Memref(m * n, source_dtype), Memref(m * n, "bf16"))
    model = functools.partial(cast_columns_model, m=m, n=n, r=r, t=t)
    flags = (f"-DDIM_M={m}", f"-DDIM_N={n}", f"-DBLOCK_R={r}", f"-DBLOCK_T={t}")
    return Kernel(f"iron_cast_{source_dtype}_bf16_cols", args, _ours("cast.cc"), model, flags)


def zero_first(buffer, count):
    buffer[:count] = 0


def zero_f32_kernel(count) -> Kernel:
    """`iron_zero_f32(buffer, count)` (kernels/cast.cc)."""
    return Kernel(
        "iron_zero_f32", (Memref(count, "f32"), Scalar("i32")), _ours("cast.cc"), zero_first
    )


# ---- matvec (kernels/matvec.cc) --------------------------------------------------------------


def matvec_model(a, x, y, row_offset, *, rows, k):
    """y[row_offset + i] = bf16(row i of A . x), the dot as `lane_dots`
    takes it, for the `rows` rows of A held row-major in `a`."""
    A = a.reshape(rows, k)
    y[row_offset : row_offset + rows] = lane_dots(A, x[None, :]).astype(bf16)


def _matvec_rows(a, x, y, row_offset, *, rows, k):
    """`matvec_model`'s dots for a stack of calls: (calls, rows) bf16."""
    return lane_dots(a.reshape(-1, rows, k), x[:, None, :]).astype(bf16)


def _matvec_write(dots, a, x, y, row_offset, *, rows, k):
    y[row_offset : row_offset + rows] = dots


def _matvec_whole(a, x, y, row_offset, *, rows, k) -> bool:
    return row_offset == 0 and rows == y.size


batched(
    matvec_model,
    reads=(0, 1),
    writes=(2,),
    compute=_matvec_rows,
    write=_matvec_write,
    whole=_matvec_whole,
)


def matvec_kernel(rows, k, out_rows) -> Kernel:
    model = functools.partial(matvec_model, rows=rows, k=k)
    args = (Memref(rows * k, "bf16"), Memref(k, "bf16"), Memref(out_rows, "bf16"), Scalar("i32"))
    flags = (f"-DDIM_M={rows}", f"-DDIM_K={k}")
    return Kernel("iron_matvec_bf16", args, _ours("matvec.cc"), model, flags)


# ---- decode attention (kernels/gqa.cc) -----------------------------------------------------


def scores_model(q, keys, scores, first, valid, *, heads, groups, head_dim, positions, scale):
    """One chunk of `positions` cache rows starting at position `first`:
    scores[h, p] = bf16(lane_dots(q[h], keys[p, h // (heads/groups)]) * scale)
    for first + p < valid, else 0; rows at or past `valid` are never read."""
    live = max(0, min(positions, valid - first))
    per_group = heads // groups
    out = scores.reshape(heads, positions)
    out[:] = 0
    if live:
        k = keys.reshape(positions, groups, head_dim)[:live]
        qf = q.reshape(groups, per_group, 1, head_dim)
        dots = lane_dots(qf, k.transpose(1, 0, 2)[:, None, :, :])  # (groups, per_group, live)
        out[:, :live] = (dots.reshape(heads, live) * np.float32(scale)).astype(bf16)


def _scores_rows(q, keys, scores, first, valid, *, heads, groups, head_dim, positions, scale):
    """`scores_model` for a stack of calls: the dots of the calls with live
    rows, over the most any of them has, then 0 where a call's position is
    at or past its `valid` (what a call never reads may hold anything: those
    dots are dropped)."""
    per_group = heads // groups
    live = np.clip(valid - first, 0, positions)
    out = np.zeros((len(q), heads, positions), bf16)
    calls = np.flatnonzero(live)
    if calls.size:
        width = int(live.max())
        k = keys[calls].reshape(-1, positions, groups, head_dim)[:, :width]
        qf = q[calls].reshape(-1, groups, per_group, 1, head_dim)
        with np.errstate(all="ignore"):
            dots = lane_dots(qf, k.transpose(0, 2, 1, 3)[:, :, None])
            scaled = (dots.reshape(-1, heads, width) * np.float32(scale)).astype(bf16)
        kept = np.arange(width) < live[calls][:, None]
        out[calls, :, :width] = np.where(kept[:, None, :], scaled, np.zeros((), bf16))
    return out


def _write_whole(result, *args, **sizes):
    """Write the third argument (the output object) whole."""
    args[2][...] = result.reshape(args[2].shape)


def _always(*args, **sizes) -> bool:
    return True


batched(
    scores_model,
    reads=(0, 1),
    writes=(2,),
    compute=_scores_rows,
    write=_write_whole,
    whole=_always,
)


def _gqa_flags(heads, groups, head_dim, positions):
    return (f"-DHEADS={heads}", f"-DGROUPS={groups}", f"-DHEAD_DIM={head_dim}",
            f"-DPOSITIONS={positions}")  # fmt: skip


def scores_kernel(heads, groups, head_dim, positions, scale) -> Kernel:
    model = functools.partial(
        scores_model, heads=heads, groups=groups, head_dim=head_dim, positions=positions,
        scale=float(scale),
    )  # fmt: skip
    args = (
        Memref(heads * head_dim, "bf16"),
        Memref(positions * groups * head_dim, "bf16"),
        Memref(heads * positions, "bf16"),
        Scalar("i32"),
        Scalar("i32"),
    )
    # the float32 scale as a literal that is exactly it
    flags = (*_gqa_flags(heads, groups, head_dim, positions),
             f"-DSCORE_SCALE={float(np.float32(scale))!r}f")  # fmt: skip
    return Kernel("iron_gqa_scores_bf16", args, _ours("gqa.cc"), model, flags)


def context_model(weights, values, acc, first, valid, *, heads, groups, head_dim, positions):
    """acc[h] += weights[h, p] * values[p, h // (heads/groups)] for the
    chunk's positions p with first + p < valid, position after position in
    float32 (each product exact, each step one rounding); neither weights
    nor values at or past `valid` are read."""
    live = max(0, min(positions, valid - first))
    if not live:
        return
    per_group = heads // groups
    w = weights.reshape(groups, per_group, positions)[:, :, :live].astype(np.float32)
    v = values.reshape(positions, groups, head_dim)[:live].astype(np.float32)
    total = acc.reshape(groups, per_group, head_dim)
    terms = w.transpose(2, 0, 1)[..., None] * v[:, :, None, :]  # (live, groups, per_group, d)
    steps = np.concatenate([total[None], terms])
    total[:] = np.cumsum(steps, axis=0, dtype=np.float32)[-1]


def context_kernel(heads, groups, head_dim, positions) -> Kernel:
    model = functools.partial(
        context_model, heads=heads, groups=groups, head_dim=head_dim, positions=positions
    )
    args = (
        Memref(heads * positions, "bf16"),
        Memref(positions * groups * head_dim, "bf16"),
        Memref(heads * head_dim, "f32"),
        Scalar("i32"),
        Scalar("i32"),
    )
    flags = _gqa_flags(heads, groups, head_dim, positions)
    return Kernel("iron_gqa_context_bf16", args, _ours("gqa.cc"), model, flags)


# ---- prefill attention (MHA, kernels/mha.cc), 64-row query block x 64-row key block --------

#: mha.cc's log2(e), a float32: exp(x) = exp2(x log2 e)
LOG2E = np.float32(1.4426950408889634)


def _exp_bf16(x) -> np.ndarray:
    """aie::exp2<bfloat16> of x * log2e (float32 product): the float32 exp2,
    rounded to bf16."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.asarray(x, np.float32) * LOG2E
        return round_to_bf16(np.exp2(scaled.astype(np.float64))).astype(np.float32)


def block_scores_model(q, k, s, q_block, k_block, *, rows, head_dim, seq_len, causal, scale):
    """S = Q K^T * scale in float32 through the bfp16-emulated MAC: Q and K
    quantised along head_dim, `block_product`; keys at or past seq_len, and
    with `causal` keys after the query, are -inf."""
    Q = quantize(q.reshape(rows, head_dim), axis=1)
    K = quantize(k.reshape(rows, head_dim), axis=1)
    S = block_product(Q, K.T, np.zeros((rows, rows), np.float32)) * np.float32(scale)
    query = q_block * rows + np.arange(rows)[:, None]
    key = k_block * rows + np.arange(rows)[None, :]
    masked = (key >= seq_len) | ((key > query) if causal else False)
    s[:] = np.where(masked, np.float32(-np.inf), S).ravel()


def online_softmax_model(s, p, alpha, state, k_block, *, rows):
    """One key block of a running softmax: with m the running row maximum
    and l the running sum (`state`, reset at key block 0), m' = max(m,
    max S), alpha = exp(m - m') and E = exp(S - m') each as bf16
    (`_exp_bf16`), l' = l alpha + the row's E summed in 16 lanes; P = E."""
    S = s.reshape(rows, rows)
    m, total = state[:rows], state[rows:]
    if k_block == 0:
        m[:], total[:] = -np.inf, 0
    top = np.maximum(m, S.max(axis=1))
    safe = np.where(np.isfinite(top), top, np.float32(0))
    scale = _exp_bf16(m - safe)
    E = _exp_bf16(S - safe[:, None])
    row_sums = sum_lanes(np.cumsum(E.reshape(rows, -1, LANES), axis=1, dtype=np.float32)[:, -1])
    total[:] = total * scale + row_sums
    m[:] = top
    alpha[:] = scale
    p[:] = E.astype(bf16).ravel()


def softmax_total_model(state, total, *, rows):
    total[:] = state[rows:]


def block_context_model(p, alpha, v, acc, k_block, *, rows, head_dim):
    """acc = acc * alpha (reset at key block 0) + P V through the
    bfp16-emulated MAC (P quantised along the keys, V along its rows)."""
    out = acc.reshape(rows, head_dim)
    if k_block == 0:
        out[:] = 0
    start = out * alpha[:, None]
    P = quantize(p.reshape(rows, rows).astype(np.float32), axis=1)
    V = quantize(v.reshape(rows, head_dim).astype(np.float32), axis=0)
    out[:] = block_product(P, V, start)


def block_output_model(acc, total, o, q_block, *, rows, head_dim, seq_len):
    """O = acc times the inverse of l (aie::inv, modelled as 1 / l), one
    rounding; query rows at or past seq_len are 0."""
    with np.errstate(divide="ignore"):
        inverse = np.float32(1) / total
    out = acc.reshape(rows, head_dim) * inverse[:, None]
    out[q_block * rows + np.arange(rows) >= seq_len] = 0
    o[:] = out.astype(bf16).ravel()


def mha_kernels(rows, head_dim, seq_len, causal, scale) -> dict[str, Kernel]:
    """The five kernels of one attention pipeline (kernels/mha.cc, aie2p,
    built with the bfp16-emulated bf16 MAC)."""
    block, vector = rows * head_dim, Memref(rows, "f32")
    square = rows * rows
    i32 = Scalar("i32")
    common = {"rows": rows}
    flags = (f"-DROWS={rows}", f"-DHEAD_DIM={head_dim}", f"-DSEQ_LEN={seq_len}",
             f"-DCAUSAL={int(causal)}", "-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16")  # fmt: skip
    spec = {
        "scores": (
            (Memref(block, "bf16"), Memref(block, "bf16"), Memref(square, "f32"), i32, i32),
            functools.partial(
                block_scores_model,
                rows=rows,
                head_dim=head_dim,
                seq_len=seq_len,
                causal=causal,
                scale=float(scale),
            ),
        ),
        "softmax": (
            (Memref(square, "f32"), Memref(square, "bf16"), vector, Memref(2 * rows, "f32"), i32),
            functools.partial(online_softmax_model, **common),
        ),
        "total": (
            (Memref(2 * rows, "f32"), vector),
            functools.partial(softmax_total_model, **common),
        ),
        "context": (
            (Memref(square, "bf16"), vector, Memref(block, "bf16"), Memref(block, "f32"), i32),
            functools.partial(block_context_model, rows=rows, head_dim=head_dim),
        ),
        "output": (
            (Memref(block, "f32"), vector, Memref(block, "bf16"), i32),
            functools.partial(block_output_model, rows=rows, head_dim=head_dim, seq_len=seq_len),
        ),
    }
    return {
        role: Kernel(f"iron_mha_{role}", args, _ours("mha.cc"), model, flags)
        for role, (args, model) in spec.items()
    }
