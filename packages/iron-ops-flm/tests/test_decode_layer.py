"""DecodeLayer: the reference against transformers' decoder layer in
float64 for each layer type (the ring past its window, KV sharing through
the cache a writing layer leaves, the double-wide MLP, the per-layer input
on and off), the packing, the refusals (per call too); the design's check,
its simulation within the tolerance for each type and position, the
weights and the KV read from DDR exactly once, one configuration for all
four types, and corrupted transfers caught."""

import attrs
import flm_gemma4_f64 as exact
import numpy as np
import pytest
from flm_gemma4 import NPU1, NPU2, SMALL, close_to_exact, layer, random_layer, rms, with_values

from iron.core import OperatorError, bf16, compare
from iron.design import TAP, DeadlockError, Fill, check, design_of, simulate
from iron.design.model import canonical
from iron.ops.flm import decode_design
from iron.ops.flm.decode_layer import DecodeLayer
from iron.ops.flm.gemma4 import GEMMA4_E2B, GEMMA4_E4B, LAYER_TYPES

#: positions: the first token, an early one, one past the 128-row window
POSITIONS = [0, 5, 300]


def exact_step(op, mats, norms, inputs, position):
    """(y, the cache after) in float64 from the layer's own matrices."""
    x, *rest = inputs
    ple = rest[0] if op.per_layer else None
    cache = np.array(rest[-1], np.float64)
    y, k, v = exact.decoder_layer(op, x, ple, mats, norms, cache, position)
    if k is not None:
        cache[0, op.slot(position)], cache[1, op.slot(position)] = k, v
    return y, cache


@pytest.mark.parametrize("layer_type", LAYER_TYPES)
@pytest.mark.parametrize("position", POSITIONS)
def test_reference_is_the_float64_layer_within_a_rounding(layer_type, position):
    op = layer(layer_type)
    mats, norms, inputs = random_layer(op, np.random.default_rng(position))
    out = op.call_reference(*inputs, context_len=position)
    want, cache = exact_step(op, mats, norms, inputs, position)
    # the reference reads the RoPE table's bf16 cos/sin and attends over the
    # bf16 cache (this token's key too): 2^-9 of the attention's scores
    assert close_to_exact(out[-1], want, 4 * rms(want)) is None
    if not op.is_skip:
        assert close_to_exact(out[0], cache, 1.0) is None


@pytest.mark.parametrize(
    "extra", [{"per_layer": 0}, {"double_wide_mlp": False}, {"weights": "bfp16"}]
)
def test_reference_without_per_layer_inputs_double_width_or_bf16(extra):
    for layer_type in ("swa", "global_skip"):
        op = layer(layer_type, **extra)
        mats, norms, inputs = random_layer(op, np.random.default_rng(7))
        if op.weights.value == "bfp16":  # the cores read the packed values
            unpacked = op.unpack_weights(inputs[2 if op.per_layer else 1])
            q_rows, kv_rows = op.heads * op.dim, op.kv_heads * op.dim
            qkv = unpacked.pop("qkv")
            mats = {**unpacked, "q": qkv[:q_rows], "k": qkv[q_rows : q_rows + kv_rows],
                    "v": qkv[q_rows + kv_rows :]}  # fmt: skip
        want, _ = exact_step(op, mats, norms, inputs, 9)
        assert (
            close_to_exact(op.call_reference(*inputs, context_len=9)[-1], want, 4 * rms(want))
            is None
        )


def test_the_mlp_is_double_wide_on_shared_layers_only():
    assert [layer(t).mlp for t in LAYER_TYPES] == [512, 512, 1024, 1024]
    assert layer("swa_skip", double_wide_mlp=False).mlp == 512


def test_a_sliding_layer_sees_the_last_window_of_its_history():
    """The ring holds the history's last `window` positions; the layer
    attends over them only, as float64 attention over the whole history
    with transformers' sliding mask does."""
    op = layer("swa")
    rng = np.random.default_rng(3)
    mats, norms, inputs = random_layer(op, rng)
    position = 400
    history = rng.standard_normal((2, position + 1, op.kv_heads, op.dim)).astype(bf16)
    ring = np.zeros((2, op.window, op.kv_heads, op.dim), bf16)
    for p in range(position):
        ring[:, p % op.window] = history[:, p]
    inputs[-1] = ring
    y = op.call_reference(*inputs, context_len=position)[-1]
    ple = inputs[1]
    full = np.array(history, np.float64)
    as_global = attrs.evolve(
        op, layer_type="global", global_head_dim=op.head_dim, max_l=position + 1
    )
    # the same layer over the whole history, every position seen: differs
    y_all, _, _ = exact.decoder_layer(as_global, inputs[0], ple, mats, norms, full, position)
    # windowed: only positions 273..400
    assert not np.allclose(y.astype(np.float64), y_all, atol=0.05)
    want, _ = exact_step(op, mats, norms, inputs, position)
    assert close_to_exact(y, want, 4 * rms(want)) is None


@pytest.mark.parametrize("source, shared", [("global", "global_skip"), ("swa", "swa_skip")])
def test_a_shared_layer_reads_the_kv_its_source_wrote(source, shared):
    """Layer 1 (writing) leaves this token's key and value in the cache;
    layer 2 (KV-shared, its own weights, no k/v projection) reads them
    there: the result is float64's layer 2 over the keys layer 1 made."""
    writer, reader = layer(source), layer(shared)
    rng = np.random.default_rng(4)
    position = 300
    _, _, inputs = random_layer(writer, rng)
    cache_after, _ = writer.call_reference(*inputs, context_len=position)
    mats, norms, reader_inputs = random_layer(reader, rng)
    reader_inputs[-1] = cache_after
    (y,) = reader.call_reference(*reader_inputs, context_len=position)
    want, _ = exact_step(reader, mats, norms, reader_inputs, position)
    assert close_to_exact(y, want, 4 * rms(want)) is None
    # and another cache gives another answer
    reader_inputs[-1] = inputs[-1]
    assert not np.array_equal(reader.call_reference(*reader_inputs, context_len=position)[0], y)


@pytest.mark.parametrize("weights", ["bf16", "bfp16"])
@pytest.mark.parametrize("layer_type", LAYER_TYPES)
def test_packing_round_trips_what_the_cores_read(layer_type, weights):
    op = layer(layer_type, weights=weights)
    mats, _, inputs = random_layer(op, np.random.default_rng(0))
    back = op.unpack_weights(inputs[2])
    stacked = np.concatenate([mats["q"], *([] if op.is_skip else [mats["k"], mats["v"]])])
    for name, want in [("qkv", stacked), ("o", mats["o"]), ("down", mats["down"])]:
        want = want.astype(np.float32)
        if weights == "bf16":
            assert np.array_equal(back[name], want)
        else:  # bfp16ebs8: within half a unit of each 8-value block's exponent
            assert np.abs(back[name] - want).max() <= 2.0**-7 * np.abs(want).max()
    assert op.weight_elements * (2 if weights == "bf16" else 9 / 8) == inputs[2].nbytes


@pytest.mark.parametrize(
    "params, message",
    [
        ({"layer_type": "local"}, "DecodeLayer: layer_type='local': one of global, swa"),
        ({"hidden": 200}, "hidden=200: a positive multiple of 256"),
        ({"head_dim": 48}, "head_dim=48: a power of two from 32 to 512"),
        ({"heads": 2, "kv_heads": 1},
         r"head_dim=64: heads x head_dim and \(heads \+ 2 kv_heads\) x head_dim multiples of 256"),
        ({"per_layer": 100}, "per_layer=100: 0 .* or a multiple of 256"),
        ({"kv_heads": 3}, "kv_heads=3: divides heads=4"),
    ],
)  # fmt: skip
def test_build_parameters_are_refused_by_rule(params, message):
    with pytest.raises((OperatorError, ValueError), match=message):
        DecodeLayer(**{**SMALL, "layer_type": "global", **params})


def test_npu1_is_refused_by_rule():
    with pytest.raises(
        OperatorError, match="DecodeLayer: device=npu1: the Gemma 4 kernels are aie2p-only"
    ):
        DecodeLayer(layer_type="global", **SMALL).resolve(NPU1)


@pytest.mark.parametrize("position", [-1, 512, 10**6])
def test_a_position_out_of_range_is_refused_per_call(position):
    op = layer("swa")
    _, _, inputs = random_layer(op, np.random.default_rng(0))
    message = f"DecodeLayer: context_len={position}: 0 <= context_len < max_l=512"
    with pytest.raises(OperatorError, match=message):
        op.call_reference(*inputs, context_len=position)
    with pytest.raises(OperatorError, match=message):
        decode_design.build(op, position)
    with pytest.raises(OperatorError, match=message):
        attrs.evolve(op, context_len=position)


def test_pack_refuses_kv_on_a_shared_layer_and_wrong_shapes():
    op = layer("swa_skip")
    mats, _, _ = random_layer(layer("swa"), np.random.default_rng(0))
    with pytest.raises(OperatorError, match="DecodeLayer: k: None on a KV-shared layer"):
        op.pack_weights(
            mats["q"], mats["k"], mats["v"], mats["o"], mats["gate"], mats["up"], mats["down"]
        )
    with pytest.raises(OperatorError, match=r"DecodeLayer: down: shape \(256, 1024\)"):
        op.pack_weights(mats["q"], None, None, mats["o"], np.zeros((1024, 256)), np.zeros((1024, 256)),
                        mats["down"], np.zeros((256, 256)), np.zeros((256, 256)))  # fmt: skip


# ---- the design -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", DecodeLayer.cases, ids=lambda c: c.label)
def test_every_case_fits_npu2(case):
    report = check(design_of(DecodeLayer(**case.params).resolve(NPU2)))
    assert report.ok, str(report)


def simulated(op, inputs, position):
    run = decode_design.run(op, *inputs, context_len=position)
    out = op.call_reference(*inputs, context_len=position)
    return run, out, with_values(op, context_len=position).tolerance(NPU2, inputs=inputs)


@pytest.mark.parametrize("layer_type", LAYER_TYPES)
@pytest.mark.parametrize("position", POSITIONS)
def test_design_simulates_to_the_reference_reading_everything_once(layer_type, position):
    op = layer(layer_type)
    _, _, inputs = random_layer(op, np.random.default_rng(position + 1))
    run, out, tolerance = simulated(op, inputs, position)
    verdict = compare(run["y"], out[-1], tolerance)
    assert verdict.passed, verdict.detail
    moved = run.traffic.tensors
    # the packed weights exactly once, each cached row the token sees once
    # (a writing layer has its own on chip), the table's one row
    assert moved["weights"].read == inputs[2].nbytes
    rows = sum(n for _, n in op.read_runs(position))
    seen = min(position + 1, op.cache_rows if not op.is_global else position + 1)
    assert rows == (seen if op.is_skip else seen - 1)
    assert moved["cache"].read == 2 * rows * op.kv_heads * op.dim * 2
    assert moved["rope"].read == op.dim * 2
    if op.is_skip:
        assert moved["cache"].written == 0
    else:  # this token's row of K and of V, and nothing else
        assert moved["cache"].written == 2 * op.kv_heads * op.dim * 2
        assert compare(run["cache"], out[0], tolerance).passed
        untouched = np.ones(op.cache_rows, bool)
        untouched[op.slot(position)] = False
        assert np.array_equal(run["cache"][:, untouched], inputs[-1][:, untouched])


@pytest.mark.parametrize("extra", [{"per_layer": 0}, {"weights": "bfp16"}])
def test_design_without_per_layer_inputs_and_with_bfp16_weights(extra):
    for layer_type in ("global", "swa_skip"):
        op = layer(layer_type, **extra)
        _, _, inputs = random_layer(op, np.random.default_rng(11))
        run, out, tolerance = simulated(op, inputs, 130)
        verdict = compare(run["y"], out[-1], tolerance)
        assert verdict.passed, verdict.detail
        weights = inputs[2 if op.per_layer else 1]
        assert run.traffic.tensors["weights"].read == weights.nbytes


def test_one_configuration_serves_four_layer_types_and_every_position():
    designs = [design_of(layer(t).resolve(NPU2)) for t in LAYER_TYPES]
    designs += [decode_design.build(layer(t), p) for t in LAYER_TYPES for p in POSITIONS]
    configurations = {
        canonical((d.name, d.device, d.fifos, d.links, d.workers, d.params)) for d in designs
    }
    assert len(configurations) == 1
    sequences = {canonical(d.sequence) for d in designs[len(LAYER_TYPES) :]}
    assert len(sequences) == len(LAYER_TYPES) * len(POSITIONS)


def _corrupted(design, tensor, fifo, shift):
    at = next(
        i
        for i, s in enumerate(design.sequence)
        if isinstance(s, Fill) and s.tensor == tensor and s.fifo == fifo
    )
    fill = design.sequence[at]
    moved = attrs.evolve(fill, tap=TAP(fill.tap.offset + shift, fill.tap.sizes, fill.tap.strides))
    return attrs.evolve(design, sequence=(*design.sequence[:at], moved, *design.sequence[at + 1 :]))


@pytest.mark.parametrize(
    "tensor, fifo, shift", [("rope", "rin", 128), ("cache", "keys", 256), ("norms", "vin", 256)]
)
def test_a_transfer_off_by_a_row_fails(tensor, fifo, shift):
    op = layer("global")
    _, _, inputs = random_layer(op, np.random.default_rng(2))
    position = 40
    design = _corrupted(decode_design.build(op, position), tensor, fifo, shift)
    names = [s.name for s in op.arg_specs() if s.reads]
    tensors = dict(zip(names, inputs))
    run = simulate(design, tensors, decode_design.params(op, position))
    out = op.call_reference(*inputs, context_len=position)
    tolerance = with_values(op, context_len=position).tolerance(NPU2, inputs=inputs)
    assert not compare(run["y"], out[-1], tolerance).passed


def test_a_wrong_key_count_hangs_by_name():
    op = layer("swa_skip")
    _, _, inputs = random_layer(op, np.random.default_rng(0))
    names = [s.name for s in op.arg_specs() if s.reads]
    params = {**decode_design.params(op, 20), "kv_rows": 22}
    with pytest.raises(DeadlockError, match="worker attention"):
        simulate(decode_design.build(op, 20), dict(zip(names, inputs)), params)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["E2B", "E4B"])
@pytest.mark.parametrize("layer_type", LAYER_TYPES)
def test_model_widths_simulate_to_the_reference(model, layer_type):
    """Gemma 4 E2B (1536 wide, 8 over 1 heads, MLP 6144, double-wide on
    shared layers) and E4B (2560, 8 over 2, 10240) at position 700: the
    sliding ring full, the global cache 700 rows; weights and KV once."""
    geometry = GEMMA4_E2B if model == "E2B" else GEMMA4_E4B
    op = DecodeLayer(layer_type=layer_type, max_l=1024, **geometry).resolve(NPU2)
    inputs = op.example_inputs(np.random.default_rng(0))
    run, out, tolerance = simulated(op, inputs, 700)
    verdict = compare(run["y"], out[-1], tolerance)
    assert verdict.passed, verdict.detail
    assert run.traffic.tensors["weights"].read == inputs[2].nbytes
    rows = sum(n for _, n in op.read_runs(700))
    assert run.traffic.tensors["cache"].read == 2 * rows * op.kv_heads * op.dim * 2
    if not op.is_skip:
        assert compare(run["cache"], out[0], tolerance).passed


def test_bf16_cache_rows_hold_the_rounded_key():
    op = layer("global")
    _, _, inputs = random_layer(op, np.random.default_rng(0))
    cache, _ = op.call_reference(*inputs, context_len=3)
    assert cache.dtype == bf16 and np.isfinite(cache[:, 3].astype(np.float32)).all()
