from pathlib import Path

import pytest

from iron.llama import make_synthetic


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic tiny model (seed 0), written once per test session."""
    return make_synthetic(tmp_path_factory.mktemp("tiny"))
