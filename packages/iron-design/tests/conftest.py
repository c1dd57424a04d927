import sys
from pathlib import Path

import pytest

from iron.core import Device

sys.path.insert(0, str(Path(__file__).parent))  # sim_designs, the simulator tests' designs


@pytest.fixture
def npu1() -> Device:
    return Device.from_name("npu1")


@pytest.fixture
def npu2() -> Device:
    return Device.from_name("npu2")
