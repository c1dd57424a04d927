import json
import multiprocessing
import pickle

import numpy as np
import pytest
from dispatch_fakes import Mystery, N, Scale, expected_outputs, make_model, race_for_key

from iron.core import OperatorError, bf16
from iron.core.cli import main
from iron.dispatch import CompileCache, get_backend, graph
from iron.dispatch.image import Image


def scaled(factor, flags=()):
    @graph(backend="sim", flags=flags)
    def scale(g, x):
        return g(Scale(N, factor), x)  # `factor` comes from the closure

    return scale


def counts():
    sim = get_backend("sim")
    return sim.hits, sim.misses


def compile_once(function, shape=(N,)):
    before = counts()
    function.compile((shape, bf16))
    after = counts()
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


def test_a_truncated_entry_is_rebuilt_not_served():
    w = np.ones(N, bf16)
    assert compile_once(make_model(w, backend="sim"), (1, N)) == (0, 1)
    (entry,) = CompileCache().entries()
    artifact = f"{entry['path']}/artifact.bin"
    with open(artifact, "r+b") as f:
        f.truncate(entry["nbytes"] // 2)
    model = make_model(w, backend="sim")
    assert compile_once(model, (1, N)) == (0, 1)
    x = np.ones((1, N), bf16)
    assert model(x, pos=0).tobytes() == expected_outputs(w, [(x, 0)])[0].tobytes()
    assert CompileCache().read(entry["key"]) is not None


def test_an_address_in_a_parameter_is_refused():
    @graph(backend="sim")
    def odd(g, x):
        return g(Mystery(N, thing=object()), x)

    with pytest.raises(
        OperatorError, match=r"Mystery: thing=<object object at 0x[0-9a-f]+>: .*object address"
    ):
        odd.compile(((N,), bf16))


def test_images_round_trip_through_bytes():
    model = make_model(np.ones(N, bf16), backend="sim")
    version = model.compile(((2, N), bf16))
    image = version.image
    again = Image.from_bytes(image.to_bytes())
    assert again == image
    with pytest.raises(TypeError, match="not an IRON image"):
        Image.from_bytes(pickle.dumps({"not": "an image"}))


def test_two_processes_racing_on_one_key_compile_once(tmp_path):
    log, out = tmp_path / "builds.log", tmp_path / "results.log"
    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(target=race_for_key, args=(tmp_path / "cache", "k" * 64, log, out))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0, 0]
    assert log.read_text().splitlines() == ["built"]
    results = sorted(out.read_text().splitlines())
    assert results == ["artifact-" + "k" * 64 + " False", "artifact-" + "k" * 64 + " True"]


def test_cache_info_and_clear_commands(capsys):
    compile_once(scaled(5.0))
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"][0]["backend"] == "sim" and info["entries"][0]["name"] == "scale"
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert CompileCache().info()["entries"] == 0


def test_doctor_reports_the_backends(capsys, npu_stack):
    npu_stack(present=False)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "backend reference: available" in out and "backend sim: available" in out
    assert "backend npu: unavailable: mlir-aie is missing" in out
    assert "backend auto: sim (passed over: npu)" in out
    assert "compile cache:" in out
