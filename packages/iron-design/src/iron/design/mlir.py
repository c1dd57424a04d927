"""MLIR for aiecc: `to_mlir(design)` is the placed design in mlir-aie's aie
dialect, as of mlir-aie `main` at 3ca0193ce (PR #3545, August 2026), for
``aiecc --get-full-elf``.

What is emitted, in the order of IRON's ``Program.resolve_program``: the
design's scratchpad parameters (module scope, as the scratchpad is one
resource shared by every device of a module), then one ``aie.device @main``
holding tiles, object fifos, links, kernel declarations, core buffers and
barrier locks, cores, and the runtime sequence ``@sequence``. A full ELF
names its kernel ``main:sequence``.

Choices, each as current mlir-aie makes it:

- Tiles are placed (``aie.tile(col, row)``, by `place`), which every aiecc
  accepts; ``aie.logical_tile`` would need aiecc's placer.
- The runtime sequence uses DMA tasks (``aiex.dma_configure_task_for`` with
  one ``aie.dma_bd``, ``dma_start_task``, ``dma_await_task``,
  ``dma_free_task``): that is what IRON's Runtime emits at the pin
  (``python/iron/runtime/dmatask.py`` through ``shim_dma_single_bd_task``);
  ``aiex.npu.dma_memcpy_nd`` remains only in older tests. Access patterns
  are padded to 4 dimensions; the highest becomes the task's
  ``repeat_count`` and the BD length is the product of the other three, as
  ``shim_dma_single_bd_task`` does. A group's waited tasks are awaited, then
  all of its tasks freed (IRON's ``TaskGroup`` finish).
- The sequence begins by loading its own device's PDI: on the full-ELF path
  no xclbin configures the device (IRON's Program does the same). With
  parameters, the scratchpad sync follows that load explicitly, since the
  compiler's own preamble would run before it and the load resets locks.
- A worker's body sits in an ``scf.for``: to 2^63 - 1 for a forever worker
  (IRON's ``while_true``, ``range_(sys.maxsize)``), to 1 otherwise (IRON
  keeps the loop for single-shot workers too). A `Param` reads its word
  with ``aiex.read_scratchpad_parameter`` where it is used.
- A barrier is one lock per waiting worker (init 0); the worker waits with
  ``aie.use_lock(Acquire, value)`` and the runtime sets every lock with
  ``aiex.set_lock``, as IRON lowers ``WorkerRuntimeBarrier``.
- Depths are always given per endpoint (``[producer, consumers...]``),
  which the ObjectFifo lowering honours as given; from a single number it
  would size each core's pool to that core's largest acquire + 1, so the
  hardware would hold other than the design (and the checker) says.
- A programmed memtile pool is no ``aie.objectfifo.link``: its slots,
  locks, routes, consumer ends and runtime tasks are spelled out
  (`iron.design.mlir_pools` says how and why).
- Kernels are private ``func.func`` declarations with ``link_with`` naming
  their object; kernels built from one source with one set of flags share
  one object (`kernel_objects`).

Names in a design become MLIR and ELF symbols, so fifo, kernel, parameter,
barrier, worker and buffer names must be identifiers (letters, digits, ``_``,
not starting with a digit); anything else raises `DesignError`, as does a
design the dialect cannot express faithfully (link offsets that are not end
to end, a call whose arguments do not fit the kernel, block floats off npu2).
"""

from __future__ import annotations

import math
import re

from iron.design.model import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    DesignError,
    Drain,
    Endpoint,
    Fill,
    Finish,
    Kernel,
    Link,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    PoolTask,
    Release,
    SetBarrier,
    SetLock,
    Tile,
    WaitBarrier,
    Worker,
    element_type,
    link_offsets,
    walk,
)
from iron.design.place import place

DEVICE_SYMBOL = "main"
SEQUENCE_SYMBOL = "sequence"
FOREVER = 2**63 - 1  # IRON's while_true: scf.for to sys.maxsize
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# AIEDevice names at full width; narrower devices are <name>_<columns>col
_DEVICES = ("npu1", "npu2")


def to_mlir(design: Design) -> str:
    """The placed design as MLIR text for aiecc. The same design always
    gives the same text."""
    from iron.design.mlir_pools import Pools  # it builds on this module's helpers

    design = place(design)
    pools = Pools(design)
    _check_names(design, pools.symbols())
    tiles = _tiles(design)
    barrier_locks = _barrier_locks(design)
    lines = ["module {"]
    lines += [f"  aiex.scratchpad_parameter @{p} : i32" for p in design.params]
    lines.append(f"  aie.device({_device(design)}) @{DEVICE_SYMBOL} {{")
    body = [f"{_tile_value(t)} = aie.tile({t.col}, {t.row})" for t in tiles]
    body += [_objectfifo(design, fifo) for fifo in design.fifos if not pools.skips(fifo.name)]
    body += [_link(design, link) for link in design.links if not link.programmed]
    body += pools.device_lines()
    body += _declarations(design)
    for worker in design.workers:
        body += [
            f"{_buffer_value(worker, b)} = aie.buffer({_tile_value(worker.tile)}) "
            f'{{sym_name = "{worker.name}_{b.name}"}} : '
            f"{_memref(design, b.shape, b.dtype, f'worker {worker.name} buffer {b.name}')}"
            f"{_initial_value(b)}"
            for b in worker.buffers
        ]
    body += [
        f"{value} = aie.lock({_tile_value(tile)}) {{init = 0 : i32}}"
        for (_, tile), value in barrier_locks.items()
    ]
    for worker in design.workers:
        body += _Core(design, worker, barrier_locks, pools).lines()
    body += _sequence(design, barrier_locks, pools)
    lines += ["    " + line for line in body]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def kernel_objects(design: Design) -> dict[Kernel, str]:
    """The object file each kernel links with. Kernels compiled from one
    source with the same flags share one object (a source defining two
    kernels must not be linked twice), named after the first of them."""
    first: dict[tuple, str] = {}
    return {k: first.setdefault((k.source, k.flags), k.object_file) for k in design.kernels}


# ---- names --------------------------------------------------------------------


def _check_names(design: Design, pool_symbols=()) -> None:
    named = [("fifo", f.name) for f in design.fifos]
    named += [("programmed link", k.name) for k in design.links if k.programmed]
    named += [("kernel", k.symbol) for k in design.kernels]
    named += [("parameter", p) for p in design.params]
    named += [("barrier", b) for b in design.barriers]
    named += [("worker", w.name) for w in design.workers]
    named += [(f"worker {w.name} buffer", b.name) for w in design.workers for b in w.buffers]
    for what, name in named:
        if not _IDENTIFIER.match(name):
            raise DesignError(
                f"design {design.name}: {what} name {name!r} cannot be an MLIR symbol; use "
                "letters, digits and _, not starting with a digit"
            )
    # symbols of the device, and of the module around it
    device = [(f"fifo {f.name}", f.name) for f in design.fifos]
    device += [(f"kernel {s}", s) for s in dict.fromkeys(k.symbol for k in design.kernels)]
    device += [
        (f"worker {w.name} buffer {b.name}", f"{w.name}_{b.name}")
        for w in design.workers
        for b in w.buffers
    ]
    device += [
        owner_symbol
        for owner_symbol in pool_symbols
        if owner_symbol[1] not in {f.name for f in design.fifos}
    ]
    device.append(("the runtime sequence", SEQUENCE_SYMBOL))
    module = [(f"parameter {p}", p) for p in design.params] + [("the device", DEVICE_SYMBOL)]
    for symbols in (device, module):
        owners: dict[str, str] = {}
        for owner, symbol in symbols:
            if symbol in owners:
                raise DesignError(
                    f"design {design.name}: {owners[symbol]} and {owner} would both be "
                    f"MLIR symbol @{symbol}; rename one"
                )
            owners[symbol] = owner


# ---- types and values -------------------------------------------------------------


def _device(design: Design) -> str:
    device = design.device
    if device.name not in _DEVICES:
        raise DesignError(
            f"design {design.name}: mlir-aie has no aie.device for {device.name} "
            f"(valid choices: {', '.join(_DEVICES)})"
        )
    if device.columns == device.max_columns:
        return device.name
    return f"{device.name}_{device.columns}col"


def _memref(design: Design, shape, dtype: str, owner: str) -> str:
    if element_type(dtype).block_float and not design.device.block_float:
        raise DesignError(
            f"design {design.name}: {owner} holds block-float {dtype}, which "
            f"{design.device.name} does not support (block floats need npu2)"
        )
    return str(Memref(shape, dtype))


def _scalar_type(dtype: str) -> str:
    # arith constants are signless, and the C ABI passes an unsigned byte as a byte
    return "i8" if dtype == "u8" else element_type(dtype).mlir


def _tile_value(tile: Tile) -> str:
    prefix = {0: "shim_noc_tile", 1: "mem_tile"}.get(tile.row, "tile")
    return f"%{prefix}_{tile.col}_{tile.row}"


def _initial_value(buffer: LocalBuffer) -> str:
    """The splat `aie.buffer` loads the buffer with, if it has one."""
    value = buffer.initial_value
    if value is None:
        return ""
    if element_type(buffer.dtype).floating:
        return f" = dense<{float(value):e}>"
    return f" = dense<{value}>"


def _buffer_value(worker: Worker, buffer: LocalBuffer) -> str:
    # dots cannot occur in design names, so these never meet another value's name
    return f"%buf.{worker.name}.{buffer.name}"


def slot_value(link: Link, slot: int) -> str:
    # the SSA names of a programmed pool (iron.design.mlir_pools)
    return f"%{link.name}.slot{slot}"


def lock_value(link: Link, kind: str, slot: int) -> str:
    return f"%{link.name}.{kind}{slot}"


def end_buffer(fifo: str, worker: str, index: int) -> str:
    return f"%{fifo}.{worker}.buff{index}"


def end_lock(fifo: str, worker: str, kind: str) -> str:
    return f"%{fifo}.{worker}.{kind}"


def end_next(fifo: str, worker: str) -> str:
    return f"%{fifo}.{worker}.next"


def _list(items) -> str:
    return f"[{', '.join(map(str, items))}]"


def _dims(dims) -> str:
    return _list(f"<size = {s}, stride = {t}>" for s, t in dims)


def _endpoint_tile(design: Design, endpoint: Endpoint) -> Tile:
    if endpoint.kind == "core":
        return design.worker(endpoint.name).tile
    if endpoint.kind == "memtile":
        return design.link(endpoint.name).tile
    return endpoint.tile


def _tiles(design: Design) -> list[Tile]:
    """Every tile the design uses, each checked to be a tile of its kind."""
    uses = [(w.tile, "core", f"worker {w.name}") for w in design.workers]
    uses += [(k.tile, "memtile", f"link {k.name}") for k in design.links]
    uses += [
        (e.tile, "shim", f"fifo {f.name}'s runtime end")
        for f in design.fifos
        for e in f.endpoints
        if e.kind == "shim"
    ]
    device = design.device
    for tile, kind, user in uses:
        if not (0 <= tile.col < device.columns and 0 <= tile.row < device.rows):
            raise DesignError(
                f"design {design.name}: {user} is on tile {tile}, off {device.name} at "
                f"{device.columns} columns x {device.rows} rows"
            )
        if device.tile_kind(tile.row) != kind:
            raise DesignError(
                f"design {design.name}: {user} needs a {kind} tile, but {tile} is a "
                f"{device.tile_kind(tile.row)} tile"
            )
    return sorted({tile for tile, _, _ in uses})


# ---- fifos, links, kernels --------------------------------------------------------------


def _objectfifo(design: Design, fifo: ObjectFifo) -> str:
    shim_dims = (fifo.producer.kind == "shim" and fifo.dims_to_stream) or any(
        c.kind == "shim" and c.dims_from_stream for c in fifo.consumers
    )
    if shim_dims:
        raise DesignError(
            f"design {design.name}: fifo {fifo.name}: mlir-aie has no dimensionsToStream or "
            "dimensionsFromStream on a shim tile; reorder with the fill's or drain's TAP"
        )
    producer = _tile_value(_endpoint_tile(design, fifo.producer))
    if fifo.dims_to_stream:
        producer += f" dimensionsToStream {_dims(fifo.dims_to_stream)}"
    consumers = []
    for consumer in fifo.consumers:
        text = _tile_value(_endpoint_tile(design, consumer))
        if consumer.dims_from_stream:
            text += f" dimensionsFromStream {_dims(consumer.dims_from_stream)}"
        consumers.append(text)
    depth = _list(f"{fifo.depth_at(e)} : i32" for e in fifo.endpoints)
    attributes = [
        f"{name} = {value} : i32"
        for name, value in (("iter_count", fifo.iter_count), ("repeat_count", fifo.repeat_count))
        if value is not None
    ]
    attributes = f" {{{', '.join(attributes)}}}" if attributes else ""
    memref = _memref(design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
    return (
        f"aie.objectfifo @{fifo.name}({producer}, {{{', '.join(consumers)}}}, {depth})"
        f"{attributes} : !aie.objectfifo<{memref}>"
    )


def _link(design: Design, link: Link) -> str:
    fifos = f"{_list(f'@{f}' for f in link.sources)} -> {_list(f'@{f}' for f in link.destinations)}"
    if link.kind == "forward":
        return f"aie.objectfifo.link {fifos}([] [])"
    # the dialect takes each transfer's length from the next offset (the last
    # runs to the end of the big object), so only end-to-end offsets say what
    # the design says
    small = link.destinations if link.kind == "split" else link.sources
    big = design.fifo(link.sources[0] if link.kind == "split" else link.destinations[0])
    offsets = link_offsets(design, link)
    ends = [*offsets[1:], big.size]
    for name, offset, end in zip(small, offsets, ends):
        if end - offset != design.fifo(name).size:
            raise DesignError(
                f"design {design.name}: link {link.name}: fifo {name} at offset {offset} takes "
                f"{design.fifo(name).size} elements, but the next offset is {end}; mlir-aie "
                "needs the fifos of a split or join end to end, in offset order"
            )
    pair = f"[] {_list(offsets)}" if link.kind == "split" else f"{_list(offsets)} []"
    return f"aie.objectfifo.link {fifos}({pair})"


def _signature(design: Design, kernel: Kernel) -> str:
    return ", ".join(
        _memref(design, a.shape, a.dtype, f"kernel {kernel.symbol}")
        if isinstance(a, Memref)
        else _scalar_type(a.dtype)
        for a in kernel.args
    )


def _declarations(design: Design) -> list[str]:
    objects = kernel_objects(design)
    declared: dict[str, Kernel] = {}
    lines = []
    for kernel in design.kernels:
        seen = declared.setdefault(kernel.symbol, kernel)
        if seen is not kernel:
            if (seen.args, objects[seen]) != (kernel.args, objects[kernel]):
                raise DesignError(
                    f"design {design.name}: two kernels are named {kernel.symbol} with "
                    "different arguments or sources; one symbol is one function"
                )
            continue
        lines.append(
            f"func.func private @{kernel.symbol}({_signature(design, kernel)}) "
            f'attributes {{link_with = "{objects[kernel]}"}}'
        )
    return lines


def _barrier_locks(design: Design) -> dict[tuple[str, Tile], str]:
    """One lock per (barrier, tile of a worker waiting on it)."""
    locks = {}
    for worker in design.workers:
        for op in walk(worker.body):
            if isinstance(op, WaitBarrier):
                tile = worker.tile
                locks[(op.barrier, tile)] = f"%lock.{op.barrier}.{tile.col}.{tile.row}"
    return locks


# ---- cores ----------------------------------------------------------------------


class _Core:
    """One worker's ``aie.core``: its body in a loop, constants hoisted to the
    top (so nested loops never define a name twice)."""

    def __init__(self, design: Design, worker: Worker, barrier_locks, pools=None) -> None:
        self.design, self.worker, self.barrier_locks = design, worker, barrier_locks
        # fifos a programmed pool feeds this worker: emitted as the lowering
        # would (`iron.design.mlir_pools`), their held objects counted here
        self.pool_fed = {
            fifo: 0
            for fifo in (pools.destinations if pools else ())
            if design.fifo(fifo).consumer("core", worker.name) is not None
        }
        self.where = f"design {design.name}: worker {worker.name}"
        self.constants: dict[str, str] = {}  # name -> definition
        self.values = 0

    def lines(self) -> list[str]:
        worker, tile = self.worker, self.worker.tile
        bound = FOREVER if worker.forever else 1
        body = [
            f"memref.store {self._constant(0, 'i32')}, {end_next(fifo, worker.name)}"
            f"[{self._index(0)}] : memref<1xi32>"
            for fifo in self.pool_fed
        ]
        body += self._loop(Loop(bound, worker.body), {}, depth=0)
        stack = worker.stack_size
        if stack is None:
            stack = self.design.device.core_stack_bytes
        return [
            f"%core_{tile.col}_{tile.row} = aie.core({_tile_value(tile)}) {{",
            *("  " + c for c in self.constants.values()),
            *("  " + line for line in body),
            "  aie.end",
            f"}} {{stack_size = {stack} : i32}}",
        ]

    def _value(self) -> str:
        self.values += 1
        return f"%{self.values - 1}"

    def _constant(self, value, mlir_type: str) -> str:
        suffix = "" if mlir_type == "index" else f"_{mlir_type}"
        name = f"%c{value}{suffix}"
        literal = f"{float(value):e}" if mlir_type in ("f32", "bf16") else str(value)
        self.constants.setdefault(name, f"{name} = arith.constant {literal} : {mlir_type}")
        return name

    def _index(self, value: int) -> str:
        return self._constant(value, "index")

    def _loop(self, loop: Loop, held: dict, depth: int) -> list[str]:
        lines, start, step = [], self._index(0), self._index(1)
        if isinstance(loop.count, Param):
            word, bound = self._value(), self._value()
            lines += [
                f"{word} = aiex.read_scratchpad_parameter @{loop.count.name} : i32",
                f"{bound} = arith.index_cast {word} : i32 to index",
            ]
        else:
            bound = self._index(loop.count)
        lines.append(f"scf.for %i{depth} = {start} to {bound} step {step} {{")
        # an object held from before the loop keeps its index in every
        # iteration only if the body neither acquires nor releases its fifo
        changed = {op.fifo for op in walk(loop.body) if isinstance(op, (Acquire, Release))}
        inner = {fifo: view for fifo, view in held.items() if fifo not in changed}
        counted = dict(self.pool_fed)
        for op in loop.body:
            lines += ["  " + line for line in self._op(op, inner, depth + 1)]
        unbalanced = [f for f in self.pool_fed if self.pool_fed[f] != counted[f]]
        if unbalanced:
            raise DesignError(
                f"{self.where}: a loop ends holding {self.pool_fed[unbalanced[0]]} of fifo "
                f"{unbalanced[0]}'s objects where it began holding {counted[unbalanced[0]]}; "
                "a fifo a programmed pool feeds is counted where the code is emitted, so each "
                "loop must give back what it takes"
            )
        # nor is the body's own subview in scope after it
        for fifo in changed:
            held.pop(fifo, None)
        return [*lines, "}"]

    def _op(self, op, held: dict, depth: int) -> list[str]:
        """`held` maps a fifo to (its latest subview, objects released since):
        the i-th held object is that subview's element i + released."""
        if isinstance(op, (Acquire, Release)) and op.fifo in self.pool_fed:
            return self._pool_lock(op)
        if isinstance(op, Acquire):
            value, subview = self._value(), self._subview(op.fifo)
            held[op.fifo] = (value, 0)
            return [
                f"{value} = aie.objectfifo.acquire @{op.fifo}({self._port(op.fifo)}, {op.n}) "
                f": {subview}"
            ]
        if isinstance(op, Release):
            if op.fifo in held:
                subview, released = held[op.fifo]
                held[op.fifo] = (subview, released + op.n)
            return [f"aie.objectfifo.release @{op.fifo}({self._port(op.fifo)}, {op.n})"]
        if isinstance(op, Call):
            return self._call(op, held)
        if isinstance(op, WaitBarrier):
            lock = self.barrier_locks[(op.barrier, self.worker.tile)]
            return [f"aie.use_lock({lock}, Acquire, {self._constant(op.value, 'i32')})"]
        if isinstance(op, Loop):
            return self._loop(op, held, depth)
        raise DesignError(f"{self.where}: cannot emit {op!r}")

    def _pool_lock(self, op) -> list[str]:
        """An acquire takes only the objects not yet held (cumulative, as
        the ObjectFifo lowering counts); a release hands the oldest back
        and moves the ring's next object on."""
        fifo, name = self.design.fifo(op.fifo), self.worker.name
        held = self.pool_fed[op.fifo]
        if isinstance(op, Acquire):
            self.pool_fed[op.fifo] = max(held, op.n)
            if op.n <= held:
                return []
            value = self._constant(op.n - held, "i32")
            return [
                f"aie.use_lock({end_lock(op.fifo, name, 'cons')}, AcquireGreaterEqual, {value})"
            ]
        if op.n > held:
            raise DesignError(
                f"{self.where}: releases {op.n} objects of fifo {op.fifo} holding {held}"
            )
        self.pool_fed[op.fifo] = held - op.n
        depth = fifo.depth_at(fifo.consumer("core", name))
        now, moved, wrapped = (self._value() for _ in range(3))
        zero = self._index(0)
        return [
            f"aie.use_lock({end_lock(op.fifo, name, 'prod')}, Release, {self._constant(op.n, 'i32')})",
            f"{now} = memref.load {end_next(op.fifo, name)}[{zero}] : memref<1xi32>",
            f"{moved} = arith.addi {now}, {self._constant(op.n, 'i32')} : i32",
            f"{wrapped} = arith.remui {moved}, {self._constant(depth, 'i32')} : i32",
            f"memref.store {wrapped}, {end_next(op.fifo, name)}[{zero}] : memref<1xi32>",
        ]

    def _pool_object(self, arg: Obj, lines: list, what: str):
        """The held object `arg` of a pool-fed fifo: the ring buffer at
        (next + index) mod depth, chosen with ``scf.index_switch``."""
        fifo, name = self.design.fifo(arg.fifo), self.worker.name
        if arg.index >= self.pool_fed[arg.fifo]:
            raise DesignError(
                f"{what}: uses object {arg.index} of fifo {arg.fifo}, holding "
                f"{self.pool_fed[arg.fifo]} there"
            )
        depth = fifo.depth_at(fifo.consumer("core", name))
        memref = _memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        now, moved, wrapped, index, chosen = (self._value() for _ in range(5))
        lines += [
            f"{now} = memref.load {end_next(arg.fifo, name)}[{self._index(0)}] : memref<1xi32>",
            f"{moved} = arith.addi {now}, {self._constant(arg.index, 'i32')} : i32",
            f"{wrapped} = arith.remui {moved}, {self._constant(depth, 'i32')} : i32",
            f"{index} = arith.index_cast {wrapped} : i32 to index",
            f"{chosen} = scf.index_switch {index} -> {memref}",
        ]
        for case in [*range(depth), "default"]:
            buffer = end_buffer(arg.fifo, name, 0 if case == "default" else case)
            head = "default" if case == "default" else f"case {case}"
            lines += [f"{head} {{", f"  scf.yield {buffer} : {memref}", "}"]
        return chosen, fifo.shape, fifo.dtype

    def _port(self, fifo: str) -> str:
        role = self.design.fifo(fifo).role_of("core", self.worker.name)
        return "Produce" if role == "produce" else "Consume"

    def _subview(self, fifo: str) -> str:
        f = self.design.fifo(fifo)
        return f"!aie.objectfifosubview<{_memref(self.design, f.shape, f.dtype, f'fifo {fifo}')}>"

    def _call(self, call: Call, held: dict) -> list[str]:
        kernel = call.kernel
        where = f"{self.where}: call of {kernel.symbol}"
        if len(call.args) != len(kernel.args):
            raise DesignError(
                f"{where}: {len(call.args)} arguments for {len(kernel.args)} parameters"
            )
        lines, operands = [], []
        for index, (arg, param) in enumerate(zip(call.args, kernel.args)):
            what = f"{where}: argument {index}"
            if isinstance(param, Memref):
                value, shape, dtype = self._buffer_operand(arg, param, held, lines, what)
                operands.append(self._reshaped(value, shape, dtype, param, lines, what))
            elif isinstance(arg, Param):
                if param.dtype != "i32":
                    raise DesignError(
                        f"{what}: parameter {arg.name} is an i32 word, the kernel takes {param.dtype}"
                    )
                value = self._value()
                lines.append(f"{value} = aiex.read_scratchpad_parameter @{arg.name} : i32")
                operands.append(value)
            elif isinstance(arg, int):
                operands.append(self._constant(arg, _scalar_type(param.dtype)))
            else:
                raise DesignError(f"{what}: the kernel takes a scalar ({param.dtype}), got {arg!r}")
        types = _signature(self.design, kernel)
        lines.append(f"func.call @{kernel.symbol}({', '.join(operands)}) : ({types}) -> ()")
        return lines

    def _buffer_operand(self, arg, param: Memref, held: dict, lines: list, what: str):
        if isinstance(arg, Buf):
            buffer = next(b for b in self.worker.buffers if b.name == arg.name)
            return _buffer_value(self.worker, buffer), buffer.shape, buffer.dtype
        if isinstance(arg, Obj) and arg.fifo in self.pool_fed:
            return self._pool_object(arg, lines, what)
        if not isinstance(arg, Obj):
            raise DesignError(f"{what}: the kernel takes a buffer ({param}), got {arg!r}")
        if arg.fifo not in held:
            raise DesignError(
                f"{what}: uses an object of fifo {arg.fifo} with no acquire of it in scope "
                "(acquire in the same loop body, or around the loop, before the call)"
            )
        subview, released = held[arg.fifo]
        fifo = self.design.fifo(arg.fifo)
        value = self._value()
        memref = _memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        lines.append(
            f"{value} = aie.objectfifo.subview.access {subview}[{arg.index + released}] "
            f": {self._subview(arg.fifo)} -> {memref}"
        )
        return value, fifo.shape, fifo.dtype

    def _reshaped(self, value: str, shape, dtype: str, param: Memref, lines: list, what: str):
        """`value` as the kernel's memref: as is, or an N-d buffer collapsed
        to the kernel's 1-d parameter (as IRON passes one)."""
        if (tuple(shape), dtype) == (param.shape, param.dtype):
            return value
        if dtype != param.dtype or len(param.shape) != 1 or math.prod(shape) != param.shape[0]:
            raise DesignError(f"{what}: a {Memref(shape, dtype)} does not fit the kernel's {param}")
        collapsed = self._value()
        group = ", ".join(map(str, range(len(shape))))
        lines.append(
            f"{collapsed} = memref.collapse_shape {value} [[{group}]] "
            f": {Memref(shape, dtype)} into {param}"
        )
        return collapsed


# ---- the runtime sequence -------------------------------------------------------------


def _sequence(design: Design, barrier_locks, pools=None) -> list[str]:
    arguments = {t.name: f"%arg{i}" for i, t in enumerate(design.tensors)}
    signature = ", ".join(
        f"{arguments[t.name]}: {_memref(design, t.shape, t.dtype, f'tensor {t.name}')}"
        for t in design.tensors
    )
    body = [f"aiex.npu.load_pdi {{device_ref = @{DEVICE_SYMBOL}}}"]
    if design.params:
        body.append("aiex.sync_scratchpad_parameters_from_host")
    groups: dict[str, list[tuple[str, bool]]] = {}  # open groups, in the order they began

    def finish(group: str) -> list[str]:
        tasks = groups.pop(group, [])
        return [f"aiex.dma_await_task({t})" for t, wait in tasks if wait] + [
            f"aiex.dma_free_task({t})" for t, _ in tasks
        ]

    for index, statement in enumerate(design.sequence):
        if isinstance(statement, (Fill, Drain)):
            task = f"%task{index}"
            body += _task(design, statement, task, arguments[statement.tensor])
            groups.setdefault(statement.group, []).append((task, statement.wait))
        elif isinstance(statement, Finish):
            body += finish(statement.group)
        elif isinstance(statement, SetBarrier):
            body += [
                f"aiex.set_lock({lock}, {statement.value})"
                for (barrier, _), lock in barrier_locks.items()
                if barrier == statement.barrier
            ]
        elif isinstance(statement, (PoolTask, SetLock)):
            task = f"%task{index}"
            body += pools.statement(statement, task)
            if isinstance(statement, PoolTask):
                groups.setdefault(statement.group, []).append((task, False))
    for group in list(groups):
        body += finish(group)
    return [
        f"aie.runtime_sequence @{SEQUENCE_SYMBOL}({signature}) {{",
        *("  " + line for line in body),
        "}",
    ]


def _task(design: Design, statement: Fill | Drain, task: str, argument: str) -> list[str]:
    """One shim DMA task: its pattern padded to 4 dimensions, the highest
    one repeating the BD (`repeat_count` is repeats - 1)."""
    tensor = design.tensor(statement.tensor)
    tap = (statement.tap or TAP.linear(tensor.size)).padded()
    memref = _memref(design, tensor.shape, tensor.dtype, f"tensor {tensor.name}")
    attributes = ["issue_token = true"] if statement.wait else []
    if tap.sizes[0] > 1:
        attributes.append(f"repeat_count = {tap.sizes[0] - 1} : i32")
    attributes = f" {{{', '.join(attributes)}}}" if attributes else ""
    # the parameter's word is added to the BD's address when the task is issued
    patched = f" {{offset_parameter = @{statement.offset_param}}}" if statement.offset_param else ""
    return [
        f"{task} = aiex.dma_configure_task_for @{statement.fifo} {{",
        f"  aie.dma_bd({argument} : {memref} offset = {tap.offset} len = "
        f"{math.prod(tap.sizes[1:])} sizes = {_list(tap.sizes)} strides = {_list(tap.strides)})"
        f"{patched}",
        "  aie.end",
        f"}}{attributes}",
        f"aiex.dma_start_task({task})",
    ]
