import hashlib
import json
import multiprocessing
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from dispatch_fakes import (
    Mystery,
    N,
    Scale,
    compile_in_process,
    expected_outputs,
    make_model,
    race_for_key,
)

from iron.core import OperatorError, bf16
from iron.core.cli import main
from iron.dispatch import CompileCache, graph
from iron.dispatch.cache import MANIFEST
from iron.dispatch.sim_xrt import SimulatedXrt


def scaled(factor, flags=()):
    @graph(backend="sim", flags=flags)
    def scale(g, x):
        return g(Scale(N, factor), x)  # `factor` comes from the closure

    return scale


def counts(function):
    sim = function.backend  # the instance of the function's own session
    return sim.hits, sim.misses


def compile_once(function, shape=(N,)):
    before = counts(function)
    function.compile((shape, bf16))
    after = counts(function)
    return after[0] - before[0], after[1] - before[1]  # (hits, misses)


def test_identical_graphs_hit_and_give_identical_programs(private_cache):
    assert compile_once(scaled(2.0)) == (0, 1)
    again = scaled(2.0)
    assert compile_once(again) == (1, 0)
    x = np.random.default_rng(0).standard_normal(N).astype(bf16)
    assert (
        again(x).tobytes()
        == scaled(2.0)(x).tobytes()
        == (x.astype(np.float32) * 2).astype(bf16).tobytes()
    )
    assert CompileCache().info()["entries"] == 1


def test_closure_contents_and_flags_are_part_of_the_key():
    assert compile_once(scaled(2.0)) == (0, 1)
    assert compile_once(scaled(3.0)) == (0, 1)  # same code, another closure value
    assert compile_once(scaled(2.0, flags=("trace",))) == (0, 1)
    assert CompileCache().info()["entries"] == 3


def _only_entry():
    (entry,) = CompileCache().entries()
    return entry


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda e: (e / MANIFEST).write_text((e / MANIFEST).read_text()[:40]), "not valid JSON"),
        (lambda e: (e / MANIFEST).write_text("[1, 2, 3]"), "must hold a JSON object, not an"),
        (lambda e: (e / "program0.json").write_text("{}"), "program0.json was missing or changed"),
        (lambda e: (shutil.rmtree(e), e.write_text("a file")), "folder was a file"),
    ],
    ids=["truncated-manifest", "manifest-not-an-object", "changed-file", "folder-is-a-file"],
)
def test_a_damaged_entry_is_rebuilt_and_listed_as_repaired(damage, why, capsys):
    w = np.ones(N, bf16)
    assert compile_once(make_model(w, backend="sim"), (1, N)) == (0, 1)
    entry = _only_entry()
    damage(Path(entry["path"]))
    model = make_model(w, backend="sim")
    assert compile_once(model, (1, N)) == (0, 1)
    x = np.ones((1, N), bf16)
    assert model(x, pos=0).tobytes() == expected_outputs(w, [(x, 0)])[0].tobytes()
    assert why in _only_entry()["repaired"]
    assert CompileCache().info()["repaired"] == [entry["key"]]
    assert main(["cache", "info"]) == 0
    assert "repaired: " in capsys.readouterr().out


class Detonator:
    """Unpickling this calls `open(marker, "w")`: proof that something ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_planted_in_an_entry_is_never_executed(tmp_path):
    marker = tmp_path / "it-ran"
    payload = pickle.dumps(Detonator(marker))
    pickle.loads(payload).close()  # the payload does run when unpickled...
    assert marker.exists()
    marker.unlink()
    w = np.ones(N, bf16)
    assert compile_once(make_model(w, backend="sim"), (1, N)) == (0, 1)
    entry = Path(_only_entry()["path"])
    # ...planted beside the entry's files, and in place of the program with a
    # manifest that vouches for it (checksums match, the contents do not)
    (entry / "image.pkl").write_bytes(payload)
    (entry / "program0.json").write_bytes(payload)
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["files"]["program0.json"] = {
        "nbytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    (entry / MANIFEST).write_text(json.dumps(manifest))
    model = make_model(w, backend="sim")
    assert compile_once(model, (1, N)) == (0, 1)  # rejected, rebuilt
    x = np.ones((1, N), bf16)
    assert model(x, pos=0).tobytes() == expected_outputs(w, [(x, 0)])[0].tobytes()
    assert main(["cache", "info", "--json"]) == 0
    assert not marker.exists()
    (tmp_path / "planted").write_bytes(payload)  # the simulated XRT reads JSON, nothing else
    with pytest.raises(ValueError):
        SimulatedXrt().elf(tmp_path / "planted")
    assert not marker.exists()


def test_entries_hold_data_only():
    compile_once(scaled(2.0))
    entry = Path(_only_entry()["path"])
    names = sorted(p.name for p in entry.iterdir())
    assert names == [
        "designs.json",
        "image.json",
        MANIFEST,
        "operators.json",
        "program0.json",
        "recipes.json",
    ]
    for name in names:
        json.loads((entry / name).read_text())


def test_an_address_in_a_parameter_is_refused():
    @graph(backend="sim")
    def odd(g, x):
        return g(Mystery(N, thing=object()), x)

    with pytest.raises(
        OperatorError, match=r"Mystery: thing=<object object at 0x[0-9a-f]+>: .*object address"
    ):
        odd.compile(((N,), bf16))


def test_two_processes_racing_on_one_key_compile_once(tmp_path):
    log, out = tmp_path / "builds.log", tmp_path / "results.log"
    key = "ab" * 32
    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(target=race_for_key, args=(tmp_path / "cache", key, log, out)) for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0, 0]
    assert log.read_text().splitlines() == ["built"]
    results = sorted(out.read_text().splitlines())
    assert results == [f"artifact-{key} False", f"artifact-{key} True"]


def test_two_processes_compiling_one_graph_compile_it_once(tmp_path):
    out = tmp_path / "counts.log"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    workers = [
        ctx.Process(target=compile_in_process, args=(tmp_path / "cache", out, start))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    start.set()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    assert sorted(out.read_text().splitlines()) == ["0 1", "1 0"]  # (hits, misses) each
    assert len(CompileCache(tmp_path / "cache").entries()) == 1


def test_cache_info_and_clear_commands(capsys):
    compile_once(scaled(5.0))
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"][0]["backend"] == "sim" and info["entries"][0]["name"] == "scale"
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert CompileCache().info()["entries"] == 0


def test_info_without_verifying_reads_sizes_only():
    """What `iron doctor` summarises: a file changed in place at its size
    passes the size check and fails the full one; a truncated one fails both."""
    compile_once(scaled(6.0))
    (entry,) = CompileCache().entries()
    program = Path(entry["path"]) / "program0.json"
    text = program.read_bytes()
    program.write_bytes(text[:-1] + (b" " if text[-1:] != b" " else b"\n"))
    assert CompileCache().info(verify=False)["entries"] == 1
    assert CompileCache().info()["entries"] == 0
    program.write_bytes(text[:-1])
    assert CompileCache().info(verify=False)["entries"] == 0


def test_clear_leaves_foreign_data_and_symlinks_alone(tmp_path, monkeypatch):
    shared = tmp_path / "shared"  # IRON_CACHE_HOME pointed at a folder other tools use
    (shared / "ab").mkdir(parents=True)
    (shared / "ab" / "notes.txt").write_text("another tool's")
    foreign_entry = shared / "cd" / ("cd" + "0" * 62)
    foreign_entry.mkdir(parents=True)
    (foreign_entry / "data.bin").write_bytes(b"not ours")
    outside = tmp_path / "outside"
    (outside / ("ef" + "1" * 62)).mkdir(parents=True)
    (outside / ("ef" + "1" * 62) / MANIFEST).write_text(json.dumps({"format": "iron-cache/2"}))
    (shared / "ef").symlink_to(outside)
    (shared / "12").mkdir()
    (shared / "12" / ("12" + "3" * 62)).symlink_to(outside / ("ef" + "1" * 62))
    monkeypatch.setenv("IRON_CACHE_HOME", str(shared))
    compile_once(scaled(7.0))
    assert CompileCache().info()["entries"] == 1
    assert CompileCache().clear() == 1
    assert (shared / "ab" / "notes.txt").read_text() == "another tool's"
    assert (foreign_entry / "data.bin").read_bytes() == b"not ours"
    assert (outside / ("ef" + "1" * 62) / MANIFEST).exists()
    assert (shared / "12" / ("12" + "3" * 62)).is_symlink()
    assert CompileCache().info()["entries"] == 0


def test_doctor_reports_the_backends(capsys, npu_stack):
    npu_stack(present=False)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "backend reference: available" in out and "backend sim: available" in out
    assert "backend npu: unavailable: mlir-aie is missing" in out
    assert "backend auto: sim (passed over: npu)" in out
    assert re.search(r"device steps: \d+ of \d+ registered operators have designs", out)
    assert "compile cache:" in out
