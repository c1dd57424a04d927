import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # sim_designs, the simulator tests' designs


# short names for iron-core's pytest-plugin fixtures, used by most tests here
@pytest.fixture
def npu1(device_npu1):
    return device_npu1


@pytest.fixture
def npu2(device_npu2):
    return device_npu2
