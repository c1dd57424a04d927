import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # bigram, the test app

import bigram

from iron.lm.testing import private_cache, pytest_configure

__all__ = ["bigram_dir", "private_cache", "pytest_configure"]  # pytest finds them by name


@pytest.fixture(scope="session")
def bigram_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test app's synthetic model (seed 0), written once per test session."""
    return bigram.make_synthetic(tmp_path_factory.mktemp("bigram") / "model")
