"""The wheels as a user installs them: built from the repository, iron-npu-core
and one family installed by file into a fresh venv, nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FOLDERS = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("building the wheels needs uv on PATH (the repository's one prerequisite)")
    return found


def run(*command, cwd=None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(map(str, command))}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Every package's wheel, by distribution name."""
    out = tmp_path_factory.mktemp("wheels")
    run(uv(), "build", "--all-packages", "--wheel", "--out-dir", out, "--quiet", cwd=ROOT)
    built = {}
    for wheel in out.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            built[Parser().parsestr(archive.read(metadata).decode())["Name"]] = wheel
    return built


@pytest.mark.slow
def test_every_wheel_has_its_prefixed_name_license_types_and_exact_pins(wheels):
    assert sorted(wheels) == sorted(f"iron-npu-{f.removeprefix('iron-')}" for f in FOLDERS)
    for name, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
            meta = Parser().parsestr(archive.read(metadata).decode())
            assert meta["License-Expression"] == "Apache-2.0", name
            licence = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
            assert licence and b"Apache License" in archive.read(licence[0]), name
            assert any(n.endswith("/py.typed") for n in names), name
            assert not any(n in ("iron/__init__.py", "iron/ops/__init__.py") for n in names), name
        siblings = [r for r in meta.get_all("Requires-Dist") or [] if r.startswith("iron-")]
        assert all(r.startswith("iron-npu-") and "==0.1.0" in r for r in siblings), (name, siblings)


@pytest.mark.slow
def test_core_and_one_family_install_alone_from_their_wheels(wheels, tmp_path):
    env = tmp_path / "eltwise-only"
    run(uv(), "venv", "--quiet", env)
    python = env / "bin" / "python"
    chosen = [wheels[n] for n in ("iron-npu-core", "iron-npu-design", "iron-npu-ops-eltwise")]
    run(uv(), "pip", "install", "--quiet", "--python", python, *chosen)
    check = (
        "import importlib.util, numpy as np\n"
        "from iron.core import Device, bf16\n"
        "from iron.ops.eltwise import RMSNorm\n"
        "op = RMSNorm(size=256, tile_size=256).resolve(Device.from_name('npu1'))\n"
        "(y,) = op.call_reference(np.ones((1, 256), bf16))\n"
        "assert float(y[0, 0]) == 1.0\n"
        "for absent in ('numba', 'iron.dispatch', 'iron.ops.gemm'):\n"
        "    assert importlib.util.find_spec(absent) is None, absent\n"
        "print('ok')\n"
    )
    assert run(python, "-c", check) == "ok\n"
    listed = run(env / "bin" / "iron", "ops", "list", "--family", "eltwise")
    assert "RMSNorm" in listed and "GEMM" not in listed
    plugins = run(env / "bin" / "iron", "plugins")
    assert "iron-npu-ops-eltwise 0.1.0" in plugins and "iron-npu-core 0.1.0" in plugins
