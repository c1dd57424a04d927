"""A small reader of the MLIR `to_mlir` emits: what mlir-aie would allocate
of each tile for it, worked out from the text alone with mlir-aie's rules
(AIEObjectFifoStatefulTransform.cpp), independently of iron.design's
lowering, so a test can hold the two against each other.

Per tile it counts DMA channels per direction, locks, and BDs (a core's
static chains; a memtile's static chains and the BD ids the runtime pins),
and records the channel numbers the text spells (flows, shim allocations,
``aie.mem`` starts, runtime memtile tasks)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import attrs

TILE = re.compile(r"(%\S+) = aie\.tile\((\d+), (\d+)\)")
FIFO = re.compile(
    r"aie\.objectfifo @(\w+)\((.*)\)(?: \{(.*)\})? : !aie\.objectfifo<memref<([^>]*)>>"
)
LINK = re.compile(r"aie\.objectfifo\.link \[(.*?)\] -> \[(.*?)\]\(\[(.*?)\] \[(.*?)\]\)")
LOCK = re.compile(r"= aie\.lock\((%\S+)\)")
FLOW = re.compile(r"aie\.flow\((%\S+), DMA : (\d+), (%\S+), DMA : (\d+)\)")
ALLOCATION = re.compile(r"aie\.shim_dma_allocation @\w+\((%\S+), (MM2S|S2MM), (\d+)\)")
MEM = re.compile(r"aie\.mem\((%\S+)\)")
START = re.compile(r"aie\.dma_start\((S2MM|MM2S), (\d+),")
TASK = re.compile(r"aiex\.dma_configure_task\((%\S+), (S2MM|MM2S), (\d+)\)")
BD_ID = re.compile(r"bd_id = (\d+) : i32")
CORE = re.compile(r"aie\.core\((%\S+)\)")
ACQUIRE = re.compile(r"aie\.objectfifo\.acquire @(\w+)\((?:Produce|Consume), (\d+)\)")


@attrs.define
class Tile:
    s2mm: int = 0
    mm2s: int = 0
    locks: int = 0
    bds: int = 0
    numbered: set = attrs.field(factory=set)  # (direction, index) the text spells


def _names(text: str) -> list[str]:
    return [n.strip().lstrip("@") for n in text.split(",") if n.strip()]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def read(text: str) -> dict[tuple[int, int], Tile]:
    tiles = {name: (int(c), int(r)) for name, c, r in TILE.findall(text)}
    out: dict[tuple[int, int], Tile] = defaultdict(Tile)
    fifos, links, acquires = {}, [], defaultdict(Counter)
    core, in_mem, runtime_ids = None, None, defaultdict(set)
    for line in text.splitlines():
        line = line.strip()
        if m := FIFO.search(line):
            fifos[m[1]] = _fifo(m, tiles)
        elif m := LINK.search(line):
            links.append((_names(m[1]), _names(m[2]), _ints(m[3]), _ints(m[4])))
        elif m := LOCK.search(line):
            out[tiles[m[1]]].locks += 1
        elif m := FLOW.search(line):
            out[tiles[m[1]]].numbered.add(("MM2S", int(m[2])))
            out[tiles[m[3]]].numbered.add(("S2MM", int(m[4])))
        elif m := ALLOCATION.search(line):
            out[tiles[m[1]]].numbered.add((m[2], int(m[3])))
        elif m := MEM.search(line):
            in_mem = tiles[m[1]]
        elif m := CORE.search(line):
            core, in_mem = tiles[m[1]], None
        elif m := TASK.search(line):
            task_tile = tiles[m[1]]
            out[task_tile].numbered.add((m[2], int(m[3])))
        elif in_mem is not None and (m := START.search(line)):
            out[in_mem].numbered.add((m[1], int(m[2])))
        elif in_mem is not None and "aie.dma_bd(" in line:
            out[in_mem].bds += 1
        elif "aie.runtime_sequence" in line:
            core = in_mem = None
        if core is not None and (m := ACQUIRE.search(line)):
            acquires[core][m[1]] = max(acquires[core][m[1]], int(m[2]))
        if m := BD_ID.search(line):
            runtime_ids[task_tile].add(int(m[1]))
    for tile, ids in runtime_ids.items():
        out[tile].bds += len(ids)
    for tile, (s2mm, mm2s) in _numbered_counts(out).items():
        out[tile].s2mm, out[tile].mm2s = s2mm, mm2s
    _objectfifos(out, fifos, links, acquires)
    return dict(out)


def _fifo(m, tiles) -> dict:
    inside, attributes, memref = m[2], m[3] or "", m[4]
    ends, depth = inside.rsplit("}, ", 1)
    producer, consumers = ends.split(", {", 1)
    cons = []
    for part in re.split(r", (?=%)", consumers):
        cons.append((tiles[part.split()[0]], "dimensionsFromStream" in part))
    depths = [int(d) for d in re.findall(r"(\d+) : i32", depth)]
    attrs_ = dict(re.findall(r"(\w+) = (\d+) : i32", attributes))
    return {
        "producer": tiles[producer.split()[0]],
        "to_stream": "dimensionsToStream" in producer,
        "consumers": cons,
        "depths": depths,  # one: a single depth; else per endpoint
        "repeat": int(attrs_.get("repeat_count", 1)),
        "iter": "iter_count" in attrs_,
        "size": int(memref.split("x")[0]) if "x" in memref else 1,
    }


def _numbered_counts(out):
    counts = {}
    for tile, t in out.items():
        counts[tile] = (
            sum(1 for d, _ in t.numbered if d == "S2MM"),
            sum(1 for d, _ in t.numbered if d == "MM2S"),
        )
    return counts


def _is_core(tile) -> bool:
    return tile[1] >= 2


def _reaches(core, memory) -> bool:
    """AIE2 `isLegalMemAffinity` between core tiles: its own memory, its west,
    north and south neighbours'."""
    return (memory[0] - core[0], memory[1] - core[1]) in ((0, 0), (-1, 0), (0, 1), (0, -1))


def _objectfifos(out, fifos, links, acquires) -> None:
    in_link = {}
    for ins, outs, src, dst in links:
        for name in ins + outs:
            in_link[name] = (ins, outs, src, dst)
    for name, f in fifos.items():
        consumers = f["consumers"]
        if (
            len(consumers) == 1
            and not f["to_stream"]
            and not consumers[0][1]
            and f["repeat"] == 1
            and _is_core(f["producer"])
            and _is_core(consumers[0][0])
            and name not in in_link
            and (
                _reaches(f["producer"], consumers[0][0]) or _reaches(consumers[0][0], f["producer"])
            )
        ):
            producer, consumer = f["producer"], consumers[0][0]
            holder = producer if _reaches(consumer, producer) else consumer
            out[holder].locks += 2
            continue
        ends = [(f["producer"], "MM2S", 0)] + [
            (c, "S2MM", i + 1) for i, (c, _) in enumerate(consumers)
        ]
        for tile, direction, index in ends:
            t = out[tile]
            if direction == "S2MM":
                t.s2mm += 1
            else:
                t.mm2s += 1
            if tile[1] == 0:
                t.locks += 2
            elif _is_core(tile):
                depth = _depth(f, index, acquires[tile].get(name, 0))
                repeat = f["repeat"] if direction == "MM2S" else 1
                t.locks += 2
                t.bds += 1 if repeat > 1 and depth == 1 else depth * repeat
    for ins, outs, src, dst in links:
        _link(out, fifos, ins, outs, src, dst, acquires)


def _depth(f, index: int, most: int) -> int:
    """`findObjectFifoSize`: a single depth resizes a core's pool to its
    largest acquire + 1; per-endpoint depths stand."""
    if len(f["depths"]) > 1:
        return f["depths"][index]
    depth = f["depths"][0]
    if most == 0:
        return depth
    return 1 if most == 1 and depth == 1 else most + 1


def _link(out, fifos, ins, outs, src, dst, acquires) -> None:
    first_in, first_out = fifos[ins[0]], fifos[outs[0]]
    memtile = first_out["producer"]
    if len(outs) > 1:  # distribute: the source's pool, a lane per destination
        owner, owner_index, lanes = first_in, _consumer_index(first_in, memtile), len(outs)
    elif len(ins) > 1:  # join: the destination's pool, a lane per source
        owner, owner_index, lanes = first_out, 0, len(ins)
    elif first_out["size"] > first_in["size"]:
        owner, owner_index, lanes = first_out, 0, 1
    else:
        owner, owner_index, lanes = first_in, _consumer_index(first_in, memtile), 1
    depth = owner["depths"][owner_index] if len(owner["depths"]) > 1 else owner["depths"][0]
    t = out[memtile]
    t.locks += 2 * lanes
    members = [(fifos[n], n in ins) for n in ins + outs]
    for f, is_in in members:
        repeat = 1 if is_in else f["repeat"]
        if f is owner:
            hardware = repeat > 1 and depth == 1 and lanes == 1 and not f["iter"]
            t.bds += depth * lanes * (1 if hardware else repeat)
        else:
            hardware = repeat > 1 and depth == 1 and not f["iter"]
            t.bds += depth * (1 if hardware else repeat)


def _consumer_index(f, tile) -> int:
    return 1 + next(i for i, (c, _) in enumerate(f["consumers"]) if c == tile)
