"""NPU descriptions: everything a shape rule, a tunable or a planner may ask
of the hardware, with no hardware present. A `Device` is a value, never a
handle; two descriptions of the same hardware compare equal.

Numbers come from mlir-aie's target model (AIETargetModel.h/.cpp, the
AIEX shim-BD verifiers) and the amdxdna driver; each field cites its source.
"""

from __future__ import annotations

import attrs

from iron.core import registry


def _positive(instance, attribute, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Device.{attribute.name} must be a positive int, got {value!r}")


TILE_KINDS = ("shim", "memtile", "core")


@attrs.frozen
class TileLimits:
    """The resources of one kind of tile, read off a `Device` with
    `device.limits(kind)`: what a design's checker measures a tile against."""

    kind: str  # shim | memtile | core
    memory_bytes: int  # data memory (0 on a shim tile: it moves DDR, stores nothing)
    banks: int
    locks: int
    bds: int  # buffer descriptors
    dma_channels: int  # per direction (S2MM in, MM2S out)
    bd_dims: int  # address dimensions of one BD
    bd_words: int  # longest BD transfer, in 32-bit words
    wrap_bits: int
    stride_bits: int

    @property
    def max_wrap(self) -> int:
        """Largest size of one BD dimension: the wrap field holds it as is."""
        return 2**self.wrap_bits - 1

    @property
    def max_stride(self) -> int:
        """Largest stride, in 32-bit words: the step field holds stride - 1."""
        return 2**self.stride_bits


@attrs.frozen
class Device:
    """One NPU generation at a chosen width (`columns`).

    Build one with `Device.from_name("npu2")` or `Device.from_name("npu1",
    columns=2)`; plugins may register further generations.
    """

    name: str
    #: "aie2" (npu1) or "aie2p" (npu2): `getTargetArch`; selects the kernel tree
    arch: str
    #: usable compute columns at full width (npu1: 4, the driver's first_col = 1
    #: hides physical column 0; npu2: 8) -- AIEDialect.cpp device map
    max_columns: int = attrs.field(validator=_positive)
    #: columns this description uses (1..max_columns), like mlir-aie's npu2_4col
    columns: int
    #: products that carry this generation (xdna-driver npu1/npu4 regs)
    products: str = ""
    #: core rows per column: 6 rows = shim, memtile, 4 cores (`rows()`, `getTileType`)
    compute_rows: int = 4

    # ---- core tiles (rows 2-5) ----
    #: core data memory: 0x10000 (`getLocalMemorySize`) in 4 banks (`getNumBanks`)
    core_bytes: int = 64 * 1024
    core_banks: int = 4
    #: default core stack: 0x400 (`getDefaultCoreStackSize`)
    core_stack_bytes: int = 1024
    #: locks (`getNumLocks`) and buffer descriptors (`getNumBDs`) per core tile
    core_locks: int = 16
    core_bds: int = 16
    #: tile DMA channels per direction: 2 S2MM + 2 MM2S
    #: (`getNumDestSwitchboxConnections` / `getNumSourceSwitchboxConnections`, DMA port)
    core_dma_channels: int = 2
    #: BD dimensions (`getBDMaxDims`), length in 32-bit words (`getDmaBdMaxLen`: 2^14-1),
    #: wrap and stride field widths (`getDmaBdWrapBits`, `getDmaBdStepBits`)
    core_bd_dims: int = 3
    core_bd_words: int = 2**14 - 1
    core_wrap_bits: int = 8
    core_stride_bits: int = 13

    # ---- memtiles (row 1) ----
    #: memtile data memory: 0x80000 (`getMemTileSize`) in 8 banks (`getNumBanks`)
    memtile_bytes: int = 512 * 1024
    memtile_banks: int = 8
    #: locks per memtile (`getNumLocks`); 48 BDs, even channels use BDs 0-23 and odd
    #: channels 24-47 (`getNumBDs`, `isBdChannelAccessible`)
    memtile_locks: int = 64
    memtile_bds: int = 48
    #: memtile DMA channels per direction: 6 S2MM + 6 MM2S (switchbox DMA ports)
    memtile_dma_channels: int = 6
    #: BD dimensions 4, length 2^17-1 words, wrap 10 bits, stride 17 bits
    #: (`getBDMaxDims`, `getDmaBdMaxLen`, `getDmaBdWrapBits`, `getDmaBdStepBits`)
    memtile_bd_dims: int = 4
    memtile_bd_words: int = 2**17 - 1
    memtile_wrap_bits: int = 10
    memtile_stride_bits: int = 17

    # ---- shim tiles (row 0) ----
    #: shim-mux DMA channels per direction per column: 2 MM2S + 2 S2MM
    #: (`getNumSourceShimMuxConnections`)
    shim_dma_channels: int = 2
    #: locks and buffer descriptors per shim tile (`getNumLocks`, `getNumBDs`)
    shim_locks: int = 16
    bd_ids_per_shim: int = 16
    #: shim BD dimensions 3 plus the iteration dimension; the length field is 32 bits
    #: (`getBDMaxDims`, `ShimBdFieldWidths` in BdLowering.h); wraps d0/d1 10 bits,
    #: strides 20 bits (`verifyStridesWraps` in AIEXDialect.cpp)
    shim_bd_dims: int = 3
    shim_bd_words: int = 2**32 - 1
    shim_wrap_bits: int = 10
    shim_stride_bits: int = 20
    #: the iteration (highest) dimension of a runtime transfer: 1..64, a 6-bit
    #: field (`verifyStridesWraps`, `Size 3`)
    shim_max_iterations: int = 64

    # ---- the array ----
    #: hardware start-queue depth per shim DMA channel (`Task_Queue_Size`)
    task_queue_depth: int = 4
    #: passes of one BD: the 8-bit repeat_count field holds actual-1, so 1..256
    #: (`NpuPushQueueOp::verify`); also `ObjectFifo.set_iter_count`'s range
    max_repeat_count: int = 256
    #: lock semaphores count to 0x3F (`getMaxLockValue`, `SetLockOp::verify`)
    max_lock_value: int = 63
    #: DMA address granularity: transfer lengths and offsets are whole 32-bit
    #: words (`getAddressGenGranularity`; `NpuDmaMemcpyNdOp::verify`)
    dma_granule: int = 4
    #: host/device sync granularity, also the shim's smallest DDR burst; two
    #: buffers sharing one cannot be synced independently (tensor_class)
    coherence_granule: int = 64
    #: block-float formats (v8bfp16ebs8, v16bfp16ebs16): AIE2P only
    #: (`isSupportedBlockFormat`)
    block_float: bool = False

    def __attrs_post_init__(self) -> None:
        valid = range(1, self.max_columns + 1)
        if type(self.columns) is not int or self.columns not in valid:
            raise ValueError(
                f"{self.name} has {self.max_columns} usable columns; columns={self.columns!r} "
                f"is not one of the valid choices: {', '.join(map(str, valid))}"
            )

    @property
    def shim_dma_limit(self) -> int:
        """Total shim DMA streams per direction at this width: the budget
        every stream of every column draws from (`get_shim_dma_limit`)."""
        return self.columns * self.shim_dma_channels

    @property
    def cores(self) -> int:
        return self.columns * self.compute_rows

    @property
    def rows(self) -> int:
        """Rows of the array: one shim row, one memtile row, the core rows."""
        return self.compute_rows + 2

    def tile_kind(self, row: int) -> str:
        """ "shim" (row 0), "memtile" (row 1) or "core" (rows 2 and up)."""
        if not 0 <= row < self.rows:
            raise ValueError(f"{self.name} has rows 0..{self.rows - 1}; row {row} does not exist")
        return TILE_KINDS[min(row, 2)]

    def limits(self, kind: str) -> TileLimits:
        """The resources of a `kind` tile ("shim", "memtile" or "core")."""
        if kind == "core":
            return TileLimits(
                "core", self.core_bytes, self.core_banks, self.core_locks, self.core_bds,
                self.core_dma_channels, self.core_bd_dims, self.core_bd_words,
                self.core_wrap_bits, self.core_stride_bits,
            )  # fmt: skip
        if kind == "memtile":
            return TileLimits(
                "memtile", self.memtile_bytes, self.memtile_banks, self.memtile_locks,
                self.memtile_bds, self.memtile_dma_channels, self.memtile_bd_dims,
                self.memtile_bd_words, self.memtile_wrap_bits, self.memtile_stride_bits,
            )  # fmt: skip
        if kind == "shim":
            return TileLimits(
                "shim", 0, 0, self.shim_locks, self.bd_ids_per_shim, self.shim_dma_channels,
                self.shim_bd_dims, self.shim_bd_words, self.shim_wrap_bits,
                self.shim_stride_bits,
            )  # fmt: skip
        raise ValueError(f"unknown tile kind {kind!r}; valid choices: {', '.join(TILE_KINDS)}")

    @property
    def key(self) -> str:
        """Identity text for cache keys: what makes two descriptions compile alike."""
        return f"{self.name}:{self.arch}:{self.columns}x{self.compute_rows}"

    def shim_columns(self, streams: int, channels: int = 1, replicated: int = 0) -> int:
        """Most columns an array may use when each column moves `streams`
        streams (the larger of its inputs and outputs) on `channels`
        channels each, plus `replicated` streams shared by all columns."""
        budget = self.shim_dma_limit - replicated * channels
        return max(1, min(self.columns, budget // max(1, streams * channels)))

    def shim_budget_problem(
        self, columns: int, streams: int, channels: int = 1, replicated: int = 0
    ) -> str | None:
        """Why `columns` columns, each moving `streams` streams on `channels`
        channels (plus `replicated` streams shared by every column), do not
        fit this device's columns and its shim DMA budget; None when they do.
        A family's validation raises it against the parameter it blames."""
        if columns > self.columns:
            return f"at most the {self.columns} columns of {self.name}"
        needed = (columns * streams + replicated) * channels
        if needed <= self.shim_dma_limit:
            return None
        shared = f" + {replicated} shared" if replicated else ""
        return (
            f"{needed} shim DMA streams (({columns} columns x {streams} streams{shared}) x "
            f"{channels} channels) exceed the {self.shim_dma_limit} of {self.name} at "
            f"{self.columns} columns"
        )

    def with_columns(self, columns: int | None) -> Device:
        return (
            self
            if columns is None or columns == self.columns
            else attrs.evolve(self, columns=columns)
        )

    @classmethod
    def from_name(cls, name: str, columns: int | None = None) -> Device:
        """The registered device `name` at `columns` width (full width by default)."""
        devices = registry.devices()
        if name not in devices:
            raise ValueError(
                f"unknown device {name!r}; valid choices: {', '.join(sorted(devices))}"
            )
        return devices[name].with_columns(columns)

    def describe(self) -> dict:
        """Plain data for listings and JSON."""
        return {**attrs.asdict(self), "shim_dma_limit": self.shim_dma_limit}


NPU1 = Device(
    name="npu1",
    arch="aie2",
    max_columns=4,
    columns=4,
    products="Phoenix, Hawk Point",
)

NPU2 = Device(
    name="npu2",
    arch="aie2p",
    max_columns=8,
    columns=8,
    products="Strix, Strix Halo, Krackan",
    block_float=True,
)

BUILTIN_DEVICES = (NPU1, NPU2)
