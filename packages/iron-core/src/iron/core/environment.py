"""What this host has of the NPU stack: the mlir-aie toolchain, XRT's Python
binding, and an NPU device node. Probes never import the toolchain."""

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


def mlir_aie() -> Probe:
    """The mlir-aie wheel (`mlir_aie`, importing as `aie`): lowering and aiecc."""
    if importlib.util.find_spec("aie") is None:
        return Probe(
            "mlir-aie",
            False,
            "not installed",
            "install the mlir_aie and llvm-aie wheels from the Xilinx/mlir-aie releases; "
            "they are not on PyPI",
        )
    try:
        found = version("mlir_aie")
    except PackageNotFoundError:
        found = "version unknown"
    return Probe("mlir-aie", True, found, "")


def pyxrt() -> Probe:
    """XRT's Python binding, which loads images and runs them on the NPU."""
    if importlib.util.find_spec("pyxrt") is None:
        return Probe(
            "pyxrt",
            False,
            "not importable",
            "install XRT with the NPU (amdxdna) plugin and source its setup.sh "
            "so pyxrt is on PYTHONPATH",
        )
    return Probe("pyxrt", True, "importable", "")


def npu_device() -> Probe:
    """An accelerator node from the amdxdna driver."""
    nodes = sorted(glob.glob("/dev/accel/accel*"))
    if not nodes:
        return Probe(
            "NPU device",
            False,
            "no /dev/accel/accel* node",
            "needs a Ryzen AI NPU with the amdxdna driver loaded "
            "(Linux 6.14+ or the out-of-tree xdna-driver)",
        )
    return Probe("NPU device", True, ", ".join(nodes), "")


def npu_ready() -> bool:
    """True when a program could run on an NPU here."""
    return pyxrt().present and npu_device().present


def toolchain_ready() -> bool:
    """True when designs could be lowered and compiled here."""
    return mlir_aie().present
