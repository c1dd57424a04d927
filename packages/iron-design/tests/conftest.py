import pytest

from iron.core import Device


@pytest.fixture
def npu1() -> Device:
    return Device.from_name("npu1")


@pytest.fixture
def npu2() -> Device:
    return Device.from_name("npu2")
