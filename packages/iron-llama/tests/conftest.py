from pathlib import Path

import pytest

from iron.llama import make_synthetic


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes more than a few seconds (run by the slow session)"
    )


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic tiny model (seed 0), written once per test session."""
    return make_synthetic(tmp_path_factory.mktemp("tiny"))
