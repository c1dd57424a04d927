"""The core kernels this family's designs call, each with a numpy model of
its exact arithmetic on the layout its objects arrive in.

Where mlir-aie ships the kernel, the design links mlir-aie's source:
`{arch}/mm.cc` (matmul and zero, per generation) and, on aie2p,
`aie2p/cast_f32_bf16.cc`. What mlir-aie lacks (a bf16 matvec accumulating
in float32, the decode-attention kernels, and the narrowing casts aie2 has
no kernel for) is `kernels/gemm_kernels.cc` in this package.

Numerics, as the operators state them: bf16 products accumulate in float32
and are rounded once per output; int8 products accumulate exactly in int32.
The models compute in those types, so a design whose access patterns put an
element in the wrong place gives a wrong answer.
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import bf16
from iron.core.numerics import round_to_bf16
from iron.design import Kernel, Memref, Scalar, aie_kernels, shipped

#: accumulator element type per input element type
ACCUMULATOR = {"bf16": "f32", "i8": "i32"}
OURS = shipped("iron.ops.gemm", "kernels/gemm_kernels.cc")


# ---- blocked tiles ---------------------------------------------------------------------


def unblock(flat: np.ndarray, rows: int, cols: int, r: int, c: int, *, transposed=False):
    """The (rows, cols) matrix held in `flat` as (rows/r, cols/c) blocks of
    r x c, blocks and their elements row-major; `transposed`: blocks ordered
    (cols/c, rows/r), each stored c x r (the kernel's column-major form)."""
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


def matmul_model(a, b, c, *, m, k, n, r, s, t, b_col_maj, c_col_maj):
    """C += A B on one core's tiles: A (m, k) in r x s blocks, B (k, n) in
    s x t blocks (with `b_col_maj`, (n, k) in t x s blocks, blocks ordered
    along n first), C (m, n) in r x t blocks (`c_col_maj`: t x r blocks
    ordered along n first), as mm.cc's 2 x 2 mmul expansion reads them.
    bf16 products accumulate into float32 C, int8 into int32 exactly."""
    A = unblock(a, m, k, r, s)
    B = unblock(b, n, k, t, s).T if b_col_maj else unblock(b, k, n, s, t)
    C = unblock(c, m, n, r, t, transposed=c_col_maj)
    if c.dtype == np.int32:
        C = C + A.astype(np.int64) @ B.astype(np.int64)
    else:
        C = C + A.astype(np.float32) @ B.astype(np.float32)
    c[:] = block(C.astype(c.dtype), r, t, transposed=c_col_maj)


def zero_model(c):
    c[:] = 0


def matmul_kernel(arch, dtype_in, m, k, n, rst, b_col_maj, c_col_maj) -> Kernel:
    """mlir-aie's `matmul_<in>_<acc>` from `{arch}/mm.cc`, built for one
    m x k x n tile and r x s x t mmul; the bf16 kernel on aie2p multiplies
    through bfp16 (AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16)."""
    acc = ACCUMULATOR[dtype_in]
    r, s, t = rst
    flags = [f"-DDIM_M={m}", f"-DDIM_K={k}", f"-DDIM_N={n}", f"-D{dtype_in}_{acc}_ONLY"]
    flags += ["-DB_COL_MAJ"] * b_col_maj + ["-DC_COL_MAJ"] * c_col_maj
    if arch == "aie2p" and dtype_in == "bf16":
        flags.append("-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16")
    model = functools.partial(
        matmul_model, m=m, k=k, n=n, r=r, s=s, t=t, b_col_maj=b_col_maj, c_col_maj=c_col_maj
    )
    args = (Memref(m * k, dtype_in), Memref(k * n, dtype_in), Memref(m * n, acc))
    return Kernel(f"matmul_{dtype_in}_{acc}", args, aie_kernels(f"{arch}/mm.cc"), model, flags)


def zero_kernel(matmul: Kernel) -> Kernel:
    """mlir-aie's `zero_<acc>` over the matmul's C tile, from the same build
    of `{arch}/mm.cc` (its `*_ONLY` define selects the one combination)."""
    c = matmul.args[2]
    return Kernel(f"zero_{c.dtype}", (c,), matmul.source, zero_model, matmul.flags)


# ---- narrowing casts -------------------------------------------------------------------


def cast_model(source, out, count):
    """One rounding to bf16, to nearest even: float32 as it is; int32 through
    float64, which holds it exactly (a float32 step would round twice)."""
    wide = source[:count].astype(np.float64) if source.dtype == np.int32 else source[:count]
    out[:count] = round_to_bf16(wide)


def cast_kernel(arch, source_dtype, count) -> Kernel:
    """f32 -> bf16: mlir-aie's `cast_f32_bf16_row` on aie2p (conv_even
    rounding), ours on aie2; i32 -> bf16: ours on both."""
    args = (Memref(count, source_dtype), Memref(count, "bf16"), Scalar("i32"))
    if source_dtype == "f32" and arch == "aie2p":
        return Kernel("cast_f32_bf16_row", args, aie_kernels("aie2p/cast_f32_bf16.cc"), cast_model)
    return Kernel(f"iron_cast_{source_dtype}_bf16", args, OURS, cast_model)


# ---- matvec ------------------------------------------------------------------------------


def matvec_model(a, x, y, row_offset, *, rows, k):
    """y[row_offset + i] = bf16(sum_j A[i, j] x[j]) for the `rows` rows of A
    held row-major in `a`: float32 accumulation, one rounding."""
    A = a.reshape(rows, k).astype(np.float32)
    y[row_offset : row_offset + rows] = (A @ x.astype(np.float32)).astype(bf16)


def matvec_kernel(rows, k, out_rows) -> Kernel:
    model = functools.partial(matvec_model, rows=rows, k=k)
    args = (Memref(rows * k, "bf16"), Memref(k, "bf16"), Memref(out_rows, "bf16"), Scalar("i32"))
    flags = (f"-DDIM_M={rows}", f"-DDIM_K={k}")
    return Kernel("iron_matvec_bf16", args, OURS, model, flags)


# ---- decode attention ---------------------------------------------------------------------


def scores_model(q, keys, scores, first, valid, *, heads, groups, head_dim, positions, scale):
    """One chunk of `positions` cache rows starting at position `first`:
    scores[h, p] = bf16(float32(q[h] . keys[p, h // (heads/groups)]) * scale)
    for first + p < valid, else 0; rows at or past `valid` are never read."""
    live = max(0, min(positions, valid - first))
    per_group = heads // groups
    out = scores.reshape(heads, positions)
    out[:] = 0
    if live:
        k = keys.reshape(positions, groups, head_dim)[:live].astype(np.float32)
        qf = q.reshape(groups, per_group, head_dim).astype(np.float32)
        dots = np.einsum("gqd,pgd->gqp", qf, k, dtype=np.float32)
        out[:, :live] = (dots.reshape(heads, live) * np.float32(scale)).astype(bf16)


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
    flags = (
        f"-DHEADS={heads}",
        f"-DGROUPS={groups}",
        f"-DHEAD_DIM={head_dim}",
        f"-DPOSITIONS={positions}",
    )
    return Kernel("iron_gqa_scores_bf16", args, OURS, model, flags)


def context_model(weights, values, acc, first, valid, *, heads, groups, head_dim, positions):
    """acc[h] += sum over the chunk's positions p with first + p < valid of
    weights[h, p] * values[p, h // (heads/groups)], in float32; neither
    weights nor values at or past `valid` are read."""
    live = max(0, min(positions, valid - first))
    if not live:
        return
    per_group = heads // groups
    w = weights.reshape(groups, per_group, positions)[:, :, :live].astype(np.float32)
    v = values.reshape(positions, groups, head_dim)[:live].astype(np.float32)
    total = acc.reshape(groups, per_group, head_dim)
    total += np.einsum("gqp,pgd->gqd", w, v, dtype=np.float32)


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
    flags = (
        f"-DHEADS={heads}",
        f"-DGROUPS={groups}",
        f"-DHEAD_DIM={head_dim}",
        f"-DPOSITIONS={positions}",
    )
    return Kernel("iron_gqa_context_bf16", args, OURS, model, flags)


def zero_f32_kernel(count) -> Kernel:
    return Kernel("iron_zero_f32", (Memref(count, "f32"), Scalar("i32")), OURS, zero_first)


def zero_first(buffer, count):
    buffer[:count] = 0


# ---- prefill attention (MHA), one 64-row query block against one 64-row key block --------


def block_scores_model(q, k, s, q_block, k_block, *, rows, head_dim, seq_len, causal, scale):
    """S = Q K^T * scale in float32; keys at or past seq_len, and with
    `causal` keys after the query, are -inf."""
    Q = q.reshape(rows, head_dim).astype(np.float32)
    K = k.reshape(rows, head_dim).astype(np.float32)
    S = (Q @ K.T) * np.float32(scale)
    query = q_block * rows + np.arange(rows)[:, None]
    key = k_block * rows + np.arange(rows)[None, :]
    masked = (key >= seq_len) | ((key > query) if causal else False)
    s[:] = np.where(masked, np.float32(-np.inf), S).ravel()


def online_softmax_model(s, p, alpha, state, k_block, *, rows):
    """One key block of a running softmax: with m the running row maximum
    and l the running sum (`state`, reset at key block 0), m' = max(m,
    max S), alpha = exp(m - m'), E = exp(S - m'), l' = l alpha + sum E;
    P = E rounded to bf16 for the product with V."""
    S = s.reshape(rows, rows)
    m, total = state[:rows], state[rows:]
    if k_block == 0:
        m[:], total[:] = -np.inf, 0
    top = np.maximum(m, S.max(axis=1))
    safe = np.where(np.isfinite(top), top, np.float32(0))
    scale = np.exp(m - safe).astype(np.float32)
    E = np.exp(S - safe[:, None]).astype(np.float32)
    total[:] = total * scale + E.sum(axis=1, dtype=np.float32)
    m[:] = top
    alpha[:] = scale
    p[:] = E.astype(bf16).ravel()


def softmax_total_model(state, total, *, rows):
    total[:] = state[rows:]


def block_context_model(p, alpha, v, acc, k_block, *, rows, head_dim):
    """acc = acc * alpha + P V in float32 (acc reset at key block 0)."""
    out = acc.reshape(rows, head_dim)
    if k_block == 0:
        out[:] = 0
    out *= alpha[:, None]
    out += p.reshape(rows, rows).astype(np.float32) @ v.reshape(rows, head_dim).astype(np.float32)


def block_output_model(acc, total, o, q_block, *, rows, head_dim, seq_len):
    """O = acc / l, one rounding; query rows at or past seq_len are 0."""
    out = acc.reshape(rows, head_dim) / total[:, None]
    out[q_block * rows + np.arange(rows) >= seq_len] = 0
    o[:] = out.astype(bf16).ravel()


def mha_kernels(rows, head_dim, seq_len, causal, scale) -> dict[str, Kernel]:
    """The five kernels of one attention pipeline (ours: scalar C++)."""
    block, vector = rows * head_dim, Memref(rows, "f32")
    square = rows * rows
    i32 = Scalar("i32")
    common = {"rows": rows}
    flags = (f"-DROWS={rows}", f"-DHEAD_DIM={head_dim}", f"-DSEQ_LEN={seq_len}",
             f"-DCAUSAL={int(causal)}")  # fmt: skip
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
        role: Kernel(f"iron_mha_{role}", args, OURS, model, flags)
        for role, (args, model) in spec.items()
    }
