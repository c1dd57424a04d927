"""IRON's pytest plugin (entry point ``pytest11``), active wherever iron-core
is installed; its public names are also importable from `iron.core.testing`.

- fixtures ``device`` (each registered device in turn: npu1, npu2 and any
  a plugin adds), ``device_npu1``, ``device_npu2``;
- markers ``npu`` (needs an NPU and pyxrt) and ``toolchain`` (needs
  mlir-aie): such tests skip with the reason where that is absent, and the
  probe runs only for tests that carry the marker;
- marker ``slow`` (the default sessions deselect it; ``nox -s slow`` runs it)
  and ``bench`` (a benchmark's smoke run: ``nox -s bench`` runs them);
- ``IRON_KERNEL_CACHE`` is set for the run, when unset, to where host
  kernels are cached before any test moves ``IRON_CACHE_HOME``: a test (or
  a process it starts) with a private cache still loads compiled kernels
  instead of compiling them again;
- a run started with Ctrl-C ignored (a script's background job) takes it
  again, so the processes tests start and interrupt are not deaf to it;
- fixture ``npu_stack``: ``npu_stack(present=False)`` makes the environment
  probes report this host without mlir-aie, pyxrt and an NPU (``True``: with
  them), so a test of what IRON says about either holds on any host;
- ``conformance_params(family)`` and ``check_conformance``: the checks every
  operator family runs over its catalog::

      @pytest.mark.parametrize("item", conformance_params("eltwise"))
      def test_conformance(item):
          check_conformance(item)
"""

from __future__ import annotations

import signal
from importlib.metadata import PackageNotFoundError, distribution

import pytest

from iron.core import environment, settings
from iron.core.conformance import (
    catalog_cases,
    check_importable_alone,
    device_names,
    modules_imported_by,
)
from iron.core.conformance import check as check_conformance
from iron.core.device import Device
from iron.core.snapshot import check_file

__all__ = [
    "assert_snapshot_unchanged",
    "check_conformance",
    "check_importable_alone",
    "conformance_params",
    "modules_imported_by",
    "require_distribution",
]


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "npu: needs an NPU and pyxrt; skipped with the reason where absent"
    )
    config.addinivalue_line(
        "markers", "toolchain: needs the mlir-aie toolchain; skipped with the reason where absent"
    )
    config.addinivalue_line(
        "markers", "slow: long-running; deselected by default, run by `nox -s slow`"
    )
    config.addinivalue_line(
        "markers", "bench: a benchmark's smoke run; the package sessions leave it to `nox -s bench`"
    )
    settings.pin_kernel_cache()
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started where Ctrl-C is ignored (a background job of a script,
        # nohup), every process a test starts would inherit that, and a test
        # that interrupts one would wait for nothing: they take Ctrl-C as a
        # terminal's children do
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item) -> None:
    if item.get_closest_marker("npu") and not environment.npu_ready():
        missing = [p for p in (environment.pyxrt(), environment.npu_device()) if not p.present]
        pytest.skip("needs an NPU: " + "; ".join(str(p) for p in missing))
    if item.get_closest_marker("toolchain") and not environment.toolchain_ready():
        pytest.skip(f"needs the toolchain: {environment.mlir_aie()}")


def pytest_generate_tests(metafunc) -> None:
    """A test taking `device` runs once per registered device (unless it
    parametrizes `device` itself); the registry is read only then."""
    if "device" in metafunc.fixturenames and "device" not in _parametrized(metafunc):
        metafunc.parametrize("device", device_names(), indirect=True)


def _parametrized(metafunc) -> set[str]:
    names: set[str] = set()
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs["argnames"]
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(n.strip() for n in argnames)
    return names


@pytest.fixture
def device(request) -> Device:
    return Device.from_name(request.param)


#: what the probes report in `npu_stack(present=True)`
_NPU_STACK_PRESENT = (
    environment.Probe("mlir-aie", True, "1.0 (simulated)", ""),
    environment.Probe("pyxrt", True, "importable (simulated)", ""),
    environment.Probe("NPU device", True, "/dev/accel/accel0 (simulated)", ""),
)


@pytest.fixture
def npu_stack(monkeypatch):
    """``npu_stack(present)``: the environment probes report the whole NPU
    stack absent or present for the rest of the test."""

    def set_stack(present: bool) -> None:
        absent = (environment.NO_MLIR_AIE, environment.NO_PYXRT, environment.NO_NPU_DEVICE)
        probes = _NPU_STACK_PRESENT if present else absent
        for name, probe in zip(("mlir_aie", "pyxrt", "npu_device"), probes):
            monkeypatch.setattr(environment, name, lambda probe=probe: probe)

    return set_stack


@pytest.fixture
def device_npu1() -> Device:
    return Device.from_name("npu1")


@pytest.fixture
def device_npu2() -> Device:
    return Device.from_name("npu2")


def conformance_params(family: str | None = None) -> list:
    """One pytest param per declared case of the family's operators."""
    return [pytest.param(item, id=str(item)) for item in catalog_cases(family)]


def require_distribution(name: str) -> None:
    """Skip unless distribution `name` is installed, with the reason; where
    the test session promises it (IRON_REQUIRE_FIXTURE_PLUGINS=1, as the nox
    sessions do) its absence fails instead, so it can never skip silently."""
    try:
        distribution(name)
    except PackageNotFoundError:
        reason = f"distribution {name} is not installed (the nox session installs it)"
        if settings.current().require_fixture_plugins:
            pytest.fail(reason)
        pytest.skip(reason)


def assert_snapshot_unchanged(path) -> None:
    """Fail naming every case whose resolved specs moved since the snapshot
    at `path` was written (the family and devices recorded in the file)."""
    changes = check_file(path)
    if changes:
        pytest.fail(
            f"spec snapshot {path} changed; if that is intended, regenerate it with "
            "`iron spec snapshot FILE --family FAMILY`:\n" + "\n".join(changes)
        )
