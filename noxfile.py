"""Test sessions: one per package, each in a fresh venv holding only that
package, its workspace siblings and its `test` extra (pinned by uv.lock), so
every family is proven installable on its own.

    uv run nox                  # every session below
    uv run nox -s iron-core     # one package
    uv run nox -s lint
    uv run nox -s readmes       # every code block of every README
    uv run nox -s slow          # the cases marked slow, across packages
    uv run nox -s hf-parity     # the Gemma oracle against transformers (not by default)
"""

from __future__ import annotations

import re
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = [*PACKAGES, "readmes", "slow", "lint"]


def _export(session: nox.Session, *args: str) -> Path:
    """Write the locked requirements that `uv export` gives for `args`."""
    out = Path(session.create_tmp()) / "requirements.txt"
    session.run_install(
        "uv", "export", "--frozen", "--no-hashes", "--no-header", "--no-editable",
        "--no-emit-project", *args, "--output-file", str(out), external=True, silent=True,
    )  # fmt: skip
    return out


def _distribution(package: str) -> str:
    """The distribution name of the package in folder packages/`package`."""
    pyproject = (ROOT / "packages" / package / "pyproject.toml").read_text()
    return re.search(r'^name = "([^"]+)"$', pyproject, re.M).group(1)


def _install_package(session: nox.Session, package: str) -> None:
    """Install `package` (not editable: the wheel users get), its workspace
    siblings and its test extra; then any fixture distributions its tests
    ship under tests/plugins/*/ (third-party plugins the tests look for)."""
    requirements = _export(session, "--package", _distribution(package), "--extra", "test")
    session.install("-r", str(requirements), f"./packages/{package}")
    for fixture in sorted(ROOT.glob(f"packages/{package}/tests/plugins/*/pyproject.toml")):
        session.install(f"./{fixture.parent.relative_to(ROOT)}")


def _package_session(package: str):
    def run(session: nox.Session) -> None:
        _install_package(session, package)
        session.env["IRON_REQUIRE_FIXTURE_PLUGINS"] = "1"
        session.run("pytest", f"packages/{package}/tests", "-m", "not slow", *session.posargs)

    run.__doc__ = f"Install {package} alone (with its siblings) and run its tests."
    return run


for _package in PACKAGES:
    nox.session(name=_package)(_package_session(_package))


def _install_all(session: nox.Session) -> None:
    """Every package (not editable) with every extra: what `uv run` gives a reader."""
    requirements = _export(session, "--all-packages", "--all-extras")
    session.install("-r", str(requirements), *(f"./packages/{p}" for p in PACKAGES))


@nox.session
def readmes(session: nox.Session) -> None:
    """Every code block of every README, with every package installed (the
    workspace's tests/: README blocks, installing the wheels); slow ones
    are the slow session's."""
    _install_all(session)
    session.run("pytest", "tests", "-m", "not slow", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """Every package together, running only the cases marked slow."""
    _install_all(session)
    session.env["IRON_REQUIRE_FIXTURE_PLUGINS"] = "0"
    # exit code 5 means "nothing collected": fine while no case is slow
    session.run(
        "pytest", "tests", *(f"packages/{p}/tests" for p in PACKAGES), "-m", "slow",
        *session.posargs, success_codes=[0, 5],
    )  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install("-r", str(_export(session, "--only-group", "dev")))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(name="hf-parity", venv_backend="virtualenv")
def hf_parity(session: nox.Session) -> None:
    """iron-gemma's oracle against transformers' Gemma 4 (torch and
    transformers installed here only: never a dependency). pip, not uv, so
    torch==2.13.0 resolves to the CPU wheel the machine's pip config offers."""
    requirements = _export(session, "--package", _distribution("iron-gemma"), "--extra", "test")
    session.install("-r", str(requirements), "./packages/iron-gemma")
    session.install("torch==2.13.0", "transformers>=5.5", "safetensors")
    session.run("pytest", "packages/iron-gemma/tests/test_hf_parity.py", *session.posargs)
