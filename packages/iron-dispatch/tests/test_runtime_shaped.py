"""Runtime-shaped operators in graphs: one device configuration for every
value of their dispatch-time values, a stream generated (and cached) per
distinct value. Gemma 4's operators (iron-ops-flm) run in graphs on `sim`
with their values bound per call, each output judged by the operator's
tolerance against its reference at the same values."""

import attrs
import numpy as np
import pytest

from iron.core import Device, compare
from iron.dispatch import Session, graph
from iron.ops.flm.decode_layer import DecodeLayer
from iron.ops.flm.lm_head import LMHead
from iron.ops.flm.prefill_attention import PrefillAttention
from iron.ops.flm.prefill_sliding_attention import PrefillSlidingAttention

NPU2 = Device.from_name("npu2")
GLOBAL = {"heads": 4, "kv_heads": 2, "max_l": 512, "head_dim": 128, "chunk": 256}
SMALL_LAYER = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "global_head_dim": 128,
               "intermediate": 512, "double_wide_mlp": True, "per_layer": 256, "window": 128,
               "max_l": 512}  # fmt: skip
SLIDING = {"heads": 4, "kv_heads": 2, "max_l": 1024, "head_dim": 64, "window": 128, "chunk": 256}


def judged(op, got, want, inputs, **values):
    at = attrs.evolve(op, **values).resolve(NPU2)
    verdict = compare(got, want, at.tolerance(NPU2, inputs=inputs))
    assert verdict.passed, verdict.detail


@pytest.mark.parametrize(
    "cls, params", [(PrefillAttention, GLOBAL), (PrefillSlidingAttention, SLIDING)],
    ids=["global", "sliding"],
)  # fmt: skip
def test_prefill_attention_runs_in_a_graph_on_sim_with_its_rows_per_call(cls, params, tmp_path):
    op = cls(**params, writes_cache=False)
    q, k, v, cache = op.resolve(NPU2).example_inputs(np.random.default_rng(1))

    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def attend(g, q, k, v, cache, *, begin, end):
            return g(op, q, k, v, cache, L_begin=begin, L_end=end)

        for begin, end in [(0, 256), (128, 256), (0, 256)]:
            got = attend(q, k, v, cache, begin=begin, end=end)
            (want,) = op.call_reference(q, k, v, cache, L_begin=begin, L_end=end)[-1:]
            judged(op, got, want, [q, k, v, cache], L_begin=begin, L_end=end)
        streams = session.library.streams
        # one configuration lowered; a stream per distinct range, the repeat served cached
        assert (streams.configurations, streams.streams) == (1, 2)


def test_a_decode_layer_runs_in_a_graph_on_sim_a_token_per_call(tmp_path):
    """A sliding layer writing its cache (a graph state) at positions 0, 1,
    2: each call's output and the cache it leaves, judged against the
    reference run on the cache the reference left."""
    op = DecodeLayer(layer_type="swa", **SMALL_LAYER).resolve(NPU2)
    x, ple, weights, norms, rope, _ = op.example_inputs(np.random.default_rng(2))
    cache = np.zeros((2, op.cache_rows, op.kv_heads, op.dim), x.dtype)

    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def decode(g, x, ple, *, position):
            kv = g.state("cache", cache.shape)
            w = [g.weight(n, a) for n, a in (("w", weights), ("n", norms), ("r", rope))]
            return g(op, x, ple, *w, kv, context_len=position)[-1]

        for position in range(3):
            got = decode(x, ple, position=position)
            inputs = [x, ple, weights, norms, rope, cache]
            cache, want = op.call_reference(*inputs, context_len=position)
            judged(op, got, want, inputs, context_len=position)
        assert session.library.streams.streams == 3


def test_lm_head_runs_in_a_graph_on_sim(tmp_path):
    op = LMHead(dim=256, vocab=2048)
    x, norm, W = op.resolve(NPU2).example_inputs(np.random.default_rng(3))
    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def head(g, x):
            return g(op, x, g.weight("norm", norm), g.weight("W", W))

        judged(op, head(x), op.resolve(NPU2).reference(x, norm, W), [x, norm, W])
        assert session.library.streams.streams == 0  # no dispatch-time value: one sequence
