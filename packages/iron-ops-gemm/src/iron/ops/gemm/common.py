"""What several matrix operators share: how many columns they take within
the shim DMA budget, the matvec kernel's vector width, head grouping, the
core-memory budget, the error budgets of their product tolerances (the
tolerance itself is `iron.core.numerics.product_tolerance`), and how a
composite builds its parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import attrs

from iron.core import Device, Operator, OperatorError, per_call, require, tunable
from iron.ops.gemm.tiling import cache_chunk

# ---- columns -------------------------------------------------------------------------


def most_columns(device: Device, fits: Callable[[int], bool], streams: int = 1) -> int:
    """The most columns the device's shim DMA budget allows at `streams`
    input streams per column for which `fits(columns)` holds; 1 when none
    does (validation then says why)."""
    most = device.shim_columns(streams)
    return next((c for c in range(most, 0, -1) if fits(c)), 1)


def check_columns(op: Operator, streams: int) -> None:
    """`num_aie_columns` is at least 1 and, once the device is known, within
    its columns and its shim DMA budget at `streams` streams per column."""
    columns, device = op.num_aie_columns, op.device
    require(op, "num_aie_columns", columns is None or columns >= 1, "at least 1")
    if device is None or columns is None:
        return
    problem = device.shim_budget_problem(columns, streams)
    require(op, "num_aie_columns", problem is None, problem)


# ---- kernels -------------------------------------------------------------------------

#: lanes of the matvec and attention kernels' float32 accumulators
#: (kernels/matvec.cc, kernels/gqa.cc): a reduction is whole vectors of them
VECTOR_LANES = 16


def check_vector_reduction(op: Operator, parameter: str, k: int) -> None:
    require(
        op,
        parameter,
        k >= VECTOR_LANES and k % VECTOR_LANES == 0,
        f"a positive multiple of {VECTOR_LANES} (the matvec and attention kernels reduce it "
        f"in {VECTOR_LANES}-lane vectors)",
    )


def check_core_memory(op: Operator, parameter: str, buffers: Mapping[str, int]) -> None:
    """Once the device is known: `buffers` (name -> bytes, stack included)
    fit one core's data memory."""
    if op.device is None:
        return
    total = sum(buffers.values())
    detail = " + ".join(f"{name} {size}" for name, size in buffers.items())
    require(
        op,
        parameter,
        total <= op.device.core_bytes,
        f"one core's buffers take {total} bytes ({detail}); a core of {op.device.name} "
        f"holds {op.device.core_bytes}",
    )


# ---- attention -----------------------------------------------------------------------


def check_heads(op: Operator, heads_parameter: str, kv_parameter: str, kv_heads: int) -> None:
    """Query heads come in equal groups, one group per KV head."""
    heads = getattr(op, heads_parameter)
    require(op, heads_parameter, heads >= 1, "at least 1")
    require(
        op,
        kv_parameter,
        1 <= kv_heads <= heads and heads % kv_heads == 0,
        f"must divide the {heads} query heads (query head h reads KV head h // (heads / kv_heads))",
    )


@attrs.frozen
class CacheReader(Operator):
    """A decode step's read of a KV cache laid out (max_seq_len, kv_heads,
    head_dim): position-major, so writing one new position is one
    contiguous row of kv_heads x head_dim. Only the first `valid` positions
    are read; `valid` is per call (the context length of this step), so one
    compiled step serves every position. Query head h belongs to KV head
    h // (heads / kv_heads); each column serves whole KV groups."""

    heads: int
    kv_heads: int
    head_dim: int
    max_seq_len: int
    num_aie_columns: int | None = tunable()
    valid: int | None = per_call(None)

    def validate(self):
        check_heads(self, "heads", "kv_heads", self.kv_heads)
        check_vector_reduction(self, "head_dim", self.head_dim)
        require(
            self,
            "max_seq_len",
            self.max_seq_len >= 2 and self.max_seq_len % 2 == 0,
            "an even number of positions (a row of bf16 scores is whole 4-byte words)",
        )
        check_columns(self, streams=2)  # the cache and the queries (or weights)
        columns = self.num_aie_columns
        require(
            self,
            "kv_heads",
            columns is None or self.kv_heads % columns == 0,
            f"must split evenly over num_aie_columns={columns} (each column serves whole "
            "KV groups, reading their cache rows once)",
        )
        self.positions(self.valid)
        if self.device is not None and columns is not None:
            rows = self.heads // columns
            require(
                self,
                "heads",
                self.chunk is not None,
                f"{rows} query heads and {self.kv_heads // columns} KV groups per column "
                f"(num_aie_columns={columns}) leave no room in a core's "
                f"{self.device.core_bytes} bytes for two chunks of 2 cache positions",
            )

    #: bytes a core holds for the whole call per query head element
    #: (queries, or the accumulator and the context), besides its stack
    HELD_PER_HEAD_ELEMENT = 2

    @property
    def chunk(self) -> int | None:
        """Cache positions per object of the design (None before a device,
        or where none fit a core): two chunks in flight, each its KV groups'
        cache rows and its heads' scores (or weights), bf16."""
        if self.device is None or self.num_aie_columns is None:
            return None
        rows, groups = self.heads // self.num_aie_columns, self.kv_heads // self.num_aie_columns
        position = 2 * (groups * self.head_dim + rows) * 2
        # the designs' workers take the device's default stack
        held = rows * self.head_dim * self.HELD_PER_HEAD_ELEMENT + self.device.core_stack_bytes
        return cache_chunk(self.max_seq_len, position, held, self.device.core_bytes)

    def tune(self, device: Device):
        columns = most_columns(device, lambda c: self.kv_heads % c == 0, streams=2)
        return {"num_aie_columns": columns}

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    def check_call(self, *, valid) -> None:
        """Refuse a call's `valid` before anything runs."""
        self.positions(valid)

    def positions(self, valid) -> int:
        """The positions a call with per-call `valid` reads (None: all)."""
        if valid is None:
            return self.max_seq_len
        if not 1 <= int(valid) <= self.max_seq_len:
            raise OperatorError(
                f"{type(self).__name__}: valid={valid!r}: 1 to max_seq_len={self.max_seq_len} "
                "positions (or None for all)"
            )
        return int(valid)


# ---- references ----------------------------------------------------------------------


def row_blocks(rows: int, row_bytes: int, budget: int) -> Iterator[slice]:
    """Consecutive slices of `rows` holding at most `budget` bytes each (at
    least one row): how a reference upcasts a bf16 weight to float32 a block
    at a time, so its host memory is bounded by the block, not the weight
    (a 128256 x 2048 output head would take a 1 GiB temporary)."""
    step = max(1, budget // max(1, row_bytes))
    return (slice(start, start + step) for start in range(0, rows, step))


# ---- tolerance -----------------------------------------------------------------------

#: error per unit of product mass a device may add, for bf16 multiplied
#: into float32 accumulators across the whole reduction (aie2's GEMM, every
#: matvec): FastFlowLM-style GEMMs measure below 1e-6 on aie2...
PRECISE = 2e-4
#: ...and for bf16 emulated through bfp16 on aie2p (blocks of 8 values along
#: K sharing an exponent, 8-bit mantissas): the quantisation errors add up as
#: a random walk, so per unit of mass they shrink as 1/sqrt(K); the model of
#: mm.cc's arithmetic needs up to 0.076/sqrt(K) on standard-normal data (K =
#: 8 to 4096, benchmarks/tolerance.py). The budget: EMULATED_ROOT/sqrt(K),
#: never below EMULATED
EMULATED = 1e-2
EMULATED_ROOT = 0.1


def emulated_budget(k: int) -> float:
    """The error budget per unit of mass of a K-deep bf16 product emulated
    through bfp16."""
    return max(EMULATED, EMULATED_ROOT / k**0.5)


# ---- composites ----------------------------------------------------------------------


def resolved_parts(op: Operator, parts: Callable[[], dict[str, Operator]]) -> dict[str, Operator]:
    """A composite's parts, built and (once the composite has a device)
    resolved on its device; a refusal names the composite and the part."""
    name = type(op).__name__
    shown = ", ".join(f"{p}={getattr(op, p)!r}" for p in op.parameters())
    try:
        built = parts()
    except OperatorError as error:
        raise OperatorError(f"{name}({shown}): a part is refused: {error}") from error
    if op.device is None:
        return built
    resolved = {}
    for role, part in built.items():
        try:
            resolved[role] = part.resolve(op.device)
        except OperatorError as error:
            raise OperatorError(
                f"{name}({shown}): its {role} part is refused on {op.device.name}: {error}"
            ) from error
    return resolved


def part_designs(op: Operator) -> dict:
    """A composite's designs: each part's (resolved on the composite's
    device) that has one, by role. The composite has none of its own: its
    graph expansion records the parts, and each is compiled from its own."""
    from iron.design import design_of, has_design

    if op.device is None:
        raise OperatorError(
            f"{type(op).__name__}: resolve the composite for a device before asking its designs"
        )
    return {role: design_of(part) for role, part in op.parts().items() if has_design(type(part))}
