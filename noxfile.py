"""Test sessions: one per package, each in a fresh venv holding only that
package, its workspace siblings and its `test` extra (pinned by uv.lock), so
every family is proven installable on its own.

    uv run nox                  # every session below
    uv run nox -s iron-core     # one package
    uv run nox -s lint
    uv run nox -s readmes       # every code block of every README
    uv run nox -s bench         # every benchmark's smoke run, across packages
    uv run nox -s slow          # the cases marked slow, across packages
    uv run nox -s hf-parity     # the Gemma oracle against transformers (not by default)

What makes a run cheap without leaving a test out: every workspace wheel
is built once per run (`_wheels`) and installed as a file; the host
kernels numba compiles are kept in one folder outside the throwaway venvs
(`KERNELS`, kept between runs); pytest runs on two workers (pytest-xdist)
wherever the installed test extras bring it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = [*PACKAGES, "readmes", "bench", "slow", "lint"]

#: numba's compiled host kernels (IRON_KERNEL_CACHE), shared by every session
#: and kept between runs: a session loads what an earlier one compiled
KERNELS = ROOT / ".nox" / "kernels"
#: the workspace's wheels, built once per run (`_wheels`)
WHEELS = ROOT / ".nox" / "wheels"
_built: dict[str, Path] = {}


def _wheels(session: nox.Session) -> dict[str, Path]:
    """Folder under packages/ -> its wheel, every one built in this run's
    first session that installs one (`uv build` of all of them takes a few
    seconds; an installer given a source folder builds it again every time)."""
    if not _built:
        shutil.rmtree(WHEELS, ignore_errors=True)
        session.run_install(
            "uv", "build", "--all-packages", "--wheel", "--quiet", "--out-dir", str(WHEELS),
            external=True, silent=True,
        )  # fmt: skip
        for package in PACKAGES:
            stem = _distribution(package).replace("-", "_")
            (_built[package],) = WHEELS.glob(f"{stem}-*.whl")
    return _built


def _export(session: nox.Session, *args: str) -> Path:
    """Write the locked requirements that `uv export` gives for `args`, each
    workspace package in them named by its wheel of this run."""
    out = Path(session.create_tmp()) / "requirements.txt"
    session.run_install(
        "uv", "export", "--frozen", "--no-hashes", "--no-header", "--no-editable",
        "--no-emit-project", *args, "--output-file", str(out), external=True, silent=True,
    )  # fmt: skip
    text = out.read_text()
    if "./packages/" in text:
        wheels = _wheels(session)
        text = re.sub(r"^\./packages/([^\s]+)", lambda m: str(wheels[m[1]]), text, flags=re.M)
        out.write_text(text)
    return out


def _pytest(session: nox.Session, requirements: Path, *args: str, success_codes=(0,)) -> None:
    """pytest over `args`, on two workers where the requirements bring
    pytest-xdist (a package's test extra says its tests are independent),
    with compiled host kernels kept in `KERNELS`."""
    workers = ["-n", "2"] if re.search(r"^pytest-xdist==", requirements.read_text(), re.M) else []
    session.env["IRON_KERNEL_CACHE"] = str(KERNELS)
    # the slowest cases named in the log: where a session's minutes went
    session.run("pytest", *workers, "--durations=5", *args, *session.posargs,
                success_codes=list(success_codes))  # fmt: skip


def _distribution(package: str) -> str:
    """The distribution name of the package in folder packages/`package`."""
    pyproject = (ROOT / "packages" / package / "pyproject.toml").read_text()
    return re.search(r'^name = "([^"]+)"$', pyproject, re.M).group(1)


def _install_package(session: nox.Session, package: str) -> Path:
    """Install `package` (not editable: the wheel users get), its workspace
    siblings and its test extra, and any fixture distributions its tests
    ship under tests/plugins/*/ (third-party plugins the tests look for);
    returns the requirements installed."""
    requirements = _export(session, "--package", _distribution(package), "--extra", "test")
    fixtures = sorted(ROOT.glob(f"packages/{package}/tests/plugins/*/pyproject.toml"))
    session.install(
        "-r", str(requirements), str(_wheels(session)[package]),
        *(f"./{fixture.parent.relative_to(ROOT)}" for fixture in fixtures),
    )  # fmt: skip
    return requirements


def _package_session(package: str):
    def run(session: nox.Session) -> None:
        requirements = _install_package(session, package)
        session.env["IRON_REQUIRE_FIXTURE_PLUGINS"] = "1"
        _pytest(session, requirements, f"packages/{package}/tests", "-m", "not slow and not bench")

    run.__doc__ = f"Install {package} alone (with its siblings) and run its tests."
    return run


for _package in PACKAGES:
    nox.session(name=_package)(_package_session(_package))


def _install_all(session: nox.Session) -> Path:
    """Every package (not editable) with every extra: what `uv run` gives a reader."""
    requirements = _export(session, "--all-packages", "--all-extras")
    session.install("-r", str(requirements), *(str(w) for w in _wheels(session).values()))
    return requirements


@nox.session
def readmes(session: nox.Session) -> None:
    """Every code block of every README, with every package installed (the
    workspace's tests/: README blocks, installing the wheels); slow ones
    are the slow session's."""
    requirements = _install_all(session)
    _pytest(session, requirements, "tests", "-m", "not slow and not bench")


def _across_packages(session: nox.Session, marker: str) -> None:
    """Every package together, running only the cases marked `marker`."""
    requirements = _install_all(session)
    session.env["IRON_REQUIRE_FIXTURE_PLUGINS"] = "0"
    tests = ["tests", *(f"packages/{p}/tests" for p in PACKAGES)]
    # exit code 5 means "nothing collected": fine while no case is so marked
    _pytest(session, requirements, *tests, "-m", marker, success_codes=(0, 5))


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark's smoke run (marked bench): the scripts run and print
    their tables; the figures themselves are the READMEs'."""
    _across_packages(session, "bench and not slow")  # a slow one is the slow session's


@nox.session
def slow(session: nox.Session) -> None:
    """Every package together, running only the cases marked slow."""
    _across_packages(session, "slow")


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
    session.install("-r", str(requirements), str(_wheels(session)["iron-gemma"]))
    session.install("torch==2.13.0", "transformers>=5.5", "safetensors")
    session.run("pytest", "packages/iron-gemma/tests/test_hf_parity.py", *session.posargs)
