"""What this host has of the NPU stack: the mlir-aie toolchain, XRT's Python
binding, and an NPU device node. Probes never import the toolchain. Each
absence is one `Probe` constant, so a test can make any host look like one
without the stack (`iron.core.testing`'s `npu_stack` fixture)."""

from __future__ import annotations

import glob
import importlib.util
from importlib.metadata import PackageNotFoundError, version

import attrs


@attrs.frozen
class Probe:
    name: str
    present: bool
    detail: str
    how_to_get: str

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}" + ("" if self.present else f" ({self.how_to_get})")


NO_MLIR_AIE = Probe(
    "mlir-aie",
    False,
    "not installed",
    "install the mlir_aie and llvm-aie wheels from the Xilinx/mlir-aie releases; "
    "they are not on PyPI",
)
NO_PYXRT = Probe(
    "pyxrt",
    False,
    "not importable",
    "install XRT with the NPU (amdxdna) plugin and source its setup.sh so pyxrt is on PYTHONPATH",
)
NO_NPU_DEVICE = Probe(
    "NPU device",
    False,
    "no /dev/accel/accel* node",
    "needs a Ryzen AI NPU with the amdxdna driver loaded "
    "(Linux 6.14+ or the out-of-tree xdna-driver)",
)


def mlir_aie() -> Probe:
    """The mlir-aie wheel (`mlir_aie`, importing as `aie`): lowering and aiecc."""
    if importlib.util.find_spec("aie") is None:
        return NO_MLIR_AIE
    try:
        found = version("mlir_aie")
    except PackageNotFoundError:
        found = "version unknown"
    return Probe("mlir-aie", True, found, "")


def pyxrt() -> Probe:
    """XRT's Python binding, which loads images and runs them on the NPU."""
    if importlib.util.find_spec("pyxrt") is None:
        return NO_PYXRT
    return Probe("pyxrt", True, "importable", "")


def npu_device() -> Probe:
    """An accelerator node from the amdxdna driver."""
    nodes = sorted(glob.glob("/dev/accel/accel*"))
    if not nodes:
        return NO_NPU_DEVICE
    return Probe("NPU device", True, ", ".join(nodes), "")


def npu_ready() -> bool:
    """True when a program could run on an NPU here."""
    return pyxrt().present and npu_device().present


def toolchain_ready() -> bool:
    """True when designs could be lowered and compiled here."""
    return mlir_aie().present
