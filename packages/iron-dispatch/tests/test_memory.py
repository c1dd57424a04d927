"""Host memory of buffers: `fresh_bytes` and what `grow` keeps."""

import mmap
import sys

import numpy as np
import pytest

from iron.dispatch import memory
from iron.dispatch.memory import HUGE_PAGE_MIN, DeviceBuffer, fresh_bytes


def _zeroed_and_writable(array: np.ndarray, nbytes: int) -> None:
    assert array.dtype == np.uint8 and array.shape == (nbytes,)
    assert not array.any()
    array[::4096] = 7
    array[-1] = 9
    assert array[0] == 7 and array[-1] == 9


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping holding `address` (Linux)."""
    with open("/proc/self/smaps") as smaps:
        lines = smaps.read().splitlines()
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge-page advice is Linux's")
def test_large_fresh_bytes_are_a_mapping_advised_huge_pages():
    array = fresh_bytes(HUGE_PAGE_MIN + 12345)
    _zeroed_and_writable(array, HUGE_PAGE_MIN + 12345)
    assert "hg" in _vm_flags(array.ctypes.data)  # MADV_HUGEPAGE, as the kernel recorded it


def test_small_fresh_bytes_are_plain_numpy_memory():
    array = fresh_bytes(HUGE_PAGE_MIN - 1)
    _zeroed_and_writable(array, HUGE_PAGE_MIN - 1)
    assert array.base is None
    assert fresh_bytes(0).shape == (0,)


def test_without_madvise_fresh_bytes_fall_back_to_numpy(monkeypatch):
    monkeypatch.delattr(memory.mmap, "MADV_HUGEPAGE", raising=False)
    array = fresh_bytes(HUGE_PAGE_MIN)
    _zeroed_and_writable(array, HUGE_PAGE_MIN)
    assert array.base is None


@pytest.mark.skipif(not hasattr(mmap, "MAP_ANONYMOUS"), reason="no anonymous mappings")
def test_advice_the_kernel_refuses_still_gives_zeroed_memory(monkeypatch):
    monkeypatch.setattr(memory.mmap, "MADV_HUGEPAGE", -1, raising=False)  # EINVAL
    array = fresh_bytes(HUGE_PAGE_MIN)
    _zeroed_and_writable(array, HUGE_PAGE_MIN)
    assert isinstance(array.base.obj, mmap.mmap)


@pytest.mark.parametrize("unified", [True, False])
def test_grow_keeps_both_sides_and_hands_out_zeroes_past_them(unified):
    buffer = DeviceBuffer(HUGE_PAGE_MIN, unified=unified)
    old = np.arange(HUGE_PAGE_MIN, dtype=np.uint32).astype(np.uint8)
    buffer.host[:] = old
    if not unified:
        buffer.device[:] = old[::-1]
    buffer.grow(2 * HUGE_PAGE_MIN + 64)
    assert buffer.nbytes == 2 * HUGE_PAGE_MIN + 64 and buffer.generation == 1
    assert np.array_equal(buffer.host[:HUGE_PAGE_MIN], old)
    assert not buffer.host[HUGE_PAGE_MIN:].any()
    if unified:
        assert buffer.device is buffer.host
    else:
        assert np.array_equal(buffer.device[:HUGE_PAGE_MIN], old[::-1])
        assert not buffer.device[HUGE_PAGE_MIN:].any()
