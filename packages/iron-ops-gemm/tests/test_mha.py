import numpy as np
import pytest
from support import unfaithful_fraction

from iron.core import Device, OperatorError, bf16
from iron.ops.gemm import MHA, padded_seq_len

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def attention64(q, k, v, seq_len, causal, kv_head_of):
    """float64 attention over head-major (heads, seq, d) arrays: rows past
    seq_len are padding (ignored as keys, 0 as outputs)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    heads, pad, d = q.shape
    out = np.zeros((heads, pad, d))
    for h in range(heads):
        g = kv_head_of(h)
        s = q[h, :seq_len] @ k[g, :seq_len].T / np.sqrt(d)
        if causal:
            s[np.triu_indices(seq_len, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        out[h, :seq_len] = (w / w.sum(axis=1, keepdims=True)) @ v[g, :seq_len]
    return out


def inputs(rng, op):
    return [rng.standard_normal(s.shape).astype(bf16) for s in op.arg_specs() if s.reads]


def test_the_rows_iron_pinned():
    assert [s.shape for s in MHA(num_heads=8, seq_len=128).arg_specs()] == [(8, 128, 64)] * 4
    gqa = MHA(num_heads=8, seq_len=128, head_dim=64, num_kv_heads=2)
    assert [(s.name, s.shape) for s in gqa.arg_specs()] == [
        ("Q", (8, 128, 64)),
        ("K", (2, 128, 64)),
        ("V", (2, 128, 64)),
        ("O", (8, 128, 64)),
    ]


def test_specs_use_the_padded_length_in_either_layout():
    assert [
        padded_seq_len(n, p) for n, p in [(100, 1), (128, 1), (129, 1), (100, 3), (128, 2)]
    ] == [
        128,
        128,
        192,
        192,
        128,
    ]
    op = MHA(num_heads=4, seq_len=100, num_kv_heads=2, heads_interleaved=True, num_pipelines=3)
    assert op.seq_pad == 192
    assert [s.shape for s in op.arg_specs()] == [
        (192, 4, 64),
        (192, 2, 64),
        (192, 2, 64),
        (192, 4, 64),
    ]


@pytest.mark.parametrize("causal", [True, False])
def test_reference_is_float64_attention_with_contiguous_head_groups(causal):
    rng = np.random.default_rng(20)
    op = MHA(num_heads=8, seq_len=100, num_kv_heads=2, causal=causal)
    Q, K, V = inputs(rng, op)
    (out,) = op.call_reference(Q, K, V)
    exact = attention64(Q, K, V, 100, causal, lambda h: h // 4)
    assert out.shape == (8, 128, 64) and out.dtype == bf16
    assert unfaithful_fraction(out, exact) <= 1e-3
    # heads of different groups see different keys: where a modulo grouping
    # picks another KV head (heads 1, 3, 4, 6), its attention is far off
    wrong = attention64(Q, K, V, 100, causal, lambda h: h % 2)
    for h in (1, 3, 4, 6):
        assert unfaithful_fraction(out[h, :100], wrong[h, :100]) > 0.9


def test_a_group_with_zero_keys_averages_its_values_over_the_causal_window():
    rng = np.random.default_rng(21)
    op = MHA(num_heads=4, seq_len=64, num_kv_heads=2)
    Q, K, V = inputs(rng, op)
    K[0] = 0  # heads 0 and 1 score every key 0: uniform weights over keys 0..i
    (out,) = op.call_reference(Q, K, V)
    running_mean = np.cumsum(V[0].astype(np.float64), axis=0) / np.arange(1, 65)[:, None]
    for h in (0, 1):
        assert unfaithful_fraction(out[h], running_mean) <= 1e-3
    for h in (2, 3):  # the other group's heads read their own keys
        assert unfaithful_fraction(out[h], running_mean) > 0.5


def test_causal_rows_ignore_later_keys_and_values():
    rng = np.random.default_rng(22)
    op = MHA(num_heads=2, seq_len=128)
    Q, K, V = inputs(rng, op)
    (before,) = op.call_reference(Q, K, V)
    K2, V2 = K.copy(), V.copy()
    K2[:, 70:], V2[:, 70:] = 100, -100
    (after,) = op.call_reference(Q, K2, V2)
    assert np.array_equal(after[:, :70].view(np.uint16), before[:, :70].view(np.uint16))
    assert not np.array_equal(after[:, 70:], before[:, 70:])
    (open_before,) = MHA(num_heads=2, seq_len=128, causal=False).call_reference(Q, K, V)
    (open_after,) = MHA(num_heads=2, seq_len=128, causal=False).call_reference(Q, K2, V2)
    assert not np.array_equal(open_after[:, 0], open_before[:, 0])


def test_padding_is_ignored_and_padded_outputs_are_zero():
    rng = np.random.default_rng(23)
    op = MHA(num_heads=4, seq_len=100, num_kv_heads=1, causal=False)
    Q, K, V = inputs(rng, op)
    (clean,) = op.call_reference(Q, K, V)
    for x in (Q, K, V):
        x[:, 100:] = np.nan
    (dirty,) = op.call_reference(Q, K, V)
    assert np.array_equal(dirty.view(np.uint16), clean.view(np.uint16))
    assert not np.any(clean[:, 100:].astype(np.float32))


def test_interleaved_layout_is_the_sequence_major_view_of_the_same_attention():
    rng = np.random.default_rng(24)
    head_major = MHA(num_heads=4, seq_len=64, num_kv_heads=2)
    Q, K, V = inputs(rng, head_major)
    (out,) = head_major.call_reference(Q, K, V)
    interleaved = MHA(num_heads=4, seq_len=64, num_kv_heads=2, heads_interleaved=True)
    seq_major = [np.ascontiguousarray(x.transpose(1, 0, 2)) for x in (Q, K, V)]
    (out_seq,) = interleaved.call_reference(*seq_major)
    assert np.array_equal(out_seq.view(np.uint16), out.transpose(1, 0, 2).view(np.uint16))


def test_tolerance_is_irons_device_check_scaled_to_the_values():
    op = MHA(num_heads=8, seq_len=128)
    assert (op.tolerance().rtol, op.tolerance().atol, op.tolerance().max_mismatch_frac) == (
        0.04,
        0.15,
        0.005,
    )
    q, k, v = (np.full((8, 128, 64), x) for x in (100.0, 100.0, 2.0))
    v[0, 0, 0] = np.nan  # garbage does not set the scale
    assert op.tolerance(NPU2, inputs=(q, k, v)).atol == pytest.approx(0.075)  # V alone counts


REFUSALS = [
    ({"num_heads": 8, "seq_len": 128}, NPU1, "MHA: device=npu1: runs on the full 8-column npu2 only"),
    ({"num_heads": 8, "seq_len": 128}, Device.from_name("npu2", columns=4),
     "MHA: device=npu2 at 4 columns: runs on the full 8-column npu2 only"),
    ({"num_heads": 8, "seq_len": 128, "head_dim": 128}, None, "MHA: head_dim=128: 64 only"),
    ({"num_heads": 0, "seq_len": 128}, None, "MHA: num_heads=0: at least 1"),
    ({"num_heads": 8, "seq_len": 128, "num_kv_heads": 3}, None,
     "MHA: num_kv_heads=3: must divide the 8 query heads"),
    ({"num_heads": 8, "seq_len": 128, "num_kv_heads": 0}, None, "MHA: num_kv_heads=0: must divide"),
    ({"num_heads": 8, "seq_len": 0}, None, "MHA: seq_len=0: at least 1"),
    ({"num_heads": 8, "seq_len": 128, "num_pipelines": 0}, None, "MHA: num_pipelines=0: at least 1"),
    ({"num_heads": 8, "seq_len": 128, "num_pipelines": 7}, None,
     "MHA: num_pipelines=7: even above 6"),
    ({"num_heads": 8, "seq_len": 128, "num_pipelines": 10}, NPU2,
     "MHA: num_pipelines=10: at most the 8 columns of npu2"),
]  # fmt: skip


@pytest.mark.parametrize("params, device, message", REFUSALS, ids=lambda v: None)
def test_refusals_name_the_operator_parameter_and_rule(params, device, message):
    with pytest.raises(OperatorError, match=message):
        op = MHA(**params)
        if device is not None:
            op.resolve(device)


def test_eight_pipelines_resolve_on_npu2():
    op = MHA(num_heads=32, seq_len=2048, num_kv_heads=8, num_pipelines=8).resolve(NPU2)
    assert op.seq_pad == 2048 and op.num_pipelines == 8
