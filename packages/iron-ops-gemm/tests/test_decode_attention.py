import attrs
import numpy as np
import pytest
from support import run_graph, unfaithful_fraction

from iron.core import Device, OperatorError, bf16, capture
from iron.ops.eltwise.softmax import Softmax
from iron.ops.eltwise.strided_copy import StridedCopy
from iron.ops.gemm import DecodeAttention, GQAContext, GQAScores

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")
H, KV, D, L = 8, 2, 64, 64  # 4 query heads per KV head
SHAPE = {"heads": H, "kv_heads": KV, "head_dim": D, "max_seq_len": L}


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(bf16)


def scores64(q, keys, valid, kv_head_of):
    q, keys = q.astype(np.float64), keys.astype(np.float64)
    out = np.zeros((q.shape[0], keys.shape[0]))
    for h in range(q.shape[0]):
        out[h, :valid] = keys[:valid, kv_head_of(h)] @ q[h] / np.sqrt(q.shape[1])
    return out


def context64(weights, values, valid):
    weights, values = weights.astype(np.float64), values.astype(np.float64)
    return np.stack(
        [weights[h, :valid] @ values[:valid, h // (H // KV)] for h in range(weights.shape[0])]
    )


def poisoned(cache, valid):
    """The cache with garbage in every position at or past `valid`."""
    dirty = cache.copy()
    dirty[valid:] = np.nan
    dirty[valid + 1 :: 3] = 1e30
    dirty[valid + 2 :: 3] = -np.inf
    return dirty


def test_shapes_lay_the_cache_out_position_major():
    assert [(s.name, s.shape) for s in GQAScores(**SHAPE).arg_specs()] == [
        ("q", (8, 64)),
        ("keys", (64, 2, 64)),
        ("scores", (8, 64)),
    ]
    assert [(s.name, s.shape) for s in GQAContext(**SHAPE).arg_specs()] == [
        ("weights", (8, 64)),
        ("values", (64, 2, 64)),
        ("context", (8, 64)),
    ]
    assert [(s.name, s.shape) for s in DecodeAttention(**SHAPE).input_specs()] == [
        ("q", (8, 64)),
        ("keys", (64, 2, 64)),
        ("values", (64, 2, 64)),
    ]
    assert GQAScores.per_call_members() == GQAContext.per_call_members() == {"valid": np.int32}


def test_scores_are_the_scaled_float64_dot_products_of_each_heads_group_then_zero():
    rng = np.random.default_rng(30)
    q, keys = normal(rng, H, D), normal(rng, L, KV, D)
    (scores,) = GQAScores(**SHAPE).call_reference(q, keys, valid=40)
    exact = scores64(q, keys, 40, lambda h: h // 4)
    assert unfaithful_fraction(scores[:, :40], exact[:, :40]) <= 1e-3
    assert not np.any(scores[:, 40:].astype(np.float32))
    wrong = scores64(q, keys, 40, lambda h: h % 2)  # another KV head for heads 1, 3, 4, 6
    assert unfaithful_fraction(scores[[1, 3, 4, 6], :40], wrong[[1, 3, 4, 6], :40]) > 0.9
    (every,) = GQAScores(**SHAPE).call_reference(q, keys, valid=None)
    assert unfaithful_fraction(every, scores64(q, keys, L, lambda h: h // 4)) <= 1e-3


def test_context_is_the_float64_weighted_sum_of_each_heads_group():
    rng = np.random.default_rng(31)
    weights, values = normal(rng, H, L), normal(rng, L, KV, D)
    (context,) = GQAContext(**SHAPE).call_reference(weights, values, valid=40)
    assert context.shape == (H, D) and context.dtype == bf16
    assert unfaithful_fraction(context, context64(weights, values, 40)) <= 1e-3


def test_garbage_past_the_valid_length_never_reaches_the_output():
    rng = np.random.default_rng(32)
    q, keys, values = normal(rng, H, D), normal(rng, L, KV, D), normal(rng, L, KV, D)
    weights = normal(rng, H, L)  # nonzero past valid: 0 x NaN would still poison a sum
    scores_op, context_op = GQAScores(**SHAPE), GQAContext(**SHAPE)
    for valid in (1, 17, 63):
        (clean_scores,) = scores_op.call_reference(q, keys, valid=valid)
        (dirty_scores,) = scores_op.call_reference(q, poisoned(keys, valid), valid=valid)
        assert np.array_equal(dirty_scores.view(np.uint16), clean_scores.view(np.uint16))
        (clean,) = context_op.call_reference(weights, values, valid=valid)
        dirty_weights = weights.copy()
        dirty_weights[:, valid:] = np.nan
        (dirty,) = context_op.call_reference(dirty_weights, poisoned(values, valid), valid=valid)
        assert np.array_equal(dirty.view(np.uint16), clean.view(np.uint16))
        assert np.all(np.isfinite(dirty.astype(np.float32)))
    # the data-aware tolerances see only what is read, up to the call's valid length
    scores_17, context_17 = (attrs.evolve(op, valid=17) for op in (scores_op, context_op))
    assert scores_17.tolerance(inputs=(q, poisoned(keys, 17))) == scores_17.tolerance(
        inputs=(q, keys)
    )
    assert context_17.tolerance(inputs=(weights, poisoned(values, 17))) == context_17.tolerance(
        inputs=(weights, values)
    )


def test_tolerances_scale_with_what_is_read():
    rng = np.random.default_rng(33)
    q, keys = normal(rng, H, D), normal(rng, L, KV, D)
    mass = D * np.mean(np.abs(q.astype(np.float64))) * np.mean(np.abs(keys[:10].astype(np.float64)))
    assert GQAScores(**SHAPE, valid=10).tolerance(inputs=(q, keys)).atol == pytest.approx(
        2e-4 * mass / 8
    )
    # a softmax's weights average to 1 / valid: the context's mass is then mean|values|
    assert GQAContext(**SHAPE, valid=10).tolerance().atol == pytest.approx(
        2e-4 * np.sqrt(2 / np.pi)
    )


def test_columns_serve_whole_kv_groups():
    llama = {"heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048}
    assert GQAScores(**llama).resolve(NPU2).num_aie_columns == 8
    assert GQAContext(**llama).resolve(NPU1).num_aie_columns == 4
    assert GQAScores(**{**llama, "heads": 24, "kv_heads": 6}).resolve(NPU2).num_aie_columns == 6
    assert GQAScores(**SHAPE).resolve(NPU2).num_aie_columns == 2


REFUSALS = [
    (GQAScores, {**SHAPE, "valid": 0}, None, "GQAScores: valid=0: 1 to max_seq_len=64 positions"),
    (GQAContext, {**SHAPE, "valid": 65}, None, "GQAContext: valid=65: 1 to max_seq_len=64"),
    (GQAScores, {**SHAPE, "heads": 0}, None, "GQAScores: heads=0: at least 1"),
    (GQAScores, {**SHAPE, "kv_heads": 3}, None,
     "GQAScores: kv_heads=3: must divide the 8 query heads .*h // \\(heads / kv_heads\\)"),
    (GQAContext, {**SHAPE, "head_dim": 40}, None, "GQAContext: head_dim=40: a positive multiple of 16"),
    (GQAContext, {**SHAPE, "max_seq_len": 63}, None, "GQAContext: max_seq_len=63: an even number"),
    (GQAScores, {**SHAPE, "num_aie_columns": 4}, None,
     "GQAScores: kv_heads=2: must split evenly over num_aie_columns=4"),
    (GQAContext, {**SHAPE, "kv_heads": 8, "num_aie_columns": 8}, NPU1,
     "GQAContext: num_aie_columns=8: at most the 4 columns of npu1"),
    (DecodeAttention, {**SHAPE, "max_seq_len": 16384}, None,
     "DecodeAttention\\(heads=8, kv_heads=2, head_dim=64, max_seq_len=16384\\): a part is "
     "refused: Softmax: cols=16384"),
    (DecodeAttention, {**SHAPE, "kv_heads": 3}, None,
     "DecodeAttention\\(.*\\): a part is refused: GQAScores: kv_heads=3"),
]  # fmt: skip


@pytest.mark.parametrize("cls, params, device, message", REFUSALS, ids=lambda v: None)
def test_refusals_name_the_operator_parameter_and_rule(cls, params, device, message):
    with pytest.raises(OperatorError, match=message):
        op = cls(**params)
        if device is not None:
            op.resolve(device)


def test_a_valid_length_out_of_range_is_refused_per_call_too():
    rng = np.random.default_rng(34)
    with pytest.raises(OperatorError, match="GQAScores: valid=65: 1 to max_seq_len=64"):
        GQAScores(**SHAPE).call_reference(normal(rng, H, D), normal(rng, L, KV, D), valid=65)
    with pytest.raises(OperatorError, match="GQAContext: valid=0: 1 to max_seq_len=64"):
        GQAContext(**SHAPE).call_reference(normal(rng, H, L), normal(rng, L, KV, D), valid=0)


# ---- the composite -------------------------------------------------------------------------


def record_decode_attention(op=None):
    op = op or DecodeAttention(**SHAPE)
    with capture("decode") as g:
        pos = g.scalar("pos")
        q = g.input("q", (H, D))
        keys, values = g.state("keys", (L, KV, D)), g.state("values", (L, KV, D))
        context = g(op, q, keys, values, valid=pos + 1)
    return g, context


def test_the_composite_records_scores_softmax_context_with_one_valid_length():
    g, context = record_decode_attention()
    assert [type(s.op) for s in g.steps] == [GQAScores, Softmax, GQAContext]
    assert [s.op for s in g.steps] == [
        GQAScores(**SHAPE),
        Softmax(rows=H, cols=L),
        GQAContext(**SHAPE),
    ]
    assert g.steps[0].reads == ("q", "keys") and g.steps[2].reads[1] == "values"
    assert g.steps[1].reads == g.steps[0].writes and g.steps[2].reads[0] == g.steps[1].writes[0]
    assert context.shape == (H, D)
    assert [(b.op, b.member, str(b.expression)) for b in g.bindings] == [
        (s.op, "valid", "pos + 1") for s in g.steps
    ]
    assert g.infer_io() == (["q"], [context.name])


def test_recorded_without_a_valid_length_the_parts_read_every_position():
    with capture() as g:
        op = DecodeAttention(**SHAPE)
        inputs = [g.input(s.name, s.shape) for s in op.input_specs()]
        g(op, *inputs)
    assert len(g.steps) == 3 and g.bindings == []


def test_one_recording_serves_every_position_and_matches_the_hand_chain():
    rng = np.random.default_rng(35)
    g, context = record_decode_attention()
    keys, values = normal(rng, L, KV, D), normal(rng, L, KV, D)
    for pos in (0, 9, 40, 63):
        q = normal(rng, H, D)
        state = {"keys": poisoned(keys, pos + 1), "values": poisoned(values, pos + 1)}
        got = run_graph(g, {"q": q}, {"pos": pos}, state)[context.name]
        (scores,) = GQAScores(**SHAPE).call_reference(q, keys, valid=pos + 1)
        (weights,) = Softmax(rows=H, cols=L).call_reference(scores, valid=pos + 1)
        (expected,) = GQAContext(**SHAPE).call_reference(weights, values, valid=pos + 1)
        assert np.array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_a_decode_step_writes_its_cache_row_in_place_and_attends_over_the_prefix():
    """The Llama decode recipe: one new position's k and v land in row `pos`
    of the caches (a per-call offset), then attention reads rows 0..pos."""
    rng = np.random.default_rng(36)
    row = KV * D

    def write():  # one row of the cache, at a per-call element offset
        return StridedCopy(row, L * row, sizes=(row,), strides=(1,))

    with capture("step") as g:
        pos = g.scalar("pos")
        q, k, v = g.input("q", (H, D)), g.input("k", (KV, D)), g.input("v", (KV, D))
        keys, values = g.state("keys", (L, KV, D)), g.state("values", (L, KV, D))
        g(write(), k, keys, out_offset=pos * row)
        g(write(), v, values, out_offset=pos * row)
        context = g(DecodeAttention(**SHAPE), q, keys, values, valid=pos + 1)
    state, ks, vs = {}, [], []
    for pos in range(12):
        q, k, v = normal(rng, H, D), normal(rng, KV, D), normal(rng, KV, D)
        ks.append(k)
        vs.append(v)
        got = run_graph(g, {"q": q, "k": k, "v": v}, {"pos": pos}, state)[context.name]
        assert np.array_equal(state["keys"][: pos + 1], np.stack(ks))
        assert not np.any(state["keys"][pos + 1 :].astype(np.float32))
        (scores,) = GQAScores(**SHAPE).call_reference(q, state["keys"], valid=pos + 1)
        (weights,) = Softmax(rows=H, cols=L).call_reference(scores, valid=pos + 1)
        exact = context64(weights, np.stack(vs), pos + 1)
        assert unfaithful_fraction(got, exact) <= 1e-3


def test_resolved_composite_resolves_its_parts_on_its_device():
    llama = DecodeAttention(heads=32, kv_heads=8, head_dim=64, max_seq_len=2048)
    parts = llama.resolve(NPU1).parts()
    assert {role: p.device for role, p in parts.items()} == dict.fromkeys(parts, NPU1)
    assert parts["scores"].num_aie_columns == parts["context"].num_aie_columns == 4
