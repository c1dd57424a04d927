"""The Gemma 4 numerics the operators share (iron.ops.flm.gemma4) against
transformers' definitions in float64, and the kernels' arithmetic
(iron.ops.flm.kernel_math): the Pade tanh's error, the lane order of a dot
product, exp as a bf16."""

import flm_gemma4_f64 as exact
import numpy as np
import pytest

from iron.ops.flm import gemma4, kernel_math
from iron.ops.flm.decode_layer import DecodeLayer


def test_norm_and_gelu_are_transformers_in_float32():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 512)) * 3).astype(np.float32)
    w = rng.standard_normal(512).astype(np.float32)
    np.testing.assert_allclose(gemma4.rms_norm(x, w), exact.rms_norm(x, w), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(gemma4.rms_norm(x), exact.rms_norm(x), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(
        gemma4.gelu_tanh(x), exact.gelu_pytorch_tanh(x), rtol=2e-6, atol=2e-6
    )


def test_norm_is_x_times_w_not_one_plus_w():
    x = np.array([3.0, 4.0], np.float32)
    assert np.allclose(gemma4.rms_norm(x, np.zeros(2, np.float32)), 0)


@pytest.mark.parametrize(
    "head_dim, theta, partial, rotated",
    [(256, 1e4, None, 128), (512, 1e6, 0.25, 64), (128, 1e6, 0.25, 16)],
)
def test_rope_tables_are_transformers_frequencies(head_dim, theta, partial, rotated):
    """Default RoPE over the head dim; proportional: int(0.25 * head_dim //
    2) frequencies over the whole head dim, the rest 0 (cos 1, sin 0)."""
    table = gemma4.rope_table(600, head_dim, theta, partial).astype(np.float64)
    inv = (
        exact.default_inv_freq(head_dim, theta)
        if partial is None
        else exact.proportional_inv_freq(head_dim, theta, partial)
    )
    assert np.count_nonzero(inv) == rotated
    angle = np.arange(600)[:, None] * inv
    half = head_dim // 2
    # bf16 cos and sin of a float32 angle (its error grows with the position)
    np.testing.assert_allclose(table[:, :half], np.cos(angle), atol=2.0**-8 + 600 * 2.0**-23)
    np.testing.assert_allclose(table[:, half:], np.sin(angle), atol=2.0**-8 + 600 * 2.0**-23)
    assert (table[:, rotated:half] == 1).all() and (table[:, half + rotated :] == 0).all()


def test_rotate_pairs_the_halves_as_rotate_half_does():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    table = gemma4.rope_table(10, 64, 1e4)
    want = exact.apply_rope(x, 7, exact.default_inv_freq(64, 1e4))
    np.testing.assert_allclose(gemma4.rotate(x, table[7]), want, rtol=1e-5, atol=1e-5)


def test_the_layer_geometries_are_the_models():
    e2b = DecodeLayer(layer_type="swa_skip", max_l=4096, **gemma4.GEMMA4_E2B)
    assert (e2b.dim, e2b.mlp, e2b.cache_rows) == (256, 12288, 512)
    e4b = DecodeLayer(layer_type="global_skip", max_l=4096, **gemma4.GEMMA4_E4B)
    assert (e4b.dim, e4b.mlp, e4b.group) == (512, 10240, 4)


# ---- the kernels' arithmetic ---------------------------------------------------------------


def test_pade_tanh_is_within_1e4_everywhere():
    x = np.linspace(-20, 20, 400001).astype(np.float32)
    error = np.abs(kernel_math.tanh(x).astype(np.float64) - np.tanh(x.astype(np.float64)))
    assert error.max() < 1e-4
    assert np.abs(kernel_math.tanh(np.float32(0.3)) - np.tanh(0.3)) < 1e-7  # exact near 0


def test_device_gelu_is_gelu_within_the_tanh_error():
    x = np.linspace(-8, 8, 10001).astype(np.float32)
    error = np.abs(kernel_math.gelu(x) - exact.gelu_pytorch_tanh(x))
    assert (error <= 0.5 * np.abs(x) * 1e-4 + 1e-6).all()


def test_lane_dot_adds_each_lane_in_order_then_halves():
    """The order matters in float32; this is the kernels' order and not
    numpy's."""
    a = np.zeros(32, np.float32)
    a[0], a[16], a[8] = 1e8, -1e8, 1.0  # lane 0: 1e8 - 1e8 = 0 exactly; lane 8: 1
    a[1] = 1.0
    b = np.ones(32, np.float32)
    assert kernel_math.lane_dot(a, b) == 2.0
    c = np.zeros(16, np.float32)
    c[0], c[8], c[1] = 1e8, 1.0, -1e8  # halves: (1e8 + 1) + (-1e8) loses the 1
    assert kernel_math.lane_sum(c) == 0.0 and float(np.sum(c.astype(np.float64))) == 1.0


def test_exp_is_a_bf16_of_exp2_of_x_log2e():
    x = np.array([-0.5, 0.0, -10.0, -np.inf], np.float32)
    got = kernel_math.exp_bf16(x)
    assert got[1] == 1.0 and got[3] == 0.0
    np.testing.assert_allclose(got[:3], np.exp(x[:3]), rtol=2.0**-8)
    assert (got.astype(np.float32).view(np.uint32) & 0xFFFF == 0).all()  # bf16 values
