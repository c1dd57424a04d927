"""The placer: every worker, memtile link and shim endpoint gets a tile.

Deterministic and simple, like mlir-aie's sequential placer: pins are
honoured; unpinned workers take the free core tiles column by column (rows
2 and up); a link takes the memtile of the column of the first worker on
its fifos; a shim endpoint takes the shim of the column of the actor at the
fifo's other end, moving right (wrapping) past columns whose shim DMA
channels in that direction are taken. Placement never refuses a pin: a pin
off the array is `check`'s to report.
"""

from __future__ import annotations

import attrs

from iron.design.model import Design, DesignError, Endpoint, ObjectFifo, Tile, require_design


def place(design: Design) -> Design:
    """`design` with a tile on every worker, link and shim endpoint (a placed
    design as it is: check, usage, simulate and to_mlir each place first)."""
    require_design("place", design)
    if is_placed(design):
        return design
    device = design.device
    workers = _place_workers(design)
    worker_tiles = {w.name: w.tile for w in workers}
    links = tuple(
        link
        if link.tile
        else attrs.evolve(link, tile=Tile(_link_column(design, link.name, worker_tiles), 1))
        for link in design.links
    )
    link_tiles = {link.name: link.tile for link in links}

    def column_of(endpoint: Endpoint) -> int | None:
        if endpoint.kind == "core":
            return worker_tiles[endpoint.name].col
        if endpoint.kind == "memtile":
            return link_tiles[endpoint.name].col
        return endpoint.tile.col if endpoint.tile else None

    # (column, direction) -> channels taken; pinned shim endpoints first
    taken: dict[tuple[int, str], int] = {}
    for fifo in design.fifos:
        for endpoint, direction in _shim_ends(fifo):
            if endpoint.tile is not None:
                key = (endpoint.tile.col, direction)
                taken[key] = taken.get(key, 0) + 1

    fifos = []
    for fifo in design.fifos:
        ends = list(fifo.endpoints)
        for i, endpoint in enumerate(ends):
            if endpoint.kind != "shim" or endpoint.tile is not None:
                continue
            direction = "mm2s" if i == 0 else "s2mm"
            others = [column_of(e) for e in ends if e.kind != "shim"]
            preferred = next((c for c in others if c is not None), 0)
            col = _free_column(
                preferred, direction, taken, device.columns, device.shim_dma_channels
            )
            taken[(col, direction)] = taken.get((col, direction), 0) + 1
            ends[i] = attrs.evolve(endpoint, tile=Tile(col, 0))
        if ends != list(fifo.endpoints):
            fifo = attrs.evolve(fifo, producer=ends[0], consumers=tuple(ends[1:]))
        fifos.append(fifo)
    return attrs.evolve(design, workers=workers, links=links, fifos=tuple(fifos))


def is_placed(design: Design) -> bool:
    return (
        all(w.tile for w in design.workers)
        and all(k.tile for k in design.links)
        and all(e.tile for f in design.fifos for e, _ in _shim_ends(f))
    )


def _shim_ends(fifo: ObjectFifo):
    """The fifo's shim endpoints with their DMA direction at the shim."""
    if fifo.producer.kind == "shim":
        yield fifo.producer, "mm2s"
    for consumer in fifo.consumers:
        if consumer.kind == "shim":
            yield consumer, "s2mm"


def _place_workers(design: Design):
    device = design.device
    pinned = {w.tile for w in design.workers if w.tile is not None}
    free = iter(
        Tile(col, row)
        for col in range(device.columns)
        for row in range(2, device.rows)
        if Tile(col, row) not in pinned
    )
    placed = []
    for worker in design.workers:
        if worker.tile is None:
            tile = next(free, None)
            if tile is None:
                raise DesignError(
                    f"design {design.name}: {len(design.workers)} workers do not fit the "
                    f"{device.cores} core tiles of {device.name} at {device.columns} columns"
                )
            worker = attrs.evolve(worker, tile=tile)
        placed.append(worker)
    return tuple(placed)


def _link_column(design: Design, link: str, worker_tiles) -> int:
    names = set(design.link(link).fifos)
    for fifo in design.fifos:
        if fifo.name in names:
            for endpoint in fifo.endpoints:
                if endpoint.kind == "core":
                    return worker_tiles[endpoint.name].col
    for fifo in design.fifos:
        if fifo.name in names:
            for endpoint in fifo.endpoints:
                if endpoint.kind == "shim" and endpoint.tile is not None:
                    return endpoint.tile.col
    return 0


def _free_column(preferred: int, direction: str, taken, columns: int, channels: int) -> int:
    for step in range(columns):
        col = (preferred + step) % columns
        if taken.get((col, direction), 0) < channels:
            return col
    return preferred % columns
