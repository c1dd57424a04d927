"""The Gemma 4 operators' host kernels (the cpu backend's, numba): each
within a rounding of its operator's reference (they compute what it
computes, in float32), writing every output, and the same bits for every
thread count."""

import numba
import numpy as np
import pytest
from flm_gemma4 import NPU2, host_run, layer, random_layer

from iron.core import Tolerance, compare
from iron.ops.flm import host
from iron.ops.flm.decode_layer import DecodeLayer
from iron.ops.flm.gemma4 import LAYER_TYPES
from iron.ops.flm.lm_head import LMHead
from iron.ops.flm.prefill_attention import PrefillAttention
from iron.ops.flm.prefill_sliding_attention import PrefillSlidingAttention

THREADS = sorted({1, 2, 3, numba.config.NUMBA_NUM_THREADS})
#: a result and its reference differ by float32 summation order only: one
#: bf16 step apart at most (2^-7 relative), and 2^-12 of the output's scale
ONE_STEP = 2.0**-7


def cases():
    out = [(host.lm_head, LMHead(**c.params), {}) for c in LMHead.cases]
    for cls in (PrefillAttention, PrefillSlidingAttention):
        op = cls(**cls.cases[0].params)
        out += [
            (host.prefill_attention, op, {"L_begin": b, "L_end": e})
            for b, e in [(0, 256), (256, 384)]
        ]
    for layer_type in LAYER_TYPES:
        out += [(host.decode_layer, layer(layer_type), {"context_len": p}) for p in (0, 300)]
    out.append((host.decode_layer, layer("swa", weights="bfp16", per_layer=0), {"context_len": 7}))
    return out


def inputs_of(op):
    if isinstance(op, DecodeLayer):
        return random_layer(op, np.random.default_rng(3))[2]
    return op.example_inputs(np.random.default_rng(3))


def label(case):
    _, op, values = case
    parts = [getattr(op, name).value for name in ("layer_type", "weights") if hasattr(op, name)]
    parts += [f"{k}={v}" for k, v in values.items()]
    return f"{type(op).__name__}[{','.join(parts)}]"


@pytest.mark.parametrize("case", cases(), ids=label)
def test_host_kernel_is_its_reference_within_a_rounding(case):
    kernel, op, values = case
    inputs = inputs_of(op)
    got = host_run(kernel, op, inputs, **values)
    want = op.call_reference(*inputs, **values)
    for (name, actual), expected in zip(got.items(), want):
        scale = float(np.abs(expected.astype(np.float64)).max())
        verdict = compare(actual, expected, Tolerance.relative(ONE_STEP, 2.0**-12 * max(scale, 1)))
        assert verdict.passed, f"{name}: {verdict.detail}"


@pytest.mark.parametrize("case", cases()[::3], ids=label)
def test_the_same_bits_for_every_thread_count(case):
    kernel, op, values = case
    inputs = inputs_of(op)
    seen = set()
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(2):
                outs = host_run(kernel, op, inputs, **values)
                seen.add(b"".join(o.tobytes() for o in outs.values()))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert len(THREADS) >= 3 and len(seen) == 1


def test_a_bad_call_is_refused_before_the_kernel_runs():
    op = layer("global")
    inputs = inputs_of(op)
    with pytest.raises(Exception, match="DecodeLayer: context_len=512"):
        host_run(host.decode_layer, op, inputs, context_len=512)
    prefill = PrefillAttention(**PrefillAttention.cases[0].params)
    with pytest.raises(Exception, match="PrefillAttention: L_end=200: a multiple of 128"):
        host_run(host.prefill_attention, prefill, inputs_of(prefill), L_begin=0, L_end=200)


def test_the_operators_name_their_host_kernels():
    for cls, name in [(LMHead, "lm_head"), (PrefillAttention, "prefill_attention"),
                      (PrefillSlidingAttention, "prefill_attention"), (DecodeLayer, "decode_layer")]:  # fmt: skip
        module, _, attribute = cls.host.partition(":")
        assert module == "iron.ops.flm.host" and getattr(host, attribute) is getattr(host, name)


def test_warm_up_compiles_every_kernel():
    report = host.warm_up()
    assert report["threads"] == numba.get_num_threads() and report["compiled"] >= 0
    assert NPU2.arch == "aie2p"
