import math

import numpy as np
import pytest

from iron.llama import Llama3RopeScaling, Oracle, OracleModel, rope_inv_freq

LLAMA3 = Llama3RopeScaling(
    factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
)
THETA = 500000.0


def hand_frequencies(head_dim: int) -> list[tuple[str, float]]:
    """Each pair's (band, frequency), worked one scalar at a time from the llama3 rule."""
    result = []
    for i in range(0, head_dim, 2):
        f = THETA ** (-i / head_dim)
        wavelength = 2 * math.pi / f
        if wavelength < 8192 / 4.0:
            result.append(("kept", f))
        elif wavelength > 8192 / 1.0:
            result.append(("divided", f / 32.0))
        else:
            smooth = (8192 / wavelength - 1.0) / (4.0 - 1.0)
            result.append(("smoothed", (1 - smooth) * f / 32.0 + smooth * f))
    return result


@pytest.mark.parametrize(
    ("head_dim", "bands"),
    [
        (8, ["kept", "kept", "smoothed", "divided"]),
        (16, ["kept"] * 4 + ["smoothed"] + ["divided"] * 3),
    ],
)
def test_llama3_frequencies_all_three_bands(head_dim, bands):
    expected = hand_frequencies(head_dim)
    assert [band for band, _ in expected] == bands
    got = rope_inv_freq(head_dim, THETA, LLAMA3)
    assert got.dtype == np.float32 and got.shape == (head_dim // 2,)
    # float64 formula rounded once to float32
    assert np.array_equal(got, np.array([f for _, f in expected], dtype=np.float32))


def test_llama3_frequencies_match_published_values():
    # the smoothed pair worked by hand: f = 5e5 ** -0.5 = 1.414214e-3, wavelength
    # 4442.883, smooth = (8192 / 4442.883 - 1) / 3 = 0.281282,
    # f * (0.718718 / 32 + 0.281282) = 1.414214e-3 * 0.303742 = 4.29556e-4
    assert rope_inv_freq(8, THETA, LLAMA3)[2] == pytest.approx(4.29556e-4, rel=1e-5)
    # transformers 5.24 LlamaRotaryEmbedding.inv_freq, head_dim 16, the same scaling
    transformers = [
        1.0,
        1.9392e-01,
        3.7606e-02,
        7.2927e-03,
        4.2956e-04,
        8.5703e-06,
        1.6620e-06,
        3.2229e-07,
    ]
    np.testing.assert_allclose(rope_inv_freq(16, THETA, LLAMA3), transformers, rtol=5e-4)
    # no scaling: plain theta ** (-2i / d)
    np.testing.assert_allclose(rope_inv_freq(8, 10000.0, None), [1, 0.1, 0.01, 0.001], rtol=1e-7)


def float64_logits(oracle: Oracle, ids: list[int]) -> np.ndarray:
    """A deliberately plain float64 Llama forward: loops over positions and heads."""
    c, w = oracle.config, oracle.weights
    d, half, group = c.head_dim, c.head_dim // 2, c.num_attention_heads // c.num_key_value_heads
    f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    freqs = [f for _, f in hand_frequencies(d)]

    def norm(x, weight):
        return x / math.sqrt(float(np.mean(x * x)) + c.rms_norm_eps) * f64(weight)

    def rotate(vector, position):
        out = vector.copy()
        for j in range(half):
            angle = position * freqs[j]
            a, b = vector[j], vector[j + half]
            out[j] = a * math.cos(angle) - b * math.sin(angle)
            out[j + half] = b * math.cos(angle) + a * math.sin(angle)
        return out

    x = [f64(w.embedding[t]) for t in ids]
    for layer in w.layers:
        h = [norm(v, layer.input_norm) for v in x]
        q = [(f64(layer.q) @ v).reshape(-1, d) for v in h]
        k = [(f64(layer.k) @ v).reshape(-1, d) for v in h]
        v_ = [(f64(layer.v) @ v).reshape(-1, d) for v in h]
        q = [np.array([rotate(head, p) for head in q[p]]) for p in range(len(ids))]
        k = [np.array([rotate(head, p) for head in k[p]]) for p in range(len(ids))]
        for p in range(len(ids)):
            context = []
            for head in range(c.num_attention_heads):
                kv = head // group
                scores = np.array([q[p][head] @ k[s][kv] / math.sqrt(d) for s in range(p + 1)])
                weights = np.exp(scores - scores.max())
                weights /= weights.sum()
                context.append(sum(weights[s] * v_[s][kv] for s in range(p + 1)))
            x[p] = x[p] + f64(layer.o) @ np.concatenate(context)
        for p in range(len(ids)):
            h = norm(x[p], layer.post_attention_norm)
            gate, up = f64(layer.gate) @ h, f64(layer.up) @ h
            x[p] = x[p] + f64(layer.down) @ (gate / (1 + np.exp(-gate)) * up)
    return np.array([f64(w.head) @ norm(v, w.norm) for v in x])


def test_oracle_matches_a_float64_forward(tiny_dir):
    oracle = Oracle.from_pretrained(tiny_dir)
    ids = [0, 17, 300, 5, 5, 511, 42, 256, 9]
    got = oracle.logits(ids)
    assert got.dtype == np.float32 and got.shape == (len(ids), 512)
    expected = float64_logits(oracle, ids)
    scale = np.abs(expected).max()
    assert scale > 1.0  # logits are not degenerate
    # float32 round-off through two layers: measured 8.8e-7 of the scale
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6 * scale)


def test_oracle_is_causal(tiny_dir):
    oracle = Oracle.from_pretrained(tiny_dir)
    ids = [0, 3, 99, 400, 12, 7]
    full = oracle.logits(ids)
    np.testing.assert_allclose(oracle.logits(ids[:3]), full[:3], rtol=0, atol=1e-5)
    changed = oracle.logits([*ids[:3], 401, 13, 8])
    np.testing.assert_allclose(changed[:3], full[:3], rtol=0, atol=1e-5)
    assert not np.allclose(changed[3:], full[3:])


def test_oracle_refuses_bad_token_ids(tiny_dir):
    oracle = Oracle.from_pretrained(tiny_dir)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 512\), got min 0 max 512"):
        oracle.logits([0, 512])
    with pytest.raises(ValueError, match="non-empty 1-D sequence of ints"):
        oracle.logits([])
    with pytest.raises(ValueError, match="non-empty 1-D sequence of ints"):
        oracle.logits([1.5])


def test_cached_oracle_model_matches_the_stateless_logits(tiny_dir):
    oracle = Oracle.from_pretrained(tiny_dir)
    ids = [0, 17, 300, 5, 5, 511, 42, 256, 9, 77, 3]
    full = oracle.logits(ids)
    model = OracleModel(oracle)
    rows = [model.prefill(ids[:5])]
    rows += [model.decode(token) for token in ids[5:]]
    assert model.length == len(ids)
    scale = np.abs(full).max()
    # another summation order for the same float32 products
    np.testing.assert_allclose(np.array(rows), full[4:], rtol=0, atol=2e-6 * scale)
    model.reset()
    assert model.length == 0
    with pytest.raises(RuntimeError, match="call prefill first"):
        model.decode(3)
