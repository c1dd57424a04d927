import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # bigram, the test app

import bigram


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


@pytest.fixture(scope="session")
def bigram_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test app's synthetic model (seed 0), written once per test session."""
    return bigram.make_synthetic(tmp_path_factory.mktemp("bigram") / "model")
