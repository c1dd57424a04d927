"""Helpers for an app's own tests (they need pytest, the test extra).

An app's tests/conftest.py imports `pytest_configure` and `private_cache`
from here (pytest finds them by name) and makes its session model fixture
with `synthetic_model_fixture(make_synthetic)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def edited(data: dict, **changes) -> dict:
    """A deep copy of the JSON object `data` with `changes` set (a value of
    None drops the key): a config.json with one field changed."""
    data = json.loads(json.dumps(data))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def run_command(main: Callable[[Sequence[str]], int], capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one command of an app's CLI `main`, run
    in the test's process; argparse's exits count too. `capsys` is pytest's."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes more than a few seconds (run by the slow session)"
    )


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Compiles and demo models go into a cache of this session's own, never
    the user's; the backend is the one each test asks for."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IRON_CACHE_HOME", str(tmp_path_factory.mktemp("iron-cache")))
        for name in ("IRON_BACKEND", "IRON_POISON", "IRON_DEVICE"):
            patch.delenv(name, raising=False)
        yield


def synthetic_model_fixture(make_synthetic: Callable[[Path], Path], name: str = "tiny"):
    """A session fixture returning the app's synthetic `name` model (seed
    0), written once per test session by `make_synthetic(directory)`."""

    @pytest.fixture(scope="session")
    def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return make_synthetic(tmp_path_factory.mktemp(name))

    model_dir.__doc__ = f"The synthetic {name} model (seed 0), written once per test session."
    return model_dir
