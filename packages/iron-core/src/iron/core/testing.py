"""IRON's pytest plugin (entry point ``pytest11``), active wherever iron-core
is installed.

- fixtures ``device`` (each registered device in turn: npu1, npu2 and any
  a plugin adds), ``device_npu1``, ``device_npu2``;
- markers ``npu`` (needs an NPU and pyxrt) and ``toolchain`` (needs
  mlir-aie): such tests skip with the reason where that is absent, and the
  probe runs only for tests that carry the marker;
- marker ``slow`` (the default sessions deselect it; ``nox -s slow`` runs it);
- ``conformance_params(family)`` and ``check_conformance``: the checks every
  operator family runs over its catalog::

      @pytest.mark.parametrize("item", conformance_params("eltwise"))
      def test_conformance(item):
          check_conformance(item)
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, distribution

import pytest

from iron.core import environment
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
        if os.environ.get("IRON_REQUIRE_FIXTURE_PLUGINS") == "1":
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
