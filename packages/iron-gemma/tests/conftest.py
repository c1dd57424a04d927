import sys
from pathlib import Path

import pytest

from iron.gemma import make_synthetic

sys.path.insert(0, str(Path(__file__).parent))  # gemma_cli


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes more than a few seconds (run by the slow session)"
    )


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Compiles go into a cache of this session's own, never the user's; the
    backend is the one each test asks for."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IRON_CACHE_HOME", str(tmp_path_factory.mktemp("iron-cache")))
        patch.delenv("IRON_BACKEND", raising=False)
        patch.delenv("IRON_POISON", raising=False)
        yield


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic tiny Gemma 4 (seed 0), written once per test session."""
    return make_synthetic(tmp_path_factory.mktemp("tiny"))
