"""The lowered form is what the MLIR says: for every design the project
makes, the channels, locks and BDs per tile that mlir-aie would allocate
for the emitted text (worked out by a reader of the text, `mlir_reader`)
are the ones `usage` counts on the lowered form; and the configuration and
the runtime sequence are apart, the first with its own digest."""

from __future__ import annotations

import attrs
import pytest
from every_design import catalog_designs, local_designs
from mlir_reader import read

from iron.core import Device
from iron.design import TAP, Drain, Fill, examples, lower, to_mlir, usage
from iron.design.usage import MM2S, S2MM


def _compare(key: str, design) -> None:
    text = to_mlir(design)
    found = read(text)
    used = usage(design)
    for tile, u in used.items():
        t = found.get((tile.col, tile.row))
        assert t is not None, f"{key}: tile {tile} is in usage but not in the MLIR"
        counts = (len(u.channels_in(S2MM)), len(u.channels_in(MM2S)), u.lock_count)
        assert counts == (t.s2mm, t.mm2s, t.locks), (key, tile, counts, t)
        if u.kind != "shim":
            assert u.bds == t.bds, (key, tile, u.bds, t.bds)
        numbered = {(c.direction, c.index) for c in u.channels}
        assert t.numbered <= numbered, (key, tile, t.numbered, numbered)
    assert {(t.col, t.row) for t in used} >= {k for k, t in found.items() if t.locks or t.s2mm}


@pytest.mark.parametrize("key, design", list(local_designs()), ids=lambda v: str(v)[:40])
def test_the_mlir_allocates_what_usage_counts(key, design):
    _compare(key, design)


@pytest.mark.slow
def test_every_catalog_design_allocates_what_usage_counts():
    for key, design in catalog_designs():
        _compare(key, design)


def test_a_reader_that_disagrees_is_noticed(npu1):
    """The comparison fails on MLIR that says otherwise than the lowering:
    here the producer's repeat count drops out of the text."""
    design = examples.repeat(npu1, times=2)
    deeper = attrs.evolve(design, fifos=tuple(attrs.evolve(f, depth=2) for f in design.fifos))
    text = to_mlir(deeper).replace(" {repeat_count = 2 : i32}", "")
    memtile = next(u for t, u in usage(deeper).items() if u.kind == "memtile")
    assert read(text)[(0, 1)].bds != memtile.bds


def test_the_configuration_is_apart_from_the_runtime_sequence(npu1):
    """Two designs that differ only in what the runtime does per call (here
    the order the fill reads x in) make one device image: one configuration
    digest; what the sequence does is in `runtime` alone."""
    design = examples.passthrough(npu1, n=4096, tile=1024)
    reversed_fill = attrs.evolve(
        design,
        sequence=(
            *(Fill("in", "x", TAP.linear(1024, 1024 * i)) for i in reversed(range(4))),
            Drain("out", "y"),
        ),
    )
    a, b = lower(design), lower(reversed_fill)
    assert a.configuration == b.configuration
    assert a.configuration.digest() == b.configuration.digest()
    assert a.runtime != b.runtime
    # a change to the device image moves the digest
    deeper = attrs.evolve(design, fifos=tuple(attrs.evolve(f, depth=3) for f in design.fifos))
    assert lower(deeper).configuration.digest() != a.configuration.digest()
    other = lower(examples.passthrough(Device.from_name("npu2"), n=4096, tile=1024))
    assert other.configuration.digest() != a.configuration.digest()
