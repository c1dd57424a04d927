"""Each arithmetic reference against an independent float64 computation on
random bf16 data.

A reference computes in float32 and rounds to bf16 once; the float64 value
rounded to bf16 may land on the neighbouring bf16 only when the float32
error straddles a rounding boundary. So every element must lie within one
bf16 ulp of the float64 value, and nearly all must equal its rounding."""

import math

import numpy as np
import pytest

from iron.core import bf16
from iron.ops.eltwise import (
    AXPY,
    GELU,
    Clamp,
    Dequant,
    ElementwiseAdd,
    ElementwiseMul,
    LayerNorm,
    LeakyReLU,
    ReLU,
    RMSNorm,
    RoPE,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
    angle_table,
)

RNG = np.random.default_rng(1234)


def bf16_data(shape, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(bf16)


def f64(array):
    return np.asarray(array).astype(np.float64)


def assert_one_rounding(actual, exact, atol=0.0):
    """Every element within one bf16 ulp (plus `atol`) of the float64 value,
    and at least 99% equal to its correct rounding."""
    assert actual.dtype == bf16
    exact = np.asarray(exact, np.float64)
    ulp = np.abs(np.spacing(np.abs(exact).astype(bf16))).astype(np.float64)
    error = np.abs(f64(actual) - exact)
    worst = np.unravel_index(np.argmax(error - ulp - atol), exact.shape)
    assert np.all(error <= ulp + atol), (
        f"at {worst}: got {actual[worst]}, exact {exact[worst]}, ulp {ulp[worst]}"
    )
    assert np.mean(actual == exact.astype(bf16)) >= 0.99


def sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu_tanh64(x):
    """0.5 x (1 + tanh(z)) with 1 + tanh(z) written 2 / (1 + exp(-2z)): in the
    negative tail 1 + tanh(z) cancels below float64's resolution."""
    z = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-2.0 * z))


UNARY = [
    (ReLU(size=4096), lambda x: np.maximum(x, 0.0)),
    (LeakyReLU(size=4096, alpha=0.1), lambda x: np.where(x >= 0, x, 0.1 * x)),
    (Clamp(size=4096, lo=-1.5, hi=2.25), lambda x: np.minimum(np.maximum(x, -1.5), 2.25)),
    (GELU(size=4096), gelu_tanh64),
    (SiLU(size=4096), lambda x: x * sigmoid64(x)),
    (Sigmoid(size=4096), sigmoid64),
    (Tanh(size=4096), np.tanh),
]


@pytest.mark.parametrize("op,formula", UNARY, ids=lambda v: type(v).__name__)
def test_unary_reference(op, formula):
    x = bf16_data(op.size)
    assert_one_rounding(op.reference(x), formula(f64(x)))


@pytest.mark.parametrize(
    "op,formula",
    [
        (ElementwiseAdd(size=4096), lambda a, b: a + b),
        (ElementwiseMul(size=4096), lambda a, b: a * b),
        (AXPY(size=4096, scalar_factor=-0.75), lambda x, y: -0.75 * x + y),
    ],
    ids=lambda v: type(v).__name__,
)
def test_binary_reference(op, formula):
    a, b = bf16_data(op.size), bf16_data(op.size)
    assert_one_rounding(op.reference(a, b), formula(f64(a), f64(b)))


def test_gelu_is_the_tanh_approximation_not_the_erf_form():
    x = np.array([-3.0, -2.5], bf16)  # where the two forms differ by ~10%
    erf_form = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in f64(x)]
    tanh_form = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
                 for v in f64(x)]  # fmt: skip
    y = f64(GELU(size=2).reference(x))
    assert np.allclose(y, tanh_form, rtol=2**-8)
    assert not np.allclose(y, erf_form, rtol=0.05)


def test_activations_hold_their_precision_in_the_tails():
    x = np.array([-30.0, -12.0, -6.0, 6.0, 12.0, 30.0], bf16)
    for op, formula in [(GELU(size=6), gelu_tanh64), (SiLU(size=6), lambda v: v * sigmoid64(v)),
                        (Sigmoid(size=6), sigmoid64)]:  # fmt: skip
        assert_one_rounding(op.reference(x), formula(f64(x)))


@pytest.mark.parametrize("weighted", [False, True])
def test_rms_norm_against_float64(weighted):
    op = RMSNorm(size=8 * 512, tile_size=512, weighted=weighted, eps=1e-5)
    x = bf16_data((8, 512))
    w = bf16_data(512, scale=1.0)
    x64 = f64(x)
    exact = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5)
    if weighted:
        assert_one_rounding(op.reference(x, w), exact * f64(w))
    else:
        assert_one_rounding(op.reference(x), exact)


def test_rms_norm_eps_dominates_a_zero_row():
    op = RMSNorm(size=64, tile_size=32, eps=0.25)
    x = np.zeros((2, 32), bf16)
    x[1] = 1.0
    y = f64(op.reference(x))
    assert np.all(y[0] == 0) and np.allclose(y[1], 1 / math.sqrt(1.25), rtol=2**-8)


def test_layer_norm_against_float64():
    op = LayerNorm(rows=8, cols=256)
    x = (RNG.standard_normal((8, 256)) * 3 + 2).astype(bf16)  # an offset the mean removes
    x64 = f64(x)
    centred = x64 - x64.mean(axis=1, keepdims=True)
    exact = centred / np.sqrt((centred**2).mean(axis=1, keepdims=True) + 1e-5)
    # the float32 mean is off by up to 2^-24 of the row's magnitude, which an
    # output near zero cannot round away
    assert_one_rounding(op.reference(x), exact, atol=2**-20)


def softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_softmax_against_float64_with_and_without_valid():
    op = Softmax(rows=16, cols=64)
    x = bf16_data((16, 64))
    assert_one_rounding(op.call_reference(x)[0], softmax64(f64(x)))
    assert op.call_reference(x, valid=64)[0].tobytes() == op.call_reference(x)[0].tobytes()
    (y,) = op.call_reference(x, valid=23)
    assert_one_rounding(y[:, :23], softmax64(f64(x)[:, :23]))
    assert y[:, 23:].view(np.uint16).max() == 0  # +0.0 exactly, not just small


def rotation_matrix(cos, sin, method):
    """The (cols x cols) matrix rotating each pair of a row by its angle."""
    half = len(cos)
    matrix = np.zeros((2 * half, 2 * half))
    for i in range(half):
        a, b = (i, i + half) if method == "two_halves" else (2 * i, 2 * i + 1)
        matrix[a, a], matrix[a, b] = cos[i], -sin[i]
        matrix[b, a], matrix[b, b] = sin[i], cos[i]
    return matrix


@pytest.mark.parametrize("method", ["two_halves", "interleaved"])
def test_rope_against_the_rotation_matrix(method):
    rows, cols, angle_rows = 12, 64, 3  # each angle row serves 4 consecutive rows
    op = RoPE(rows=rows, cols=cols, angle_rows=angle_rows, method=method)
    x = bf16_data((rows, cols))
    angles = angle_table(np.array([5, 100, 7000]), cols, 500000.0).astype(bf16)
    a64 = f64(angles)
    exact = np.stack(
        [
            rotation_matrix(a64[r // 4, 0::2], a64[r // 4, 1::2], method) @ f64(x)[r]
            for r in range(rows)
        ]
    )
    assert_one_rounding(op.reference(x, angles), exact)


def test_rope_two_halves_is_hugging_face_rotate_half():
    op = RoPE(rows=4, cols=32, angle_rows=1)
    x, angles = bf16_data((4, 32)), bf16_data((1, 32), scale=1.0)
    cos = np.concatenate([f64(angles)[0, 0::2]] * 2)
    sin = np.concatenate([f64(angles)[0, 1::2]] * 2)
    rotate_half = np.concatenate([-f64(x)[:, 16:], f64(x)[:, :16]], axis=1)
    assert_one_rounding(op.reference(x, angles), f64(x) * cos + rotate_half * sin)


def pack_by_hand(codes, scales, tile_size, group_size):
    """The Dequant input layout written out byte by byte."""
    out = bytearray()
    for t in range(len(codes) // tile_size):
        tile = codes[t * tile_size : (t + 1) * tile_size]
        for k in range(tile_size // 2):
            out.append(int(tile[2 * k]) | int(tile[2 * k + 1]) << 4)
        for g in range(tile_size // group_size):
            index = t * (tile_size // group_size) + g
            out += int(scales[index : index + 1].view(np.uint16)[0]).to_bytes(2, "little")
    return np.frombuffer(bytes(out), np.uint8)


def test_dequant_against_unpacking_by_hand():
    op = Dequant(size=1024, tile_size=256, group_size=32)
    codes = RNG.integers(0, 16, 1024)
    scales = RNG.uniform(-2.0, 2.0, 1024 // 32).astype(bf16)
    packed = pack_by_hand(codes, scales, 256, 32)
    assert packed.shape == op.arg_specs()[0].shape == (576,)
    exact = np.array([codes[i] * float(scales[i // 32]) for i in range(1024)])
    (y,) = op.call_reference(packed)
    assert y.tobytes() == exact.astype(bf16).tobytes()  # 4 x 8 significant bits: one exact rounding


# ---- the angle table ----------------------------------------------------------------


def hf_llama3_inv_freq(dim, base, factor, low, high, original):
    """Hugging Face's `_compute_llama3_parameters`, one frequency at a time."""
    freqs, branches = [], []
    for i in range(0, dim, 2):
        f = 1.0 / base ** (i / dim)
        wavelength = 2 * math.pi / f
        if wavelength < original / high:
            freqs.append(f), branches.append("kept")
        elif wavelength > original / low:
            freqs.append(f / factor), branches.append("divided")
        else:
            smooth = (original / wavelength - low) / (high - low)
            freqs.append((1 - smooth) * f / factor + smooth * f), branches.append("smoothed")
    return np.array(freqs), branches


LLAMA_3_2 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip


@pytest.mark.parametrize("scaling", [None, LLAMA_3_2], ids=["plain", "llama3"])
def test_angle_table_against_the_hugging_face_formula(scaling):
    dim, base = 64, 500000.0
    if scaling is None:
        freqs = np.array([1.0 / base ** (i / dim) for i in range(0, dim, 2)])
    else:
        freqs, branches = hf_llama3_inv_freq(dim, base, 32.0, 1.0, 4.0, 8192.0)
        assert [branches.count(b) for b in ("kept", "smoothed", "divided")] == [15, 3, 14]
    positions = np.array([0, 1, 2, 17, 1000, 8191, 131071])
    table = angle_table(positions, dim, base, scaling)
    assert table.dtype == np.float32 and table.shape == (len(positions), dim)
    angles = positions[:, None] * freqs
    # rounding each frequency to float32 moves an angle by up to angle * 2^-24;
    # rounding cos and sin moves them by up to 2^-24
    bound = angles * 2**-24 + 2**-24
    assert np.all(np.abs(table[:, 0::2] - np.cos(angles)) <= bound)
    assert np.all(np.abs(table[:, 1::2] - np.sin(angles)) <= bound)
    # at position 1 the sines pin every frequency to 2^-23 relative, the tiny scaled ones too
    assert np.all(np.abs(table[1, 1::2] / np.sin(freqs) - 1) <= 2**-23)


def test_angle_table_rounds_each_frequency_to_float32_once():
    """Far out, the float32 rounding of a frequency moves the angle visibly:
    the table must follow the float32 frequencies Hugging Face holds."""
    freqs, _ = hf_llama3_inv_freq(64, 500000.0, 32.0, 1.0, 4.0, 8192.0)
    position = 2**20
    table = angle_table(np.array([position]), 64, 500000.0, LLAMA_3_2)[0]
    angles = position * freqs.astype(np.float32).astype(np.float64)
    assert np.all(np.abs(table[0::2] - np.cos(angles)) <= 2**-24)
    assert np.all(np.abs(table[1::2] - np.sin(angles)) <= 2**-24)
    unrounded = position * freqs
    assert np.max(np.abs(table[0::2] - np.cos(unrounded))) > 1e-3


def test_angle_table_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="cols=63"):
        angle_table(np.arange(4), 63, 10000.0)
    with pytest.raises(ValueError, match="rope_type='linear'"):
        angle_table(np.arange(4), 64, 10000.0, {"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="lacks high_freq_factor"):
        angle_table(np.arange(4), 64, 10000.0, {k: v for k, v in LLAMA_3_2.items()
                                                 if k != "high_freq_factor"})  # fmt: skip
    with pytest.raises(ValueError, match="1-D integer"):
        angle_table(np.array([0.5]), 64, 10000.0)
