import threading
import tracemalloc

import numpy as np
import pytest
from dispatch_fakes import ROWS, Mul, N, Scale, expected_outputs, make_model

from iron.alloc import ArenaPlan
from iron.core import bf16
from iron.dispatch import arena_layout, graph


@pytest.fixture(
    params=[("reference", "npu2"), ("sim", "npu1"), ("sim", "npu2")],
    ids=["reference", "sim-npu1-xclbin", "sim-npu2-elf"],
)
def target(request):
    """Every graph test runs on the host and on both devices' packaging plans."""
    backend, device = request.param
    return {"backend": backend, "device": device}


@pytest.fixture
def weight():
    return np.random.default_rng(1).standard_normal(N).astype(bf16)


def rows(n, seed):
    return np.random.default_rng(seed).standard_normal((n, N)).astype(bf16)


def test_two_shapes_two_versions_one_arena(weight, target):
    model = make_model(weight, **target)
    prefill, decode = rows(4, 2), rows(1, 3)
    model.compile(x=((4, N), bf16))
    model.compile(x=((1, N), bf16))
    model.load()
    assert len(model.versions) == 2 and model.arena.size > 0
    first, second = (v.layout.scratch for v in model.versions.values())
    assert first["w"] == second["w"] and first["cache"] == second["cache"]
    private = 0
    for version in model.versions.values():
        alone = ArenaPlan()
        residents = {n: n for n in version.layout.host_addressed}
        assert residents.keys() == {"w", "cache"}
        arena_layout(version.runlist, alone, residents)
        private += alone.size
    assert model.arena.size < private
    got = [model(prefill, pos=0), model(decode, pos=4)]  # decode reads the rows prefill wrote
    want = expected_outputs(weight, [(prefill, 0), (decode, 4)])
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_a_later_version_grows_the_arena_and_earlier_ones_keep_working(weight, target):
    model = make_model(weight, **target)
    decode, prefill = rows(1, 4), rows(4, 5)
    calls = [(decode, 0), (decode, 1)]
    outs = [model(decode, pos=0), model(decode, pos=1)]
    arena = model.residents.memory
    small, generation = model.arena.size, arena.generation
    outs.append(model(prefill, pos=2))  # JIT: compiled on first use
    calls.append((prefill, 2))
    assert model.arena.size > small and arena.generation == generation + 1
    outs.append(model(decode, pos=6))  # the first version rebinds to the grown arena, state intact
    calls.append((decode, 6))
    assert [o.tobytes() for o in outs] == [w.tobytes() for w in expected_outputs(weight, calls)]


def test_aot_and_jit_agree(weight, target):
    x = rows(4, 6)
    aot = make_model(weight, **target)
    aot.compile(((4, N), bf16))
    aot.load()
    jit = make_model(weight, **target)
    assert aot(x, pos=3).tobytes() == jit(x, pos=3).tobytes()


def test_one_version_serves_every_position(weight, target):
    model = make_model(weight, **target)
    x = rows(1, 7)
    outs = [model(x, pos=p) for p in range(ROWS)]
    assert len(model.versions) == 1
    want = expected_outputs(weight, [(x, p) for p in range(ROWS)])
    assert [o.tobytes() for o in outs] == [w.tobytes() for w in want]


def test_states_are_readable_writable_and_reset(weight, target):
    model = make_model(weight, **target)
    x = rows(2, 8)
    model(x, pos=5)
    cache = model.read_state("cache")
    assert (
        cache[5:7].tobytes()
        == (x.astype(np.float32) * weight.astype(np.float32)).astype(bf16).tobytes()
    )
    model.reset_states()
    assert not model.read_state("cache").astype(np.float32).any()
    with pytest.raises(KeyError, match="model has no state 'nope' \\(states: cache\\)"):
        model.read_state("nope")


def test_load_uploads_in_pieces_and_releases_each_once(target):
    w = np.random.default_rng(2).standard_normal(N).astype(bf16)  # 512 B
    model = make_model(w, **target)
    model.compile(((1, N), bf16))
    released = []
    assert model.load(release=released.append, piece_bytes=96) == w.nbytes
    starts = [p.__array_interface__["data"][0] - w.__array_interface__["data"][0] for p in released]
    assert starts == list(range(0, 512, 96)) and sum(p.nbytes for p in released) == 512
    assert model.load(release=released.append) == 0  # nothing left to upload
    assert len(released) == 6


def test_load_fills_each_piece_with_the_copy_it_is_given(target):
    w = np.random.default_rng(3).standard_normal(N).astype(bf16)
    model = make_model(w, **target)
    model.compile(((1, N), bf16))
    calls = []

    def negated(target, piece):  # a copy the arena can tell apart from np.copyto's
        calls.append((target.shape, piece.shape))
        np.negative(piece, out=target)

    assert model.reload_weights(copy=negated, piece_bytes=128) == w.nbytes
    assert calls == [((64,), (64,))] * 4
    x = np.ones((1, N), bf16)
    assert np.array_equal(model(x, pos=0), expected_outputs(-w, [(x, 0)])[0])


def two_weights(a, b):
    @graph(backend="reference")
    def product(g, x):
        return g(Mul(N), g(Mul(N), x, g.weight("a", a)), g.weight("b", b))

    product.compile(((N,), bf16))
    return product


@pytest.mark.parametrize("threads", [1, 3])
def test_load_copies_on_its_threads_and_releases_every_piece_in_order(threads):
    a, b = (np.random.default_rng(s).standard_normal(N).astype(bf16) for s in (8, 9))
    model = two_weights(a, b)
    workers, released = set(), []

    def copy(target, piece):
        workers.add(threading.current_thread())
        np.copyto(target, piece)

    uploaded = model.load(release=released.append, piece_bytes=96, copy=copy, threads=threads)
    assert uploaded == 2 * a.nbytes
    if threads == 1:
        assert workers == {threading.current_thread()}
    else:
        assert threading.current_thread() not in workers and 1 <= len(workers) <= threads
    addresses = [p.__array_interface__["data"][0] for p in released]
    pieces = range(0, a.nbytes, 96)
    assert addresses == [w.__array_interface__["data"][0] + at for w in (a, b) for at in pieces]
    x = np.random.default_rng(10).standard_normal(N).astype(bf16)
    want = Mul(N).reference(Mul(N).reference(x, a), b)
    assert model(x).tobytes() == want.tobytes()


def test_loading_a_large_weight_never_holds_more_than_one_piece(tmp_path):
    """A memory-mapped 256 MiB weight uploads in 64 MiB pieces with no
    whole-array temporary (tracemalloc sees numpy's allocations)."""
    elements = 128 * 2**20
    path = tmp_path / "weight.bin"
    path.write_bytes(b"")
    with open(path, "r+b") as f:
        f.truncate(elements * 2)
    w = np.memmap(path, dtype=bf16, mode="r", shape=(elements,))

    @graph(backend="reference")
    def big(g, x):
        return g(Mul(elements), x, g.weight("w", w))

    big.compile(((elements,), bf16))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        pieces = []
        big.load(release=pieces.append)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(pieces) == 4
    extra = peak - before - big.arena.size  # beyond the arena itself
    assert extra < 64 * 2**20, f"{extra / 2**20:.1f} MiB beyond the arena"


# ---- errors ----


def test_calling_errors(weight, target):
    model = make_model(weight, **target)
    with pytest.raises(TypeError, match="model takes 1 input\\(s\\) \\(x\\), got 2"):
        model(rows(1, 0), rows(1, 0), pos=0)
    with pytest.raises(TypeError, match="per-call values missing \\['pos'\\]"):
        model(rows(1, 0))
    with pytest.raises(TypeError, match="unexpected \\['bogus'\\]"):
        model(rows(1, 0), pos=0, bogus=1)


def test_definition_errors(weight):
    with pytest.raises(TypeError, match="must take the builder `g`"):
        graph(lambda *, pos: None)
    with pytest.raises(TypeError, match="\\*args and \\*\\*kwargs are not supported"):
        graph(lambda g, *xs: None)

    @graph(backend="reference")
    def returns_weight(g, x):
        g(Scale(N), x)
        return g.weight("w", weight)

    with pytest.raises(TypeError, match="returns w, a weight; return values computed by steps"):
        returns_weight(rows(1, 0)[0])
