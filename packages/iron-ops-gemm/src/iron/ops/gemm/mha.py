"""MHA: fused (grouped-query) attention over a whole sequence, for prefill."""

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
    OperatorError,
    Tolerance,
    bf16,
    require,
    tunable,
)
from iron.core.numerics import finite_abs
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    LocalBuffer,
    Obj,
    ObjectFifo,
    Release,
    Tensor,
    Tile,
    Worker,
    core,
    join,
    memtile,
    shim,
    split,
)
from iron.ops.gemm.common import check_heads
from iron.ops.gemm.core_kernels import mha_kernels
from iron.ops.gemm.tiling import rounds

#: query rows per block (and key rows per block): the kernel's B_q = B_kv
BLOCK = 64
#: the only head dimension the kernel is built for
HEAD_DIM = 64
#: a memtile split feeds at most this many pipelines; more take two shims
PIPELINES_PER_SPLIT = 6
#: the columns the design pins: shims 4-7, memtiles 3-7
COLUMNS_NEEDED = 8


def padded_seq_len(seq_len: int, num_pipelines: int = 1) -> int:
    """`seq_len` rounded up to whole blocks of 64 query rows for every
    pipeline: the length of the buffers MHA reads and writes."""
    unit = BLOCK * num_pipelines
    return -(-seq_len // unit) * unit


@attrs.frozen
class MHA(Operator):
    """O = softmax(Q K^T / sqrt(d) + mask) V per query head, float32 inside,
    one rounding. Query head h reads KV head h // (num_heads /
    num_kv_heads) (contiguous groups, as Llama's repeat_kv). Buffers hold
    `seq_pad` = padded_seq_len(seq_len, num_pipelines) rows: key rows at
    or past seq_len are masked, output rows past seq_len are 0; with
    `causal`, query row i also ignores keys after i.

    Layout: Q and O are (num_heads, seq_pad, head_dim), K and V
    (num_kv_heads, seq_pad, head_dim); with `heads_interleaved` the
    sequence comes first, (seq_pad, heads, head_dim): the layout a
    projection GEMM produces, read as it is.

    npu2 only, as declared (the refusal's words are pinned by the spec
    snapshot): the design (`pipelines`) pins its shims to columns 4-7 and
    its memtiles to columns 3-7; its kernels here are scalar C++, which
    would build for aie2 too."""

    num_heads: int
    seq_len: int
    head_dim: int = HEAD_DIM
    num_kv_heads: int | None = None
    heads_interleaved: bool = False
    num_pipelines: int = tunable(1)
    causal: bool = True

    host = "iron.ops.gemm.host:mha"  # the cpu backend's kernel
    cases = (
        Case({"num_heads": 8, "seq_len": 128}),
        Case({"num_heads": 8, "seq_len": 128, "num_kv_heads": 2}),
        # padded: 100 rows become 192 (64 x 3 pipelines); sequence-major layout
        Case({"num_heads": 4, "seq_len": 100, "num_kv_heads": 2, "heads_interleaved": True,
              "num_pipelines": 3}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(num_heads, kv_heads, seq_pad, head_dim, heads_interleaved, dtype=bf16):
        def layout(heads):
            return (seq_pad, heads, head_dim) if heads_interleaved else (heads, seq_pad, head_dim)

        return [
            ArgSpec("Q", layout(num_heads), dtype, IN),
            ArgSpec("K", layout(kv_heads), dtype, IN),
            ArgSpec("V", layout(kv_heads), dtype, IN),
            ArgSpec("O", layout(num_heads), dtype, OUT),
        ]

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def seq_pad(self) -> int:
        return padded_seq_len(self.seq_len, self.num_pipelines)

    def validate(self):
        check_heads(self, "num_heads", "num_kv_heads", self.kv_heads)
        require(self, "seq_len", self.seq_len >= 1, "at least 1")
        require(
            self,
            "head_dim",
            self.head_dim == HEAD_DIM,
            f"{HEAD_DIM} only (the kernel's Q, K and V tiles are {HEAD_DIM} wide)",
        )
        pipelines = self.num_pipelines
        require(self, "num_pipelines", pipelines >= 1, "at least 1")
        require(
            self,
            "num_pipelines",
            pipelines <= PIPELINES_PER_SPLIT or pipelines % 2 == 0,
            f"even above {PIPELINES_PER_SPLIT} (a memtile split feeds at most "
            f"{PIPELINES_PER_SPLIT}; more are split over two shims)",
        )
        device = self.device
        if device is None:
            return
        if device.arch != "aie2p" or device.columns < COLUMNS_NEEDED:
            width = f" at {device.columns} columns" if device.arch == "aie2p" else ""
            raise OperatorError(
                f"MHA: device={device.name}{width}: runs on the full {COLUMNS_NEEDED}-column "
                "npu2 only (the design pins its shims to columns 4-7 and its memtiles to "
                "columns 3-7, and needs aie2p's bfp16-emulated 8x8x8 MAC)"
            )
        require(
            self,
            "num_pipelines",
            pipelines <= device.columns,
            f"at most the {device.columns} columns of {device.name} (one pipeline per column)",
        )
        rounds = self.seq_pad // (BLOCK * pipelines)
        require(
            self,
            "seq_len",
            rounds <= device.shim_max_iterations,
            f"at most {device.shim_max_iterations} rounds of query blocks per head "
            f"({device.shim_max_iterations * BLOCK * pipelines} rows at num_pipelines={pipelines}): "
            "a head's rounds are one shim pattern's iterations",
        )

    @staticmethod
    def design(num_heads, kv_heads, seq_len, seq_pad, head_dim, heads_interleaved,
               num_pipelines, causal, device) -> Design:  # fmt: skip
        """See `pipelines`."""
        return pipelines(num_heads, kv_heads, seq_len, seq_pad, head_dim, heads_interleaved,
                         num_pipelines, causal, device)  # fmt: skip

    def reference(self, Q, K, V):
        def heads_first(x):
            x = x.astype(np.float32)
            return x.transpose(1, 0, 2) if self.heads_interleaved else x

        q, k, v = heads_first(Q), heads_first(K), heads_first(V)
        n, pad, group = self.seq_len, self.seq_pad, self.num_heads // self.kv_heads
        rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
        masked = cols > rows if self.causal else np.zeros((n, n), bool)
        scale = np.float32(1 / np.sqrt(self.head_dim))
        out = np.zeros((self.num_heads, pad, self.head_dim), np.float32)
        for h in range(self.num_heads):  # one head at a time: (seq, seq) scores, not (H, ...)
            g = h // group
            scores = (q[h, :n] @ k[g, :n].T) * scale
            scores[masked] = -np.inf
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[h, :n] = (weights / weights.sum(axis=-1, keepdims=True)) @ v[g, :n]
        out = out.transpose(1, 0, 2) if self.heads_interleaved else out
        return np.ascontiguousarray(out).astype(bf16)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """IRON's device check of this kernel: relative 0.04, absolute 0.15
        for values in [0, 4), and 0.5% of the elements may miss. Outputs are
        weighted means of rows of V, so the absolute part scales with V:
        0.0375 x max|V| when `inputs` (Q, K, V) are given."""
        scale = 4.0 if inputs is None else float(finite_abs(inputs[2]).max(initial=0.0))
        return Tolerance.relative(0.04, atol=0.15 / 4.0 * scale, max_mismatch_frac=0.005)


def pipelines(heads, kv_heads, seq_len, seq_pad, head_dim, interleaved, count, causal, device):
    """`count` three-core pipelines, pipeline p in column p (rows 2, 3, 4:
    neighbours, so scores and weights pass through shared memory, no DMA):
    a scores core (Q K^T of one 64-row query block against each 64-row key
    block, causally masked), a softmax core (a running max and sum over the
    key blocks), a context core (the rescaled sum of weights x V, divided by
    the sum once at the end, one rounding).

    Head by head, pipeline p takes query blocks p, p + count, ...; every
    pipeline works on the same head at once, so the head's KV group is read
    from DDR once per round of query blocks and broadcast to all of them:
    K from shim 6 to the scores cores, V from shim 6 to the context cores.
    Query blocks enter at shim 4 (and 5 above 6 pipelines) and are split at
    memtile 4 (and 5) one block per pipeline; output blocks are joined at
    memtile 7 (and 3) and leave at shim 7 (and 5). Key blocks past a query
    block (causal) still stream past its cores: masked, they add nothing."""
    block, blocks = BLOCK, seq_pad // BLOCK
    rounds_per_head = blocks // count
    group = heads // kv_heads
    scale = np.float32(1 / np.sqrt(head_dim))
    kernels = mha_kernels(block, head_dim, seq_len, causal, scale)
    halves = [range(count)] if count <= PIPELINES_PER_SPLIT else [
        range(count // 2), range(count // 2, count)
    ]  # fmt: skip
    q_columns, o_columns, o_shims = (4, 5), (7, 3), (7, 5)
    fifos, links, workers = [], [], []
    blocked_rows = block * head_dim
    kv_ends = {"K": [], "V": []}
    for p in range(count):
        qk, sm, pv = f"scores_{p}", f"softmax_{p}", f"context_{p}"
        kv_ends["K"].append(core(qk))
        kv_ends["V"].append(core(pv))
        fifos += [
            ObjectFifo(f"S{p}", block * block, "f32", core(qk), (core(sm),)),
            ObjectFifo(f"P{p}", block * block, "bf16", core(sm), (core(pv),)),
            ObjectFifo(f"alpha{p}", block, "f32", core(sm), (core(pv),)),
            ObjectFifo(f"total{p}", block, "f32", core(sm), (core(pv),), depth=1),
        ]
        q, o = f"Q{p}", f"O{p}"
        score_body, softmax_body, context_body = [Acquire(q)], [], []
        for r in range(rounds_per_head):
            q_block = r * count + p
            if r:
                score_body.append(Acquire(q))
            for k_block in range(blocks):
                s = Call(kernels["scores"], (Obj(q), Obj("K"), Obj(f"S{p}"), q_block, k_block))
                score_body += [Acquire("K"), Acquire(f"S{p}"), s, Release("K"), Release(f"S{p}")]
                softmax = Call(kernels["softmax"], (Obj(f"S{p}"), Obj(f"P{p}"), Obj(f"alpha{p}"),
                                                     Buf("state"), k_block))  # fmt: skip
                softmax_body += [Acquire(f"S{p}"), Acquire(f"P{p}"), Acquire(f"alpha{p}"), softmax,
                                 Release(f"S{p}"), Release(f"P{p}"), Release(f"alpha{p}")]  # fmt: skip
                context = Call(kernels["context"], (Obj(f"P{p}"), Obj(f"alpha{p}"), Obj("V"),
                                                     Buf("acc"), k_block))  # fmt: skip
                context_body += [Acquire(f"P{p}"), Acquire(f"alpha{p}"), Acquire("V"), context,
                                 Release(f"P{p}"), Release(f"alpha{p}"), Release("V")]  # fmt: skip
            score_body.append(Release(q))
            total = Call(kernels["total"], (Buf("state"), Obj(f"total{p}")))
            softmax_body += [Acquire(f"total{p}"), total, Release(f"total{p}")]
            out = Call(kernels["output"], (Buf("acc"), Obj(f"total{p}"), Obj(o), q_block))
            context_body += [
                Acquire(f"total{p}"),
                Acquire(o),
                out,
                Release(f"total{p}"),
                Release(o),
            ]
        # one head per pass of each body: every head reads the same blocks
        workers += [
            Worker(qk, tuple(score_body), tile=Tile(p, 2)),
            Worker(sm, tuple(softmax_body), tile=Tile(p, 3),
                   buffers=(LocalBuffer("state", 2 * block, "f32"),)),
            Worker(pv, tuple(context_body), tile=Tile(p, 4),
                   buffers=(LocalBuffer("acc", blocked_rows, "f32"),)),
        ]  # fmt: skip
    for half, lanes in enumerate(halves):
        lanes = list(lanes)
        split_name, join_name = f"q_split{half}", f"o_join{half}"
        fifos += [
            ObjectFifo(f"Q_{half}", len(lanes) * blocked_rows, "bf16", shim(q_columns[half]),
                       (memtile(split_name),)),
            ObjectFifo(f"O_{half}", len(lanes) * blocked_rows, "bf16", memtile(join_name),
                       (shim(o_shims[half]),)),
        ]  # fmt: skip
        fifos += [ObjectFifo(f"Q{p}", blocked_rows, "bf16", memtile(split_name),
                             (core(f"scores_{p}", depth=1),)) for p in lanes]  # fmt: skip
        fifos += [ObjectFifo(f"O{p}", blocked_rows, "bf16", core(f"context_{p}"),
                             (memtile(join_name),), depth=1) for p in lanes]  # fmt: skip
        offsets = [i * blocked_rows for i in range(len(lanes))]
        links += [
            split(split_name, f"Q_{half}", [f"Q{p}" for p in lanes], offsets,
                  tile=Tile(q_columns[half], 1)),
            join(join_name, [f"O{p}" for p in lanes], f"O_{half}", offsets,
                 tile=Tile(o_columns[half], 1)),
        ]  # fmt: skip
    fifos += [
        ObjectFifo("K", blocked_rows, "bf16", shim(6), tuple(kv_ends["K"])),
        ObjectFifo("V", blocked_rows, "bf16", shim(6), tuple(kv_ends["V"])),
    ]

    def rows_of(tensor_heads, head, first, count_rows):
        """Rows first.. of `head`, count_rows per round of query blocks."""
        row = tensor_heads * head_dim if interleaved else head_dim
        start = (
            head * head_dim + first * row if interleaved else (head * seq_pad + first) * head_dim
        )
        return TAP(start, (rounds_per_head, count_rows, head_dim), (count * block * row, row, 1))

    def whole_head(tensor_heads, head):
        """Every row of `head`, once per round of query blocks."""
        if interleaved:
            row = tensor_heads * head_dim
            return TAP(head * head_dim, (rounds_per_head, blocks, block, head_dim),
                       (0, block * row, row, 1))  # fmt: skip
        return TAP(head * seq_pad * head_dim, (rounds_per_head, 1, 1, seq_pad * head_dim),
                   (0, 0, 0, 1))  # fmt: skip

    work, shim_of = [], {"K": 6, "V": 6}
    for h in range(heads):
        tasks = [Fill("K", "K", whole_head(kv_heads, h // group)),
                 Fill("V", "V", whole_head(kv_heads, h // group))]  # fmt: skip
        for half, lanes in enumerate(halves):
            first, rows = lanes[0] * block, len(lanes) * block
            tasks += [
                Fill(f"Q_{half}", "Q", rows_of(heads, h, first, rows)),
                Drain(f"O_{half}", "O", rows_of(heads, h, first, rows)),
            ]
            shim_of |= {f"Q_{half}": q_columns[half], f"O_{half}": o_shims[half]}
        work.append(tasks)

    def layout(n):
        return (seq_pad, n, head_dim) if interleaved else (n, seq_pad, head_dim)

    return Design(
        f"mha_{heads}x{kv_heads}x{seq_pad}" + ("_interleaved" if interleaved else ""),
        device,
        (
            Tensor("Q", layout(heads), "bf16", IN),
            Tensor("K", layout(kv_heads), "bf16", IN),
            Tensor("V", layout(kv_heads), "bf16", IN),
            Tensor("O", layout(heads), "bf16", OUT),
        ),
        fifos=tuple(fifos),
        workers=tuple(workers),
        links=tuple(links),
        sequence=rounds(device, work, shim_of.__getitem__),
    )
