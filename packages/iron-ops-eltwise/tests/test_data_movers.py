"""The data movers are bit-exact: their inputs are random bit patterns
(NaN payloads, infinities, signed zeros included), and every output is
compared bit for bit with an independent index computation."""

import itertools

import numpy as np
import pytest

from iron.core import Tolerance, bf16
from iron.ops.eltwise import MemCopy, Repeat, StridedCopy, Transpose

RNG = np.random.default_rng(99)


def random_bits(shape, dtype=bf16):
    dtype = np.dtype(dtype)
    bits = RNG.integers(0, 2 ** (8 * dtype.itemsize), size=shape, dtype=f"u{dtype.itemsize}")
    return bits.view(dtype)


def same_bits(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("op", [MemCopy(size=1024), Transpose(M=64, N=128),
                                Repeat(rows=8, cols=64, repeat=4),
                                StridedCopy(input_buffer_size=64, output_buffer_size=64,
                                            sizes=(64,), strides=(1,))])  # fmt: skip
def test_data_movers_declare_an_exact_tolerance(op):
    assert op.tolerance() == Tolerance.exact()


def test_mem_copy_moves_every_bit():
    x = random_bits(1024)
    (y,) = MemCopy(size=1024).call_reference(x)
    assert same_bits(y, x) and y is not x


def test_transpose_moves_element_i_j_to_j_i():
    x = random_bits((64, 128))
    (y,) = Transpose(M=64, N=128).call_reference(x)
    expected = np.empty((128, 64), bf16)
    for i, j in itertools.product(range(64), range(128)):
        expected[j, i] = x[i, j]
    assert same_bits(y, expected)
    assert not same_bits(y, x.reshape(128, 64))  # a reshape is not a transpose


@pytest.mark.parametrize("dtype", [bf16, np.int32])
def test_repeat_interleaves_rows(dtype):
    x = random_bits((8, 64), dtype)
    (y,) = Repeat(rows=8, cols=64, repeat=4, dtype=dtype).call_reference(x)
    expected = np.stack([x[i] for i in range(8) for _ in range(4)])
    assert same_bits(y, expected)


def strided_gather(x, offset, sizes, strides):
    """The elements a (sizes, strides) pattern reads, in order, by nested loops."""
    return np.array(
        [x[offset + sum(i * s for i, s in zip(index, strides))]
         for index in itertools.product(*(range(n) for n in sizes))],
        dtype=x.dtype,
    )  # fmt: skip


@pytest.mark.parametrize(
    "sizes,strides,dtype",
    [
        ((16, 64), (128, 1), bf16),  # 16 rows of 64 from a (16, 128) matrix
        ((4, 2, 3, 8), (0, 200, 40, 1), bf16),  # four dimensions, a zero outer stride
        ((256,), (4,), np.float32),  # a strided innermost dimension (4-byte elements)
        ((8, 16), (3, 17), np.float32),
    ],
)
def test_strided_copy_gathers_into_its_window_and_leaves_the_rest(sizes, strides, dtype):
    op = StridedCopy(input_buffer_size=2048, output_buffer_size=3000,
                     sizes=sizes, strides=strides, dtype=dtype)  # fmt: skip
    x, y = random_bits(2048, dtype), random_bits(3000, dtype)
    for in_offset, out_offset in [(0, 0), (6, 1000)]:
        (out,) = op.call_reference(x, y, in_offset=in_offset, out_offset=out_offset)
        window = slice(out_offset, out_offset + op.count)
        assert same_bits(out[window], strided_gather(x, in_offset, sizes, strides))
        untouched = np.ones(3000, bool)
        untouched[window] = False
        assert same_bits(out[untouched], y[untouched])


def test_strided_copy_writes_one_row_into_a_cache_per_call():
    """How a decode step lands one position's keys in a (positions, 512) state."""
    op = StridedCopy(input_buffer_size=512, output_buffer_size=16 * 512, sizes=(512,), strides=(1,))
    cache = np.zeros(16 * 512, bf16)
    rows = [random_bits(512) for _ in range(3)]
    for position, keys in enumerate(rows):
        (cache,) = op.call_reference(keys, cache, out_offset=position * 512)
    assert same_bits(cache[: 3 * 512], np.concatenate(rows))
    assert not cache[3 * 512 :].view(np.uint16).any()
