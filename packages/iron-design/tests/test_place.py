import attrs
import pytest

from iron.core import Device
from iron.design.examples import add_one, passthrough, split_join
from iron.design.model import DesignError, Tile, Worker, shim
from iron.design.place import is_placed, place


def test_unpinned_workers_fill_core_tiles_column_by_column(npu1):
    placed = place(split_join(npu1, workers=6))
    assert [w.tile for w in placed.workers] == [
        Tile(0, 2), Tile(0, 3), Tile(0, 4), Tile(0, 5), Tile(1, 2), Tile(1, 3),
    ]  # fmt: skip
    assert is_placed(placed) and not is_placed(split_join(npu1, workers=6))


def test_pins_are_honoured_and_skipped_by_the_others(npu1):
    design = split_join(npu1, workers=3)
    pinned = attrs.evolve(
        design, workers=(attrs.evolve(design.workers[0], tile=Tile(0, 3)), *design.workers[1:])
    )
    assert [w.tile for w in place(pinned).workers] == [Tile(0, 3), Tile(0, 2), Tile(0, 4)]


def test_placement_is_deterministic_and_idempotent(npu2):
    placed = place(split_join(npu2, workers=8))
    assert place(placed) == placed
    assert place(split_join(npu2, workers=8)) == placed


def test_too_many_workers_name_the_core_count():
    narrow = Device.from_name("npu1", columns=1)
    with pytest.raises(
        DesignError, match="5 workers do not fit the 4 core tiles of npu1 at 1 columns"
    ):
        design = split_join(Device.from_name("npu1"), workers=5, n=5 * 256)
        place(attrs.evolve(design, device=narrow))


def test_links_sit_in_the_column_of_their_workers(npu1):
    design = add_one(npu1)
    moved = attrs.evolve(design, workers=(attrs.evolve(design.workers[0], tile=Tile(2, 4)),))
    placed = place(moved)
    assert [e.tile for f in placed.fifos for e in f.endpoints if e.kind == "shim"] == [
        Tile(2, 0), Tile(2, 0),
    ]  # fmt: skip
    assert place(passthrough(npu1)).links[0].tile == Tile(0, 1)


def test_shim_endpoints_move_right_when_a_column_has_no_channel_left(npu1):
    """Three fills into column 0's cores: its shim has two MM2S channels."""
    design = split_join(npu1, workers=3, n=3 * 256)
    fifos = []
    for fifo in design.fifos:  # feed every worker from the runtime directly
        if fifo.name.startswith("in") and fifo.name != "in":
            fifo = attrs.evolve(fifo, producer=shim())
        fifos.append(fifo)
    # drop the split: the lanes' producers are now the runtime
    rewired = attrs.evolve(
        design,
        fifos=tuple(f for f in fifos if f.name != "in"),
        links=design.links[1:],
        sequence=design.sequence[1:],
    )
    placed = place(rewired)
    columns = [placed.fifo(f"in{i}").producer.tile for i in range(3)]
    assert columns == [Tile(0, 0), Tile(0, 0), Tile(1, 0)]


def test_pinned_shim_endpoints_take_their_channel_first(npu1):
    design = add_one(npu1)
    pinned = attrs.evolve(
        design, fifos=(attrs.evolve(design.fifos[0], producer=shim(3)), design.fifos[1])
    )
    placed = place(pinned)
    assert placed.fifo("in").producer.tile == Tile(3, 0)
    assert placed.fifo("out").consumer("shim").tile == Tile(0, 0)
    assert isinstance(placed.workers[0], Worker)
