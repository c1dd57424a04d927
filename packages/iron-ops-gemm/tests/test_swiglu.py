import numpy as np
import pytest
from support import run_graph

from iron.core import Device, OperatorError, bf16, capture, compare
from iron.ops.eltwise.elementwise_mul import ElementwiseMul
from iron.ops.eltwise.silu import SiLU
from iron.ops.gemm import GEMM, GEMV, SwiGLUDecode, SwiGLUPrefill

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def shipped(rng, embed, hidden):
    """w_gate, w_up and w_down as a checkpoint ships them: [out, in]."""
    shapes = [(hidden, embed), (hidden, embed), (embed, hidden)]
    return [(0.1 * rng.standard_normal(shape)).astype(bf16) for shape in shapes]


def record(build, x_shape, weights):
    """Capture `build(g, x, w_gate, w_up, w_down)` over the given weights."""
    with capture() as g:
        x = g.input("x", x_shape)
        ws = [g.weight(name, w) for name, w in zip(("w_gate", "w_up", "w_down"), weights)]
        y = build(g, x, *ws)
    return g, y


def recorded_steps(g):
    """Each step's operator, its arguments (graph buffers by name, values a
    step produced by that step's index) and the shapes its spec gives them."""
    produced, steps = {}, []
    for i, step in enumerate(g.steps):
        for name in step.writes:
            produced.setdefault(name, f"step {i}")
        args = [produced.get(name, name) for name in step.args]
        steps.append((step.op, args, [spec.shape for spec in step.specs]))
    return steps


@pytest.mark.parametrize("device", [None, NPU1, NPU2], ids=str)
def test_decode_expansion_is_the_hand_written_chain(device):
    embed, hidden = 256, 512
    rng = np.random.default_rng(40)
    weights = shipped(rng, embed, hidden)
    composite = SwiGLUDecode(embed=embed, hidden=hidden)
    composite = composite if device is None else composite.resolve(device)

    def by_hand(g, x, w_gate, w_up, w_down):
        def on(op):
            return op if device is None else op.resolve(device)

        gate = g(on(GEMV(M=hidden, K=embed)), w_gate, x)
        up = g(on(GEMV(M=hidden, K=embed)), w_up, x)
        act = g(on(SiLU(size=hidden)), gate)
        return g(on(GEMV(M=embed, K=hidden)), w_down, g(on(ElementwiseMul(size=hidden)), act, up))

    g_composite, y_composite = record(lambda g, *a: g(composite, *a), (embed,), weights)
    g_hand, y_hand = record(by_hand, (embed,), weights)
    assert recorded_steps(g_composite) == recorded_steps(g_hand)
    assert [type(s.op) for s in g_composite.steps] == [GEMV, GEMV, SiLU, ElementwiseMul, GEMV]
    # weights are read as shipped: the GEMVs' A is the weight buffer itself
    assert [s.args[0] for s in g_composite.steps if isinstance(s.op, GEMV)] == [
        "w_gate",
        "w_up",
        "w_down",
    ]
    assert all(g_composite.weights[n] is w for n, w in zip(("w_gate", "w_up", "w_down"), weights))

    x = rng.standard_normal(embed).astype(bf16)
    out_composite = run_graph(g_composite, {"x": x})[y_composite.name]
    out_hand = run_graph(g_hand, {"x": x})[y_hand.name]
    assert out_composite.shape == (embed,)
    assert np.array_equal(out_composite.view(np.uint16), out_hand.view(np.uint16))


@pytest.mark.parametrize("b_col_maj", [True, False])
def test_prefill_expansion_is_the_hand_written_chain(b_col_maj):
    rows, embed, hidden = 256, 128, 512
    rng = np.random.default_rng(41)
    as_shipped = shipped(rng, embed, hidden)
    weights = as_shipped if b_col_maj else [np.ascontiguousarray(w.T) for w in as_shipped]
    composite = SwiGLUPrefill(rows=rows, embed=embed, hidden=hidden, b_col_maj=b_col_maj)
    assert [s.shape for s in composite.input_specs()[1:]] == [w.shape for w in weights]

    def by_hand(g, x, w_gate, w_up, w_down):
        gate = g(GEMM(M=rows, K=embed, N=hidden, b_col_maj=b_col_maj), x, w_gate)
        up = g(GEMM(M=rows, K=embed, N=hidden, b_col_maj=b_col_maj), x, w_up)
        h = g(ElementwiseMul(size=rows * hidden), g(SiLU(size=rows * hidden), gate), up)
        return g(GEMM(M=rows, K=hidden, N=embed, b_col_maj=b_col_maj), h, w_down)

    g_composite, y_composite = record(lambda g, *a: g(composite, *a), (rows, embed), weights)
    g_hand, y_hand = record(by_hand, (rows, embed), weights)
    assert recorded_steps(g_composite) == recorded_steps(g_hand)
    assert [s.args[1] for s in g_composite.steps if isinstance(s.op, GEMM)] == [
        "w_gate",
        "w_up",
        "w_down",
    ]

    x = rng.standard_normal((rows, embed)).astype(bf16)
    out_composite = run_graph(g_composite, {"x": x})[y_composite.name]
    out_hand = run_graph(g_hand, {"x": x})[y_hand.name]
    assert out_composite.shape == (rows, embed)
    assert np.array_equal(out_composite.view(np.uint16), out_hand.view(np.uint16))


def test_decode_and_prefill_agree_on_one_row():
    """The same MLP two ways: GEMVs over the shipped weights, and GEMMs
    reading them column-major. Row 0 of a prefill block is a decode step."""
    embed, hidden = 128, 256
    rng = np.random.default_rng(42)
    weights = shipped(rng, embed, hidden)
    x = rng.standard_normal((256, embed)).astype(bf16)
    g_decode, y_decode = record(
        lambda g, *a: g(SwiGLUDecode(embed=embed, hidden=hidden), *a), (embed,), weights
    )
    g_prefill, y_prefill = record(
        lambda g, *a: g(SwiGLUPrefill(rows=256, embed=embed, hidden=hidden), *a),
        (256, embed),
        weights,
    )
    decode_buffers = run_graph(g_decode, {"x": x[0]})
    decode = decode_buffers[y_decode.name]
    prefill = run_graph(g_prefill, {"x": x})[y_prefill.name]
    # float32 sums in another order: judged as the last projection's result
    h = decode_buffers[g_decode.steps[-1].reads[1]]
    tolerance = GEMV(M=embed, K=hidden).tolerance(NPU2, inputs=(weights[2], h))
    assert compare(prefill[0], decode, tolerance)
    assert not compare(prefill[1], decode, tolerance)  # a different row is not


REFUSALS = [
    (SwiGLUDecode, {"embed": 40, "hidden": 512},
     "SwiGLUDecode\\(embed=40, hidden=512\\): a part is refused: GEMV: K=40: a positive multiple of 16"),
    (SwiGLUPrefill, {"rows": 100, "embed": 128, "hidden": 512},
     "SwiGLUPrefill\\(rows=100, .*\\): a part is refused: GEMM: M=100: a multiple of tile_m x 4"),
    (SwiGLUPrefill, {"rows": 256, "embed": 128, "hidden": 96},
     "SwiGLUPrefill\\(.*hidden=96.*\\): a part is refused: GEMM: N=96: a multiple of tile_n=64"),
]  # fmt: skip


@pytest.mark.parametrize("cls, params, message", REFUSALS, ids=lambda v: None)
def test_refusals_name_the_composite_and_its_part(cls, params, message):
    with pytest.raises(OperatorError, match=message):
        cls(**params)


def test_a_part_a_device_refuses_refuses_the_composite_there():
    # one row of a 16384-wide down projection (32 KiB) double buffered, and x
    # (32 KiB), overflow a core: no input tile fits
    wide = SwiGLUDecode(embed=256, hidden=16384)
    with pytest.raises(
        OperatorError,
        match="SwiGLUDecode\\(embed=256, hidden=16384\\): its down part is refused on npu1: "
        "GEMV: tile_size_input=1: one core's buffers take 99332 bytes",
    ):
        wide.resolve(NPU1)
    resolved = SwiGLUDecode(embed=256, hidden=8192).resolve(NPU1).parts()
    assert {p.device for p in resolved.values()} == {NPU1}


def test_a_composite_has_no_spec_of_its_own():
    with pytest.raises(TypeError, match="SwiGLUDecode is a composite"):
        SwiGLUDecode(embed=256, hidden=512).arg_specs()
