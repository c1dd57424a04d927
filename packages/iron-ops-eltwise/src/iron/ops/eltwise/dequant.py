"""Dequant: packed int4 codes with bf16 group scales -> bf16."""

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Operator, bf16, require, tunable
from iron.ops.eltwise.common import LINE_CAP, ROUNDED, WORD, check_array, default_array


@attrs.frozen
class Dequant(Operator):
    """y = code * scale. The input holds size / tile_size tiles; a tile is
    tile_size / 2 bytes of 4-bit codes (element 2k in the low nibble, 2k + 1
    in the high), then tile_size / group_size bf16 scales (little-endian),
    one per group of group_size consecutive elements. Codes are unsigned,
    0 to 15 (zero point 0). The product (4 x 8 significant bits) is exact in
    float32 and rounded to bf16 once."""

    size: int
    tile_size: int = 256
    group_size: int = 32
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()

    cases = (
        Case({"size": 1024, "tile_size": 256}),
        Case({"size": 8192, "tile_size": 1024, "group_size": 128, "num_aie_columns": 2}),
    )

    @staticmethod
    def arg_spec(size, tile_size, group_size):
        packed = size // 2 + size // group_size * 2
        return [ArgSpec("x", (packed,), np.uint8, IN), ArgSpec("y", (size,), bf16, OUT)]

    @property
    def tile_bytes(self) -> int:
        return self.tile_size // 2 + self.tile_size // self.group_size * 2

    def validate(self):
        require(
            self,
            "group_size",
            self.group_size >= 2 and self.group_size % 2 == 0,
            "an even number of elements (a group's codes fill whole bytes)",
        )
        require(
            self,
            "tile_size",
            self.group_size <= self.tile_size <= LINE_CAP and self.tile_size % self.group_size == 0,
            f"a multiple of group_size={self.group_size}, at most {LINE_CAP}",
        )
        require(
            self,
            "tile_size",
            self.tile_bytes % WORD == 0,
            f"a tile's {self.tile_bytes} bytes (codes and scales) must be whole 4-byte words",
        )
        require(
            self,
            "size",
            self.size >= 1 and self.size % self.tile_size == 0,
            f"a multiple of tile_size={self.tile_size}",
        )
        check_array(self, "size", self.size // self.tile_size, "tiles")

    def tune(self, device):
        return default_array(self, device, self.size // self.tile_size)

    def reference(self, x):
        tiles = x.reshape(-1, self.tile_bytes)
        packed, scale_bytes = np.split(tiles, [self.tile_size // 2], axis=1)
        codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(len(tiles), -1)
        bits = np.ascontiguousarray(scale_bytes).view("<u2").astype(np.uint16)
        scales = bits.view(bf16).astype(np.float32)
        groups = codes.reshape(len(tiles), -1, self.group_size).astype(np.float32)
        return (groups * scales[:, :, None]).reshape(self.size).astype(bf16)

    def example_inputs(self, rng):
        """Random code bytes (two codes each), and finite positive scales:
        random bytes would make NaN and infinite scales."""
        tiles = self.size // self.tile_size
        packed = rng.integers(0, 256, size=(tiles, self.tile_size // 2), dtype=np.uint8)
        scales = rng.uniform(2**-6, 2.0, size=(tiles, self.tile_size // self.group_size))
        scale_bits = scales.astype(bf16).view(np.uint16).astype("<u2")
        scale_bytes = scale_bits.view(np.uint8).reshape(tiles, -1)
        return [np.concatenate([packed, scale_bytes], axis=1).reshape(-1)]

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED

    @staticmethod
    def design(size, tile_size, group_size, tile_bytes, num_aie_columns, num_channels, device):
        """A tile's codes and its scales travel as one object, so every
        group's scale arrives with its codes."""
        from iron.ops.eltwise.line_kernels import dequant_kernel
        from iron.ops.eltwise.streaming import Stream, streaming_design

        return streaming_design(
            "dequant",
            device,
            inputs=(Stream("x", tile_bytes, "u8"),),
            output=Stream("y", tile_size),
            lines=size // tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=dequant_kernel(tile_size, tile_bytes),
            scalars=(tile_size, group_size),
        )
