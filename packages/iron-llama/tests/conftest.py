import sys
from pathlib import Path

from iron.llama import make_synthetic
from iron.lm.testing import private_cache, pytest_configure, synthetic_model_fixture

sys.path.insert(0, str(Path(__file__).parent))  # cli_runner

__all__ = ["private_cache", "pytest_configure", "tiny_dir"]  # pytest finds them by name

tiny_dir = synthetic_model_fixture(make_synthetic)
