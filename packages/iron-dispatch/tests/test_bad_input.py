"""Bad input to graph functions: refused with the function, the parameter
and the rule named, and a version that fails to compile changes nothing."""

import importlib
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from dispatch_fakes import ROWS, Mul, N, Scale, SumRows, WriteRow, make_model

from iron.alloc import OverlapError
from iron.core import bf16, capture
from iron.core.cli import main
from iron.dispatch import CompileCache, OperatorSequence, graph
from iron.dispatch.cache import MANIFEST


def chain():
    @graph(backend="reference")
    def twice(g, x):
        return g(Scale(x.shape[0]), g(Scale(x.shape[0]), x))

    return twice


@pytest.fixture
def no_memory(monkeypatch):
    """Buffers of a version past 1 GiB cannot be allocated, on any host (as
    512 GiB cannot be on most)."""
    graph_module = importlib.import_module("iron.dispatch.graph")  # the module, not the function
    real = graph_module.allocate

    def allocate(image, **kw):
        if max(image.sizes.values()) > 2**30:
            raise MemoryError(f"cannot allocate {max(image.sizes.values())} bytes")
        return real(image, **kw)

    monkeypatch.setattr(graph_module, "allocate", allocate)


def test_a_version_whose_memory_cannot_be_allocated_leaves_the_function_as_it_was(no_memory):
    twice = chain()
    small = np.ones(256, bf16)
    first = twice(small)
    size, versions = twice.arena.size, dict(twice.versions)
    with pytest.raises(MemoryError):
        twice.compile(x=((2**38,), bf16))  # 512 GiB buffers: no host here holds them
    assert twice.arena.size == size and twice.versions == versions
    assert twice(small).tobytes() == first.tobytes()  # the version that worked still works


def chain_sequence():
    """x -> h0 -> h1 -> y: h0 and h1 both live at the second step."""
    with capture("chain") as g:
        x = g.input("x", N)
        h0 = g(Scale(N), x, name="h0")
        h1 = g(Scale(N), h0, name="h1")
        g(Mul(N), h0, h1)
    return OperatorSequence.from_graph(g)


def stateful(w):
    """A weight, a state and a part whose size follows the input."""

    @graph(backend="reference")
    def f(g, x, *, pos):
        w_ = g.weight("w", w)
        cache = g.state("cache", (ROWS, N))
        g(WriteRow(N, ROWS), g(Mul(N), w_, w_), cache, row=pos)
        return g(Scale(x.shape[0]), x), g(SumRows(N, ROWS), cache, valid=pos + 1)

    return f


def test_a_failed_version_leaves_weights_and_states_as_they_were(no_memory):
    f = stateful(np.ones(N, bf16))
    f(np.ones(256, bf16), pos=0)
    residents = f.residents
    states, weights = dict(residents.states), dict(residents.weights)
    regions = dict(residents.memory.buffer.regions)
    with pytest.raises(MemoryError):
        f.compile(x=((2**38,), bf16))
    assert residents.states == states and residents.weights == weights
    assert residents.memory.buffer.regions == regions
    _, total = f(np.ones(256, bf16), pos=1)
    assert float(total[0]) == 2.0  # rows 0 and 1 of the state: w * w each


def test_weights_are_uploaded_once_and_reload_weights_uploads_them_again():
    w = np.ones(N, bf16)
    model = make_model(w, poison=False)
    x = np.ones((1, N), bf16)
    model.compile(x=x)
    model.load()
    before = model(x, pos=0)
    w[...] = 2  # changed in place after load: not seen until reloaded
    model.reset_states()
    assert model(x, pos=0).tobytes() == before.tobytes()
    assert model.reload_weights("w") == w.nbytes
    model.reset_states()
    assert float(model(x, pos=0)[0]) == 2 * float(before[0])
    with pytest.raises(KeyError, match="model has no weight 'nope' \\(weights: w\\)"):
        model.reload_weights("nope")


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_poison_mode_refuses_to_run_on_a_weight_changed_after_load(backend):
    w, v = np.ones(N, bf16), np.ones(N, bf16)

    @graph(backend=backend, poison=True)
    def f(g, x):
        return g(Mul(N), g(Mul(N), x, g.weight("w", w)), g.weight("v", v))

    x = np.ones(N, bf16)
    f.compile(x=x)
    f.load()
    assert float(f(x)[0]) == float(f(x)[0]) == 1.0  # unchanged weights run, call after call
    w[3] = 5
    v[...] = 2
    with pytest.raises(
        RuntimeError,
        match=r"f: weight\(s\) 'w', 'v' changed in place after load\(\), so the device holds "
        r"the old values; call f.reload_weights\('w', 'v'\) to upload them",
    ):
        f(x)
    assert f.reload_weights("w") == w.nbytes
    with pytest.raises(RuntimeError, match=r"weight\(s\) 'v' changed"):
        f(x)
    f.reload_weights()
    np.testing.assert_array_equal(f(x).astype(np.float32), (w * v).astype(np.float32))


def test_write_state_refuses_a_broadcast_or_a_cast():
    model = make_model(np.ones(N, bf16))
    model.compile(x=((1, N), bf16))
    with pytest.raises(
        ValueError, match=rf"state 'cache' is \({ROWS}, {N}\) of bf16, got \(\) of bf16"
    ):
        model.write_state("cache", np.zeros((), bf16))
    with pytest.raises(ValueError, match=r"got .* of float32"):
        model.write_state("cache", np.zeros((ROWS, N), np.float32))


@pytest.mark.parametrize("pos, shown", [(1.5, "1.5"), ("3", "'3'"), (True, "True")])
def test_per_call_values_must_be_ints(pos, shown):
    model = make_model(np.ones(N, bf16))
    with pytest.raises(TypeError, match=f"model: per-call value pos must be an int, got {shown}"):
        model(np.ones((1, N), bf16), pos=pos)


def test_load_checks_its_arguments():
    model = make_model(np.ones(N, bf16))
    model.compile(x=((1, N), bf16))
    with pytest.raises(ValueError, match=r"model\.load: piece_bytes must be >= 1, got 0"):
        model.load(piece_bytes=0)
    with pytest.raises(TypeError, match=r"model\.load: piece_bytes must be an int, got 1\.5"):
        model.load(piece_bytes=1.5)
    with pytest.raises(TypeError, match=r"model\.load: release must be callable"):
        model.load(release="yes")
    with pytest.raises(TypeError, match=r"model\.load: copy must be callable"):
        model.load(copy="yes")
    with pytest.raises(ValueError, match=r"model\.load: threads must be >= 1, got 0"):
        model.load(threads=0)
    with pytest.raises(TypeError, match=r"model\.load: threads must be an int or None, got True"):
        model.load(threads=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_failed_upload_counts_no_weight_it_did_not_finish(threads):
    """The copy fails on the second weight's second piece: the first weight
    counts as uploaded, the second does not, and the next load uploads it."""
    a, b = np.full(N, 2, bf16), np.full(N, 3, bf16)

    @graph(backend="reference")
    def product(g, x):
        return g(Mul(N), g(Mul(N), x, g.weight("a", a)), g.weight("b", b))

    product.compile(((N,), bf16))
    second_of_b = b[N // 2 :].__array_interface__["data"][0]

    def failing(target, piece):
        if piece.__array_interface__["data"][0] == second_of_b:
            raise OSError("the disk went away")
        np.copyto(target, piece)

    with pytest.raises(OSError, match="the disk went away"):
        product.load(copy=failing, piece_bytes=a.nbytes // 2, threads=threads)
    assert product.load(threads=threads) == b.nbytes
    assert float(product(np.ones(N, bf16))[0]) == 6.0


@pytest.mark.parametrize(
    "kwargs, error, rule",
    [
        ({"mode": "fast"}, ValueError, "mode='fast': one of fused, separate, compare"),
        ({"device": 2}, TypeError, "device must be a Device or a device name, got int"),
        ({"device": "npu9"}, ValueError, "npu9"),
        ({"flags": "trace"}, TypeError, "flags must be a sequence of strings"),
        ({"poison": "yes"}, TypeError, "poison must be True, False or None"),
    ],
)
def test_graph_options_are_checked_when_the_function_is_made(kwargs, error, rule):
    with pytest.raises(error, match=rule):
        graph(lambda g, x: x, name="f", **kwargs)


@pytest.mark.parametrize(
    "spec, rule",
    [
        ((1, 2, 3), r"model.compile: input x: a \(shape, dtype\) pair"),
        ("big", r"model.compile: input x: a \(shape, dtype\) pair"),
        (((1, -2), bf16), r"model.compile: input x: a shape of non-negative ints, got \(1, -2\)"),
        ((("a",), bf16), r"model.compile: input x: a shape of non-negative ints"),
    ],
)
def test_compile_names_the_input_whose_spec_is_malformed(spec, rule):
    model = make_model(np.ones(N, bf16))
    with pytest.raises(TypeError, match=rule):
        model.compile(x=spec)


# ---- a weight reshaped in place, the simulated XRT's arguments, planner results ----


def test_reload_weights_refuses_a_weight_reshaped_in_place_and_the_function_keeps_working():
    w = np.ones(N, bf16)
    model = make_model(w, poison=False)
    x = np.ones((1, N), bf16)
    model.compile(x=x)
    model.load()
    before = model(x, pos=0)
    w.shape = (16, N // 16)  # the same bytes, another shape
    rule = (
        rf"model.reload_weights: weight 'w' was compiled as \({N},\) of bf16, but its array is "
        rf"now \(16, {N // 16}\) of bf16 \(reshaped, retyped or moved in place\); a weight is "
        "uploaded in the shape, dtype and layout it was compiled with"
    )
    with pytest.raises(ValueError, match=rule):
        model.reload_weights("w")
    with pytest.raises(ValueError, match=rule):
        model.reload_weights()
    model.reset_states()
    assert model(x, pos=0).tobytes() == before.tobytes()  # still usable, on the uploaded weight
    w.shape = (N,)
    w[...] = 2
    assert model.reload_weights("w") == w.nbytes
    model.reset_states()
    assert float(model(x, pos=0)[0]) == 2 * float(before[0])


def test_the_simulated_xrt_refuses_what_xrt_refuses():
    from iron.dispatch.program import Program
    from iron.dispatch.sim_xrt import SimulatedXrt

    xrt = SimulatedXrt()
    device = xrt.device(0)
    bo = xrt.bo(device, 64)
    with pytest.raises(ValueError, match="sync: direction 'sideways' is neither XCL_BO_SYNC_BO_TO"):
        bo.sync("sideways", 64, 0)
    with pytest.raises(ValueError, match="bo: nbytes must be an int >= 0, got -1"):
        xrt.bo(device, -1)
    assert xrt.bo(device, 0).size() == 1  # XRT allocates at least a byte
    program = Program(name="p", device="npu2", steps=(), sizes=(64, 64, 64), words=())
    run = xrt.run(xrt.kernel(xrt.hw_context(device, program), "main:sequence"))
    run.set_arg(2, bo)
    with pytest.raises(
        IndexError, match=r"program p: set_arg index 3 is not one of its 3 arguments \(0..2\)"
    ):
        run.set_arg(3, bo)
    with pytest.raises(IndexError, match="set_arg index -1 is not one of its 3 arguments"):
        run.set_arg(-1, bo)


def test_an_overlapping_plan_from_the_planner_is_refused(monkeypatch):
    """A planner that put two live intermediates on one byte would give
    wrong numbers silently: the layout checks every plan in full."""
    from iron.alloc import Plan
    from iron.dispatch import layout

    def overlapping(ranges, sizes, alignment, **kw):
        return Plan(dict.fromkeys(ranges, 0), max(sizes[n] for n in ranges), alignment=alignment)

    monkeypatch.setattr(layout, "place", overlapping)
    with pytest.raises(
        OverlapError, match=r"check: 'h\d' \(steps \[\d, \d\], bytes \[0, 512\)\) overlaps"
    ):
        chain_sequence()


def test_a_transient_placed_on_a_resident_or_past_the_arena_is_refused(monkeypatch):
    from iron.alloc import ArenaPlan

    w = np.ones(N, bf16)

    @graph(backend="reference")
    def f(g, x):
        return g(Scale(N), g(Mul(N), x, g.weight("w", w)))

    real = ArenaPlan.place_image

    def onto_the_weight(self, steps, sizes, residents=None, **kw):
        offsets = real(self, steps, sizes, residents, **kw)
        return {n: 0 for n in offsets}  # every transient on the weight's bytes

    monkeypatch.setattr(ArenaPlan, "place_image", onto_the_weight)
    with pytest.raises(OverlapError, match="overlaps"):
        f.compile(((N,), bf16))
    assert f.versions == {} and f.arena.size == 0  # all or nothing

    def past_the_end(self, steps, sizes, residents=None, **kw):
        offsets = real(self, steps, sizes, residents, **kw)
        return {n: o + (0 if n in (residents or {}) else 2**20) for n, o in offsets.items()}

    monkeypatch.setattr(ArenaPlan, "place_image", past_the_end)
    with pytest.raises(OverlapError, match=r"outside the arena \[0, \d+\)"):
        f.compile(((N,), bf16))


# ---- the compile cache: links are never followed, special files never read ----


def cached_scale():
    @graph(backend="sim")
    def scale(g, x):
        return g(Scale(N, 3.0), x)

    return scale


def planted(root, tmp_path):
    """Compile once to learn the entry's key, then remove the entry: the
    next compile builds it again, past whatever a test plants."""
    cached_scale().compile(((N,), bf16))
    (entry,) = CompileCache(root).entries()
    shutil.rmtree(entry["path"])
    outside = tmp_path / "outside"
    outside.mkdir()
    return entry["key"], outside


def finishes(fn, seconds=60):
    """fn() returns within `seconds` (a read that waits on a FIFO never would)."""
    done = []
    thread = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"still running after {seconds} s"
    return done[0]


def test_a_lock_planted_as_a_link_never_touches_its_target(private_cache, tmp_path):
    key, outside = planted(private_cache, tmp_path)
    precious = outside / "precious.txt"
    precious.write_text("keep me")
    lock = private_cache / key[:2] / f"{key}.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(precious)
    scale = cached_scale()
    scale.compile(((N,), bf16))
    assert (scale.backend.hits, scale.backend.misses) == (0, 1)
    assert precious.read_text() == "keep me"
    assert not lock.is_symlink()


def test_a_dangling_cachedir_tag_link_creates_nothing_outside(private_cache, tmp_path):
    _, outside = planted(private_cache, tmp_path)
    tag = private_cache / "CACHEDIR.TAG"
    tag.unlink()
    tag.symlink_to(outside / "created-by-the-cache")
    cached_scale().compile(((N,), bf16))
    assert not (outside / "created-by-the-cache").exists()
    assert not tag.is_symlink() and tag.read_text().startswith("Signature: 8a477f597d28d172")


def test_a_prefix_folder_replaced_by_a_link_keeps_entries_inside_the_root(private_cache, tmp_path):
    key, outside = planted(private_cache, tmp_path)
    prefix = private_cache / key[:2]
    shutil.rmtree(prefix)
    prefix.symlink_to(outside, target_is_directory=True)
    cached_scale().compile(((N,), bf16))
    assert list(outside.iterdir()) == []
    assert not prefix.is_symlink()
    assert [e["key"] for e in CompileCache(private_cache).entries()] == [key]


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_manifest_that_is_not_a_regular_file_is_refused_never_read(private_cache, kind, capsys):
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("this platform has no FIFOs")
    cached_scale().compile(((N,), bf16))
    (entry,) = CompileCache(private_cache).entries()
    manifest = Path(entry["path"]) / MANIFEST
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.symlink_to("/dev/zero")
    what = "a FIFO" if kind == "fifo" else "a symlink"
    assert finishes(lambda: main(["cache", "info"])) == 0
    out = capsys.readouterr().out
    assert (
        f"invalid: the manifest {MANIFEST} was refused: {manifest} is {what}, not a regular file"
        in out
    )
    assert finishes(lambda: CompileCache(private_cache).clear()) == 0  # not ours to remove
    scale = cached_scale()
    finishes(lambda: scale.compile(((N,), bf16)))  # rebuilt in its place
    (entry,) = CompileCache(private_cache).entries()
    assert f"{what}, not a regular file" in entry["repaired"]
