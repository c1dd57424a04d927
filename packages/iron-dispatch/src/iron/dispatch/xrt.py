"""The XRT seam: exactly the calls IRON's runtime makes on a full ELF, named
as pyxrt names them, and the pyxrt implementation (imported lazily).

The calls (mlir-aie's full-ELF host flow, see the dispatch README):

    device = xrt.device(0)
    elf = xrt.elf(path)
    context = xrt.hw_context(device, elf)
    kernel = xrt.kernel(context, "main:sequence")   # pyxrt.ext.kernel
    run = xrt.run(kernel)
    bo = xrt.bo(device, nbytes)                     # host_only, group 0
    bo.map()                                        # the host's bytes
    bo.sync(xrt.TO_DEVICE, size, offset)            # or xrt.FROM_DEVICE
    run.set_arg(index, bo)
    run.get_ctrl_scratchpad_bo()                    # per-call parameters
    run.start(); run.wait()

An xclbin image (separate and compare dispatch) as pyxrt drives one
(mlir-aie's test benches: register, context from the uuid, a kernel per
device block, the instruction buffer and its length in words first):

    xclbin = xrt.xclbin(path)
    xrt.register_xclbin(device, xclbin)
    context = xrt.hw_context(device, xclbin.get_uuid())
    kernel = xrt.xclbin_kernel(context, name)        # pyxrt.kernel
    insts = xrt.instruction_bo(device, nbytes, kernel)  # cacheable, group_id(1)
    kernel(3, insts, words, *bos).wait()

`iron.dispatch.sim_xrt` is the other implementation: a simulated device
that runs the programs' designs.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from iron.core import environment

#: the sync directions, as pyxrt.xclBOSyncDirection spells them
TO_DEVICE = "XCL_BO_SYNC_BO_TO_DEVICE"
FROM_DEVICE = "XCL_BO_SYNC_BO_FROM_DEVICE"


class BufferObject(Protocol):
    def map(self) -> Any:
        """The host's bytes (writable, buffer protocol)."""

    def sync(self, direction: str, size: int, offset: int) -> None:
        """Move `size` bytes at `offset` between the host and the device."""

    def size(self) -> int: ...


class Run(Protocol):
    def set_arg(self, index: int, bo: BufferObject) -> None: ...

    def get_ctrl_scratchpad_bo(self) -> BufferObject: ...

    def start(self) -> None: ...

    def wait(self) -> Any: ...


class Xrt(Protocol):
    """What the runtime needs of XRT; `name` says which XRT it is."""

    name: str
    TO_DEVICE: str
    FROM_DEVICE: str

    def device(self, index: int = 0) -> Any: ...

    def elf(self, path: str) -> Any: ...

    def hw_context(self, device: Any, elf: Any) -> Any: ...

    def kernel(self, context: Any, name: str) -> Any: ...

    def run(self, kernel: Any) -> Run: ...

    def bo(self, device: Any, nbytes: int) -> BufferObject: ...

    def xclbin(self, path: str) -> Any: ...

    def register_xclbin(self, device: Any, xclbin: Any) -> None: ...

    def xclbin_kernel(self, context: Any, name: str) -> Any: ...

    def instruction_bo(self, device: Any, nbytes: int, kernel: Any) -> BufferObject: ...


class PyXrt:
    """The seam over pyxrt. Importing it happens on first use, so this class
    exists (and the npu backend can say what is missing) where pyxrt does not."""

    name = "pyxrt"

    def __init__(self) -> None:
        probe = environment.pyxrt()
        if not probe.present:
            raise ImportError(f"pyxrt is missing ({probe.detail}): {probe.how_to_get}")
        self._x = importlib.import_module("pyxrt")
        directions = self._x.xclBOSyncDirection
        self.TO_DEVICE = getattr(directions, TO_DEVICE)
        self.FROM_DEVICE = getattr(directions, FROM_DEVICE)

    def device(self, index: int = 0):
        return self._x.device(index)

    def elf(self, path: str):
        return self._x.elf(str(path))

    def hw_context(self, device, elf):
        return self._x.hw_context(device, elf)

    def kernel(self, context, name: str):
        return self._x.ext.kernel(context, name)

    def run(self, kernel):
        return self._x.run(kernel)

    def xclbin(self, path: str):
        return self._x.xclbin(str(path))

    def register_xclbin(self, device, xclbin) -> None:
        device.register_xclbin(xclbin)

    def xclbin_kernel(self, context, name: str):
        return self._x.kernel(context, name)

    def instruction_bo(self, device, nbytes: int, kernel):
        return self._x.bo(device, max(1, nbytes), self._x.bo.cacheable, kernel.group_id(1))

    def bo(self, device, nbytes: int):
        # NPU access to host buffers is not cache-coherent: every byte range
        # the device reads or writes is synced explicitly around a run
        return self._x.bo(device, max(1, nbytes), self._x.bo.host_only, 0)
