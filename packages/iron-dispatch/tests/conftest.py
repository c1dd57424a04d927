import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # dispatch_fakes


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into a cache of its own, never the user's."""
    root = tmp_path_factory.mktemp("iron-cache")
    monkeypatch.setenv("IRON_CACHE_HOME", str(root))
    monkeypatch.delenv("IRON_BACKEND", raising=False)
    return root
