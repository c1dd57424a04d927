"""NPU descriptions: everything a shape rule, a tunable or a planner may ask
of the hardware, with no hardware present. A `Device` is a value, never a
handle; two descriptions of the same hardware compare equal.

Numbers come from mlir-aie's target model (AIETargetModel.h/.cpp, the
AIEX shim-BD verifiers) and the amdxdna driver; each field cites its source.
"""

from __future__ import annotations

import attrs


def _positive(instance, attribute, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Device.{attribute.name} must be a positive int, got {value!r}")


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
    #: memtile data memory: 0x80000 (`getMemTileSize`)
    memtile_bytes: int = 512 * 1024
    #: core data memory: 0x10000, 4 banks (`getLocalMemorySize`)
    core_bytes: int = 64 * 1024
    #: shim-mux DMA channels per direction per column: 2 MM2S + 2 S2MM
    #: (`getNumSourceShimMuxConnections`)
    shim_dma_channels: int = 2
    #: buffer descriptors per shim tile (`getNumBDs` for shim tiles)
    bd_ids_per_shim: int = 16
    #: hardware start-queue depth per shim DMA channel (`Task_Queue_Size`)
    task_queue_depth: int = 4
    #: passes of one BD: the 8-bit repeat_count field holds actual-1, so 1..256
    #: (`NpuPushQueueOp::verify`)
    max_repeat_count: int = 256
    #: lock semaphores count to 0x3F (`getMaxLockValue`, `SetLockOp::verify`)
    max_lock_value: int = 63
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
    def key(self) -> str:
        """Identity text for cache keys: what makes two descriptions compile alike."""
        return f"{self.name}:{self.arch}:{self.columns}x{self.compute_rows}"

    def shim_columns(self, streams: int, channels: int = 1, replicated: int = 0) -> int:
        """Most columns an array may use when each column moves `streams`
        streams (the larger of its inputs and outputs) on `channels`
        channels each, plus `replicated` streams shared by all columns."""
        budget = self.shim_dma_limit - replicated * channels
        return max(1, min(self.columns, budget // max(1, streams * channels)))

    def with_columns(self, columns: int | None) -> Device:
        return (
            self
            if columns is None or columns == self.columns
            else attrs.evolve(self, columns=columns)
        )

    @classmethod
    def from_name(cls, name: str, columns: int | None = None) -> Device:
        """The registered device `name` at `columns` width (full width by default)."""
        from iron.core import registry

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
