"""The device path: programs of designs, fused and separate, run by the
simulated XRT device, and their MLIR."""

import itertools
import multiprocessing
import re

import numpy as np
import pytest
from dispatch_fakes import Add32, AddK, AddOne, OffByOne, Twice, compile_registered

from iron.core import Device, bf16
from iron.design import to_mlir
from iron.dispatch import OperatorSequence, Session, get_backend, graph
from iron.dispatch.fusion import program_mlir
from iron.dispatch.memory import Arena
from iron.dispatch.program import FusionError
from iron.dispatch.sim_xrt import TRACE_RECORD, SimulatedXrt, read_trace

SIZE = 1024


#: every behaviour runs on both devices' packaging plans: npu1's xclbin, npu2's full ELF
DEVICES = pytest.mark.parametrize("device", ["npu1", "npu2"])


def chain(backend, mode="auto", device="npu2", **kw):
    """Designs and a host step mixed; one per-call value."""

    @graph(backend=backend, mode=mode, device=device, **kw)
    def mixed(g, x, *, pos):
        h = g(AddOne(SIZE), x)
        h = g(AddK(SIZE), h, k=pos * 3 + 1)
        h = g(Twice(SIZE), h)
        return g(AddOne(SIZE), h)

    return mixed


def layers(count, backend="sim", mode="auto", device="npu2"):
    @graph(backend=backend, mode=mode, device=device)
    def stack(g, x, *, pos):
        for _ in range(count):
            x = g(AddK(SIZE), x, k=pos)
        return x

    return stack


def inputs():
    return np.arange(SIZE, dtype=np.int32) * 7 - 300


@pytest.mark.parametrize(
    "mode, device, image",
    [("auto", "npu1", "xclbin"), ("auto", "npu2", "elf"), ("fused", "npu2", "elf"),
     ("separate", "npu2", "xclbin"), ("separate", "npu1", "xclbin")],
)  # fmt: skip
def test_fused_and_separate_on_the_simulated_device_give_the_reference_bits(mode, device, image):
    x = inputs()
    want = chain("reference")(x, pos=5)
    assert np.array_equal(want, ((x + 1 + 16) * 2) + 1)
    sim = chain("sim", mode, device)
    got = sim(x, pos=5)
    assert got.dtype == np.int32 and got.tobytes() == want.tobytes()
    assert sim(x, pos=-2).tobytes() == chain("reference")(x, pos=-2).tobytes()
    (version,) = sim.versions.values()
    assert version.plan.image == image and bool(version.image.xclbin) == (image == "xclbin")


@DEVICES
def test_the_summary_says_how_many_steps_ran_designs(device):
    mixed = chain("sim", device=device)
    mixed(inputs(), pos=0)
    (version,) = mixed.versions.values()
    assert version.image.design_summary() == (
        "3 of 4 steps ran designs; 1 fell back to host models (Twice x1)"
    )
    assert "3 of 4 steps ran designs" in mixed.summary()
    assert "backend sim" in mixed.summary()
    assert mixed.design_summary() == version.image.design_summary()
    host = chain("reference")
    host(inputs(), pos=0)
    assert host.design_summary() == (
        "backend reference runs no device programs: every step on the host"
    )


def test_compare_judges_each_design_against_its_reference_on_the_device_inputs():
    @graph(backend="sim", mode="compare", device="npu1")
    def wrong(g, x):
        return g(AddOne(SIZE), g(OffByOne(SIZE), x))

    wrong(inputs())
    first, second = wrong.versions[next(iter(wrong.versions))].reports
    assert (first.operator, first.passed, first.max_abs) == ("OffByOne", False, 1.0)
    # judged on what the device had (x + 1), so the error does not carry over
    assert (second.operator, second.passed) == ("AddOne", True)


def test_a_design_repeated_at_16_steps_is_one_device_block():
    stack = layers(16)
    x = inputs()
    assert np.array_equal(stack(x, pos=3), x + 48)
    (version,) = stack.versions.values()
    (program,) = version.image.programs
    text = program_mlir(program, version.image.designs)
    assert len(re.findall(r"^\s*aie\.device\(npu2\) @", text, re.M)) == 2  # AddK's and main
    assert re.search(r"aie\.device\(npu2\) @AddK_[0-9a-f]{8} \{", text)
    # consecutive steps on one device share a configure point; a second evens the count
    assert text.count("aiex.configure @AddK_") == 2
    assert text.count("aiex.run @sequence(") == 16
    assert "load_pdi" not in text  # children never load their own PDI
    assert text.count("aiex.scratchpad_parameter @w0 : i32") == 1
    assert "aiex.read_scratchpad_parameter @w0" in text
    offsets = [int(o) for o in re.findall(r"%o\d+_\d+ = arith\.constant (\d+) : index", text)]
    assert len(offsets) == 32 and all(o % 64 == 0 for o in offsets)  # views at granules


def test_configure_points_alternate_with_the_device_and_are_even():
    @graph(backend="sim", device="npu2")
    def alternating(g, x, *, pos):
        for _ in range(3):
            x = g(AddK(SIZE), g(AddOne(SIZE), x), k=pos)
        return x

    alternating.compile(((SIZE,), np.int32))
    (version,) = alternating.versions.values()
    text = program_mlir(version.image.programs[0], version.image.designs)
    points = re.findall(r"aiex\.configure @(\w+)_", text)
    assert points == ["AddOne", "AddK"] * 3
    assert text.count("aiex.run @sequence(") == 6

    @graph(backend="sim", device="npu2")
    def odd(g, x):
        return g(AddOne(SIZE), g(AddOne(SIZE), x))

    odd.compile(((SIZE,), np.int32))
    (version,) = odd.versions.values()
    text = program_mlir(version.image.programs[0], version.image.designs)
    assert re.findall(r"aiex\.configure @(\w+)_", text) == ["AddOne", "AddOne"]
    assert text.count("aiex.run @sequence(") == 2


def test_the_fused_mlir_is_built_on_each_designs_own_mlir():
    stack = layers(2)
    (version,) = stack.compile(((SIZE,), np.int32)) and stack.versions.values()
    (program,) = version.image.programs
    (design,) = version.image.designs.values()
    text = program_mlir(program, version.image.designs)
    own = to_mlir(design)
    kept = [
        line
        for line in own.splitlines()[2:-2]
        if "load_pdi" not in line and "scratchpad" not in line
    ]
    assert all(line in text for line in kept)


def test_separate_mode_is_one_program_per_step():
    stack = layers(3, mode="separate")
    x = inputs()
    assert np.array_equal(stack(x, pos=1), x + 3)
    (version,) = stack.versions.values()
    assert len(version.image.programs) == 3 and len(version.image.elves) == 3
    assert all(len(p.steps) == 1 for p in version.image.programs)


def test_one_device_block_bound_to_two_different_words_is_refused():
    @graph(backend="sim", device="npu2")
    def two(g, x, *, pos):
        return g(AddK(SIZE), g(AddK(SIZE), x, k=pos), k=pos + 1)

    with pytest.raises(
        FusionError, match=r"parameter k of device AddK_[0-9a-f]{8} is bound otherwise"
    ):
        two.compile(((SIZE,), np.int32))


def test_a_design_that_does_not_fit_its_operator_is_refused():
    class Halved(AddOne):
        @staticmethod
        def design(size, tile, device):
            from iron.design import examples

            return examples.add_one(device, n=size // 2, tile=tile)

    @graph(backend="sim", device="npu2")
    def bad(g, x):
        return g(Halved(SIZE), x)

    with pytest.raises(FusionError, match=r"design add_one tensor x is 2048 B in, but arg spec"):
        bad.compile(((SIZE,), np.int32))


def test_a_host_step_has_no_device_mlir():
    mixed = chain("sim")
    mixed.compile(((SIZE,), np.int32))
    (version,) = mixed.versions.values()
    with pytest.raises(FusionError, match=r"1 step\(s\) have no design \(Twice\)"):
        program_mlir(version.image.programs[0], version.image.designs)


def test_the_device_path_works_on_npu2_too():
    @graph(backend="sim", device=Device.from_name("npu2"))
    def one(g, x):
        return g(AddOne(SIZE), x)

    x = inputs()
    assert np.array_equal(one(x), x + 1)
    assert get_backend("sim").xrt.name == "simulated"


def test_a_traced_graph_gets_one_record_per_step_from_the_simulated_device():
    traced = chain("sim", trace_size=8 * TRACE_RECORD.size)
    x = inputs()
    assert traced(x, pos=1).tobytes() == chain("reference")(x, pos=1).tobytes()
    (version,) = traced.versions.values()
    records = read_trace(version.trace)
    assert [r["name"].split("_")[0] for r in records] == ["AddOne", "AddK", "host:Twice", "AddOne"]
    assert records[0]["bytes"] == 2 * SIZE * 4  # read x, wrote y, through the shim
    assert records[0]["end"] - records[0]["start"] == 2 * SIZE  # a tick per word moved
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(records))
    assert version.image.programs[0].sizes[-1] == 8 * TRACE_RECORD.size


def test_trace_size_is_part_of_the_cache_key():
    session = Session()
    sim = session.backend("sim")
    for trace_size in (0, 256, 512, 256):
        chain("sim", trace_size=trace_size, session=session).compile(((SIZE,), np.int32))
    assert (sim.misses, sim.hits) == (3, 1)
    with pytest.raises(ValueError, match="trace_size 6 must be a non-negative multiple of 4"):
        chain("sim", trace_size=6).compile(((SIZE,), np.int32))


@DEVICES
def test_a_design_reading_an_unflushed_weight_reads_stale_device_bytes(monkeypatch, device):
    w = np.arange(SIZE, dtype=np.int32)

    def weighted():
        @graph(backend="sim", device=device)
        def add(g, x):
            return g(Add32(SIZE), x, g(AddOne(SIZE), g.weight("w", w)))  # the design reads w

        return add

    x = inputs()
    monkeypatch.setattr(Arena, "flush", lambda self, name: None)
    assert np.array_equal(weighted()(x), x + 1)  # the device still holds zeros for w
    monkeypatch.undo()
    assert np.array_equal(weighted()(x), x + w + 1)


def test_a_per_call_value_that_does_not_fit_a_scratchpad_word_is_refused():
    stack = layers(1)
    with pytest.raises(ValueError, match=r"per-call value\(s\) \[2147483648\] do not fit a 32-bit"):
        stack(inputs(), pos=2**31)


def test_the_simulated_device_reads_programs_and_nothing_else(tmp_path):
    stack = layers(2)
    stack.compile(((SIZE,), np.int32))
    (version,) = stack.versions.values()
    (elf,) = version.image.elves
    xrt = SimulatedXrt()
    with pytest.raises(RuntimeError, match=r"dispatch_fakes:Add\w+ is not one an installed plugin"):
        xrt.elf(elf)  # read, and its operators not rebuilt: test fakes are not registered
    bad = tmp_path / "bad.json"
    for text, rule in [("[]", "must hold a JSON object, not an array"),
                       ('{"steps": [1]}', "the program: not an IRON program's"),
                       ('{"name": "x"}', "the program: not an IRON program's"),
                       ("\x80\x04K.", "not valid JSON")]:  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValueError, match=f"{bad}: {re.escape(rule)}"):
            xrt.elf(bad)
    with pytest.raises(RuntimeError, match="was given no design or host model for"):
        xrt.hw_context(xrt.device(0), version.image.programs[0])


def test_a_design_parameter_bound_to_a_constant_is_that_constant():
    @graph(backend="sim", device="npu2")
    def fixed(g, x, *, pos):
        return g(AddK(SIZE), x, k=pos * 0 + 7)

    x = inputs()
    assert np.array_equal(fixed(x, pos=2), x + 7)
    (version,) = fixed.versions.values()
    text = program_mlir(version.image.programs[0], version.image.designs)
    assert "arith.constant 7 : i32" in text


def test_a_step_with_a_design_needs_a_device():
    seq = OperatorSequence("nodevice", [(AddOne(SIZE), "x", "y")], ["x"], ["y"])
    with pytest.raises(FusionError, match="AddOne has a design, and a design is for one device"):
        get_backend("sim").compile(seq.runlist, seq.layout)


def _cache_writer(bind):
    """One row of 64 bf16 into a 16-row cache at a per-call offset."""
    from iron.core import bf16
    from iron.ops.eltwise import MemCopy, StridedCopy

    @graph(backend="sim", device="npu2")
    def write(g, row, *, pos):
        cache = g.state("cache", (1024,))
        op = StridedCopy(input_buffer_size=64, output_buffer_size=1024, sizes=(64,), strides=(1,))
        g(op, row, cache, out_offset=bind(pos))
        return g(MemCopy(size=1024), cache)  # the cache as it is after the write

    return write, np.arange(1, 65, dtype=np.float32).astype(bf16)


@pytest.mark.parametrize(
    "bind, word",
    [(lambda pos: pos * 64, True), (lambda pos: pos * 0 + 320, False)],
    ids=["per-call", "constant"],
)
def test_a_transfer_offset_parameter_is_a_program_word_or_folds_into_the_offset(bind, word):
    write, row = _cache_writer(bind)
    out = write(row, pos=5)
    assert np.array_equal(out[320:384], row) and not out[:320].any() and not out[384:].any()
    (version,) = write.versions.values()
    text = program_mlir(version.image.programs[0], version.image.designs)
    assert "@out_offset" not in text and "@in_offset" not in text
    drains = [
        line
        for line in text.splitlines()
        if "memref<1024xbf16> offset" in line and "len = 64 " in line
    ]
    if word:
        assert drains and all(
            re.search(r"offset = 0 .*\{offset_parameter = @w\d+\}$", d) for d in drains
        )
    else:
        assert drains and all("offset = 320 " in d and "offset_parameter" not in d for d in drains)


def test_one_kernel_symbol_built_two_ways_links_two_objects():
    """Two GEMV sizes build one kernel symbol with different defines: each
    device block links its own object, and the recipes name both."""
    from iron.core import bf16
    from iron.dispatch.pipeline import recipes
    from iron.ops.gemm import GEMV

    @graph(backend="sim", device="npu2")
    def two(g, a, b, x):
        return g(GEMV(M=512, K=256), b, g(GEMV(M=256, K=512), a, x))

    two.compile(((256, 512), bf16), ((512, 256), bf16), ((512,), bf16))
    (version,) = two.versions.values()
    text = program_mlir(version.image.programs[0], version.image.designs)
    linked = set(re.findall(r'link_with = "([^"]+)"', text))
    built = recipes(version.image, None)
    assert linked == set(built)
    matvec = [name for name in linked if name.startswith("iron_matvec_bf16")]
    assert len(matvec) == 2 and len({json_of(built[n]) for n in matvec}) == 2


def json_of(recipe):
    import json

    return json.dumps(recipe, sort_keys=True)


def run_program(xrt, path, x):
    """One run of the program at `path` on `xrt`, its input `x` at offset 0
    of the input argument and its output read from offset 0 of the output."""
    device = xrt.device(0)
    program = xrt.elf(path)
    run = xrt.run(xrt.kernel(xrt.hw_context(device, program), "main:sequence"))
    bos = [xrt.bo(device, n) for n in program.sizes]
    np.frombuffer(bos[0].map(), np.uint8)[: x.nbytes] = x.view(np.uint8)
    bos[0].sync(xrt.TO_DEVICE, bos[0].size(), 0)
    for index, bo in enumerate(bos):
        run.set_arg(index, bo)
    run.start()
    run.wait()
    bos[1].sync(xrt.FROM_DEVICE, bos[1].size(), 0)
    return np.frombuffer(bos[1].map(), np.uint8)[: x.nbytes].view(x.dtype).copy()


def test_a_cached_program_runs_in_a_process_that_did_not_compile_it(tmp_path):
    """The simulated device's library rebuilds the designs a program names
    from its cache entry's operator records: nothing from the compiling
    process's memory."""
    out = tmp_path / "program.txt"
    worker = multiprocessing.get_context("spawn").Process(
        target=compile_registered, args=(tmp_path / "cache", out)
    )
    worker.start()
    worker.join(120)
    assert worker.exitcode == 0
    x = np.random.default_rng(4).standard_normal(1024).astype(bf16)
    xrt = SimulatedXrt()  # a library of its own, empty
    assert run_program(xrt, out.read_text(), x).tobytes() == np.maximum(x, 0).tobytes()
    assert len(xrt.library.designs) == 1


def test_a_cached_program_of_an_unregistered_operator_is_refused_elsewhere(tmp_path):
    @graph(backend="sim", device="npu1")
    def f(g, x):
        return g(AddOne(SIZE), x)

    f.compile(((SIZE,), np.int32))
    (version,) = f.versions.values()
    with pytest.raises(
        RuntimeError,
        match=r"its step's operator dispatch_fakes:AddOne is not one an installed plugin "
        "registers, so this process cannot rebuild it",
    ):
        SimulatedXrt().elf(version.image.elves[0])
