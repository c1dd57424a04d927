"""Bad input to graph functions: refused with the function, the parameter
and the rule named, and a version that fails to compile changes nothing."""

import importlib
import json
import os
import re
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
from iron.dispatch.pipeline import OPERATORS
from iron.dispatch.program import Program, ProgramStep
from iron.dispatch.runtime import scratchpad_layout
from iron.dispatch.sim_xrt import SimulatedXrt


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
        ({"mode": "fast"}, ValueError, "mode='fast': one of auto, fused, separate, compare"),
        ({"image": "pdi"}, ValueError, "image='pdi': None, 'elf' or 'xclbin'"),
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
    """fn() returns or raises within `seconds` (a read that waits on a FIFO
    never would)."""
    done = []

    def run():
        try:
            done.append((True, fn()))
        except BaseException as error:  # raised again below, in the test's thread
            done.append((False, error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"still running after {seconds} s"
    ok, value = done[0]
    if not ok:
        raise value
    return value


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
        f"invalid: the manifest {MANIFEST} was refused: {manifest}: is {what}, not a regular file"
        in out
    )
    assert finishes(lambda: CompileCache(private_cache).clear()) == 0  # not ours to remove
    scale = cached_scale()
    finishes(lambda: scale.compile(((N,), bf16)))  # rebuilt in its place
    (entry,) = CompileCache(private_cache).entries()
    assert f"{what}, not a regular file" in entry["repaired"]


# ---- JSON of the wrong type, duplicate keys (issue 28 item 8) ----


def _tampered(root, change):
    """Compile once, then rewrite the entry's manifest with `change(manifest)`."""
    cached_scale().compile(((N,), bf16))
    (entry,) = CompileCache(root).entries()
    path = Path(entry["path"]) / MANIFEST
    text = change(json.loads(path.read_text()))
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return entry["key"]


@pytest.mark.parametrize(
    "change, why",
    [(lambda m: {**m, "mode": 3}, "mode=3: must be a string, not an integer"),
     (lambda m: {**m, "created": "yesterday"}, "created='yesterday': must be a number, not a str"),
     (lambda m: {**m, "files": {k: {**v, "nbytes": str(v["nbytes"])} for k, v in m["files"].items()}},
      "nbytes='"),
     (lambda m: {**m, "files": {k: {**v, "nbytes": float(v["nbytes"])} for k, v in m["files"].items()}},
      "must be an integer, not a number"),
     (lambda m: {**m, "files": {"../../outside": {"nbytes": 1, "sha256": "0"}}},
      "files names '../../outside', which lies outside the entry"),
     (lambda m: '{"format": "iron-cache/2", ' + json.dumps(m)[1:], "key 'format' appears twice")],
    ids=["string-mode", "string-created", "string-nbytes", "float-nbytes", "outside", "twice"],
)  # fmt: skip
def test_a_manifest_field_of_the_wrong_type_is_an_invalid_entry_named_and_rebuilt(
    private_cache, capsys, change, why
):
    key = _tampered(private_cache, change)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"{key[:16]}  invalid: the manifest {MANIFEST} was refused: " in out and why in out
    scale = cached_scale()
    scale.compile(((N,), bf16))
    assert (scale.backend.hits, scale.backend.misses) == (0, 1)
    assert why in CompileCache(private_cache).entries()[0]["repaired"]


def test_cache_info_shows_a_name_from_a_manifest_escaped(private_cache, capsys):
    _tampered(private_cache, lambda m: {**m, "name": "\x1b]0;owned\x07scale"})
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]0;owned\\x07scale" in out


def test_a_program_field_of_the_wrong_type_is_refused_naming_the_file_and_field(tmp_path):
    scale = cached_scale()
    scale.compile(((N,), bf16))
    (version,) = scale.versions.values()
    program = json.loads(Path(version.image.elves[0]).read_text())
    cases = [({**program, "sizes": [str(program["sizes"][0]), *program["sizes"][1:]]},
              "sizes[0]='"),
             ({**program, "trace_size": 0.0}, "trace_size=0.0: must be an integer, not a number"),
             ({**program, "steps": [{**program["steps"][0], "device": 7}]},
              "steps[0].device=7: must be a string or null, not an integer"),
             ({**program, "steps": [{**program["steps"][0], "reads": [True]}]},
              "steps[0].reads[0]=True: must be an integer, not true or false")]  # fmt: skip
    path = tmp_path / "program0.json"
    for data, rule in cases:
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=re.escape(f"{path}: {rule}")):
            SimulatedXrt().elf(path)


def test_an_operator_record_of_the_wrong_type_is_refused_naming_the_file_and_field(tmp_path):
    step = ProgramStep(index=0, operator="Scale", device=None, digest=None, host="k1", args=(),
                       reads=(), writes=(), params=())  # fmt: skip
    program = Program(name="p", device="npu2", steps=(step,), sizes=(), words=())
    (tmp_path / "program0.json").write_text(program.to_json())
    record = {
        "class": "iron.ops.eltwise.relu:ReLU",
        "params": {"size": 64},
        "device": ["npu2", "4"],
    }
    (tmp_path / OPERATORS).write_text(json.dumps({"k1": record}))
    with pytest.raises(RuntimeError, match=re.escape(
        f"{tmp_path / OPERATORS}: k1.device[1]='4': must be an integer, not a string"
    )):  # fmt: skip
        SimulatedXrt().elf(tmp_path / "program0.json")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no FIFOs")
def test_a_program_or_its_parameter_table_that_is_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "program0.json")
    with pytest.raises(ValueError, match=r"program0\.json: is a FIFO, not a regular file"):
        finishes(lambda: SimulatedXrt().elf(tmp_path / "program0.json"), 20)
    os.mkfifo(tmp_path / "program0.params.txt")
    with pytest.raises(ValueError, match=r"program0\.params\.txt: is a FIFO, not a regular file"):
        finishes(lambda: scratchpad_layout(str(tmp_path / "program0.elf")), 20)


def test_a_parameter_table_line_that_cannot_be_read_names_the_file_and_line(tmp_path):
    (tmp_path / "p.params.txt").write_text("2\npos 0 i32 core\npos 1 i32 core\n")
    with pytest.raises(ValueError, match=r"p\.params\.txt: line 3: parameter pos appears twice"):
        scratchpad_layout(str(tmp_path / "p.elf"))
    (tmp_path / "p.params.txt").write_text("1\npos zero\n")
    with pytest.raises(ValueError, match=r"p\.params\.txt: line 2: not `<name> <index>"):
        scratchpad_layout(str(tmp_path / "p.elf"))


# ---- IRON_* values, interrupts, the CLI (items 4 and 5; issue 31 item 4) ----


@pytest.mark.parametrize(
    "value, rule",
    [("relative", "IRON_CACHE_HOME='relative': must be an absolute path"),
     ("/dev/null", "IRON_CACHE_HOME='/dev/null': is a character device, not a folder")],
)  # fmt: skip
@pytest.mark.parametrize("action", ["info", "clear"])
def test_a_bad_cache_home_is_one_line_and_exit_2(capsys, monkeypatch, value, rule, action):
    monkeypatch.setenv("IRON_CACHE_HOME", value)
    assert main(["cache", action]) == 2
    out, err = capsys.readouterr()
    assert err == f"iron: {rule}" + err.split(rule)[1] and err.count("\n") == 1 and out == ""


def test_a_graph_refuses_a_bad_cache_home_naming_it(monkeypatch):
    monkeypatch.setenv("IRON_CACHE_HOME", "relative")
    with pytest.raises(ValueError, match="IRON_CACHE_HOME='relative': must be an absolute path"):
        cached_scale()


def test_an_interrupted_clear_leaves_no_half_entry_and_the_next_clear_finishes(
    private_cache, monkeypatch
):
    cached_scale().compile(((N,), bf16))
    (entry,) = CompileCache(private_cache).entries()
    real = shutil.rmtree

    def interrupted(path, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        CompileCache(private_cache).clear()
    assert not Path(entry["path"]).exists() and CompileCache(private_cache).entries() == []
    monkeypatch.setattr(shutil, "rmtree", real)
    CompileCache(private_cache).clear()
    assert list(private_cache.rglob("*")) == [private_cache / "CACHEDIR.TAG"]
