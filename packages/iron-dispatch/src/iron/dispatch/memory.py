"""Buffers with the NPU's memory semantics.

A `DeviceBuffer` is what XRT calls a buffer object: bytes on the device and
a host mirror. Host writes reach the device only through `to_device`, device
writes reach the host only through `from_device`, and a named range is synced
a coherence granule at a time, so a buffer that shares a granule with a
neighbour cannot be synced on its own (as on the real device). The reference
backend uses unified buffers: one set of bytes, syncs are free.

A buffer the XRT runtime uses is `attach`ed to an XRT buffer object (see
`iron.dispatch.xrt`): from then on its host bytes are the object's map, the
device's bytes are reachable only through the object's syncs, and growing it
pulls the device's contents back, allocates a larger object and pushes them.

An `Arena` is the runtime side of an `iron.alloc.ArenaPlan`: one buffer that
grows when the plan grows (contents kept, `generation` bumped so views are
rebuilt) and remembers which residents were uploaded.
"""

from __future__ import annotations

import logging

import numpy as np

from iron.alloc import align_up

log = logging.getLogger("iron.dispatch")

# 0x7FC0 repeated: NaN as bf16, float16 and float32 alike, a loud value for integers
POISON = np.frombuffer(bytes([0xC0, 0x7F]), np.uint8)


class GranuleError(ValueError):
    """A sync would touch another buffer's bytes."""


class DeviceBuffer:
    def __init__(
        self, nbytes: int, *, granule: int = 64, unified: bool = False, name: str = "buffer"
    ) -> None:
        self.name, self.granule, self.unified = name, granule, unified
        self.host = np.zeros(nbytes, np.uint8)
        self.device = self.host if unified else np.zeros(nbytes, np.uint8)
        self.regions: dict[str, tuple[int, int]] = {}
        #: offset -> bytes that stand for the buffer's from there (`map_in_place`)
        self.mapped: dict[int, np.ndarray] = {}
        self.generation = 0
        self.bo = None  # the XRT buffer object behind the device side, once attached
        self._xrt = self._xrt_device = None

    def attach(self, xrt, device) -> None:
        """Put the device side in an XRT buffer object of `device` (once per
        XRT device; a buffer shared by several loaded images keeps one)."""
        if self.unified:
            raise ValueError(f"{self.name}: a unified buffer has no device side to attach")
        if self.bo is not None and self._xrt_device is device:
            return
        self._xrt, self._xrt_device = xrt, device
        self._rebind(self.device)

    def _rebind(self, device_bytes: np.ndarray) -> None:
        """A fresh buffer object holding `device_bytes` on its device side."""
        bo = self._xrt.bo(self._xrt_device, self.nbytes)
        host = np.frombuffer(bo.map(), np.uint8)[: self.nbytes]
        host[...] = device_bytes
        bo.sync(self._xrt.TO_DEVICE, self.nbytes, 0)
        host[...] = self.host
        self.bo, self.host, self.device = bo, host, None

    @property
    def nbytes(self) -> int:
        return self.host.size

    def grow(self, nbytes: int) -> None:
        """Reallocate at `nbytes`, keeping both sides' contents."""
        if nbytes <= self.nbytes:
            return
        if self.bo is not None:  # the device's bytes move through the host
            device = np.zeros(nbytes, np.uint8)
            self.bo.sync(self._xrt.FROM_DEVICE, self.nbytes, 0)
            device[: self.nbytes] = self.host  # (the host's own writes were not synced: dropped)
            host = np.zeros(nbytes, np.uint8)
            host[: self.nbytes] = self.host
            log.info("%s grew from %d to %d bytes", self.name, self.nbytes, nbytes)
            self.host = host
            self._rebind(device)
            self.generation += 1
            return
        host = np.zeros(nbytes, np.uint8)
        for lo, hi in self._own_ranges():  # bytes held in place are not copied (nor touched)
            host[lo:hi] = self.host[lo:hi]
        if not self.unified:
            device = np.zeros(nbytes, np.uint8)
            device[: self.nbytes] = self.device
        log.info("%s grew from %d to %d bytes", self.name, self.nbytes, nbytes)
        self.host = host
        self.device = host if self.unified else device
        self.generation += 1

    # ---- bytes held in place ----

    def map_in_place(self, offset: int, array: np.ndarray) -> None:
        """From now on the bytes at `offset` are `array`'s own (C-contiguous;
        read-only is fine: a weight read where it lies, such as a checkpoint's
        mapping), not a copy in this buffer; views are rebuilt. Unified only:
        a device side would never see them."""
        if not self.unified:
            raise ValueError(f"{self.name}: only a unified buffer can hold bytes in place")
        if not array.flags.c_contiguous:
            raise ValueError(f"{self.name}: bytes held in place must be C-contiguous")
        self.mapped[offset] = array.reshape(-1).view(np.uint8)
        self.generation += 1

    def unmap(self, offset: int) -> None:
        """The bytes at `offset` are the buffer's own again (a copy is due)."""
        if self.mapped.pop(offset, None) is not None:
            self.generation += 1

    def _own_ranges(self) -> list[tuple[int, int]]:
        """The byte ranges this buffer holds itself: all but those held in place."""
        ranges, at = [], 0
        for start, held in sorted(self.mapped.items()):
            ranges.append((at, start))
            at = start + held.size
        ranges.append((at, self.nbytes))
        return [(lo, hi) for lo, hi in ranges if hi > lo]

    def typed(self, offset: int, nbytes: int, dtype, shape) -> np.ndarray:
        """A typed view of `nbytes` at `offset` of the device side: of the
        bytes held in place when they cover the range."""
        for start, held in self.mapped.items():
            if start <= offset and offset + nbytes <= start + held.size:
                return view(held, offset - start, nbytes, dtype, shape)
        return view(self.device, offset, nbytes, dtype, shape)

    # ---- named ranges ----

    def register(self, name: str, offset: int, nbytes: int) -> None:
        self.regions[name] = (offset, nbytes)

    def granules(self, name: str) -> tuple[int, int]:
        """The granule-aligned byte range a sync of `name` touches; refused
        if it holds bytes of another registered buffer."""
        offset, nbytes = self.regions[name]
        lo = offset // self.granule * self.granule
        hi = min(align_up(offset + nbytes, self.granule), self.nbytes)
        for other, (o, n) in self.regions.items():
            if other != name and n and o < hi and lo < o + n:
                raise GranuleError(
                    f"{self.name}: {name!r} [{offset}, {offset + nbytes}) shares a {self.granule}-byte "
                    f"coherence granule with {other!r} [{o}, {o + n}); it cannot be synced on its own "
                    f"(align buffers to the granule)"
                )
        return lo, hi

    def sync_to_device(self, name: str | None = None) -> None:
        if not self.unified:
            lo, hi = self.granules(name) if name else (0, self.nbytes)
            if self.bo is not None:
                if hi > lo:
                    self.bo.sync(self._xrt.TO_DEVICE, hi - lo, lo)
            else:
                self.device[lo:hi] = self.host[lo:hi]

    def sync_from_device(self, name: str | None = None) -> None:
        if not self.unified:
            lo, hi = self.granules(name) if name else (0, self.nbytes)
            if self.bo is not None:
                if hi > lo:
                    self.bo.sync(self._xrt.FROM_DEVICE, hi - lo, lo)
            else:
                self.host[lo:hi] = self.device[lo:hi]

    def poison(self, ranges) -> None:
        """Fill byte ranges of device memory with NaN bytes (through the host
        and a sync where the device side is a buffer object: ranges are whole
        granules of bytes no one else owns, as the layout aligns them)."""
        for offset, nbytes in ranges:
            if self.bo is not None:
                self.host[offset : offset + nbytes] = np.resize(POISON, nbytes)
                self.bo.sync(self._xrt.TO_DEVICE, nbytes, offset)
            else:
                self.device[offset : offset + nbytes] = np.resize(POISON, nbytes)


def view(memory: np.ndarray, offset: int, nbytes: int, dtype, shape) -> np.ndarray:
    """A typed view of `nbytes` at `offset` of a byte array."""
    return memory[offset : offset + nbytes].view(dtype).reshape(shape)


class Arena:
    """The buffer behind an `ArenaPlan`, shared by every version of a graph."""

    def __init__(self, plan, *, granule: int, unified: bool, name: str = "arena") -> None:
        self.plan = plan
        self.buffer = DeviceBuffer(0, granule=granule, unified=unified, name=name)
        self.loaded: set = set()

    @property
    def generation(self) -> int:
        return self.buffer.generation

    def flush(self, name: str) -> None:
        """Push a resident's host bytes to the device: the only way a host
        write (an upload, a state reset) reaches a run."""
        self.buffer.sync_to_device(name)

    def ensure(self) -> DeviceBuffer:
        """The buffer, grown to the plan's current size."""
        self.buffer.grow(self.plan.size)
        return self.buffer
