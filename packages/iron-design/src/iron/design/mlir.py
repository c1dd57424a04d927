"""MLIR for aiecc: the lowered form of a design (`iron.design.lower`) printed
in mlir-aie's aie dialect, as of mlir-aie `main` at 3ca0193ce (PR #3545,
August 2026), for ``aiecc --get-full-elf``.

`device_block(design, symbol=, params=, objects=, load_pdi=)` prints one
``aie.device`` block: its tiles, object fifos, links, a programmed pool's
buffers, locks and routes (`iron.design.mlir_pools`), kernel declarations,
core buffers and barrier locks, cores, and the runtime sequence
``@sequence``. What a fused program needs is given as arguments, never
edited into the text: the device symbol, what each scratchpad parameter
reads (a word of the program's scratchpad, or a constant folded in where it
is used), the name each kernel object links under, and whether the sequence
loads its own PDI. `to_mlir(design)` is the module of one block named
``main``, its parameters declared at module scope (the scratchpad is one
resource shared by every device of a module). A full ELF names its kernel
``main:sequence``.

Choices, each as current mlir-aie makes it:

- Tiles are placed (``aie.tile(col, row)``, by `place`), which every aiecc
  accepts; ``aie.logical_tile`` would need aiecc's placer.
- A fifo's depth is one number when every endpoint has it, as mlir-aie's
  `ObjectFifo` writes it; the lowering then sizes a core end's pool by its
  largest acquire (`iron.design.lower` says how, and counts those pools).
  Endpoints of different depths are written per endpoint, kept as given.
  A pinned endpoint's channel is ``prod_dma_channel`` / ``cons_dma_channels``
  (-1 for the consumers left to the lowering).
- Link offsets are written as given: lane i moves its offset up to the next
  (`iron.design.model.link_lanes`).
- The runtime sequence uses DMA tasks (``aiex.dma_configure_task_for`` with
  one ``aie.dma_bd``, ``dma_start_task``, ``dma_await_task``,
  ``dma_free_task``): what IRON's Runtime emits at the pin
  (``python/iron/runtime/dmatask.py`` through ``shim_dma_single_bd_task``).
  Access patterns are padded to 4 dimensions; the highest becomes the task's
  ``repeat_count`` and the BD length is the product of the other three. A
  group's finish awaits its waited tasks, then frees all of them, awaited
  ones included (``RuntimeSequence.finish_task_group``); an await the
  lowering adds to make room in a channel's queue comes just before the push
  that needs it.
- The sequence begins by loading its own device's PDI: on the full-ELF path
  no xclbin configures the device (IRON's Program does the same). With
  parameters, the scratchpad sync follows that load explicitly, since the
  compiler's own preamble would run before it and the load resets locks.
- A worker's body sits in an ``scf.for``: to 2^63 - 1 for a forever worker
  (IRON's ``while_true``, ``range_(sys.maxsize)``), to 1 otherwise. A
  `Param` reads its word with ``aiex.read_scratchpad_parameter`` where used.
- ``aie.objectfifo.subview.access %s[i]`` is the i-th object the worker holds
  when the access runs: the lowering reads the fifo's ring position there
  (`LowerObjectFifoSubviewAccess` loads the rotating counter a release
  advances), so an index counts from the oldest object still held. An
  access with no acquire of its fifo in scope takes a subview from an
  acquire of what is already held, which acquires nothing
  (`LowerObjectFifoAcquire` takes max(0, n - held)).
- A barrier is one lock per worker using it (init 0); the worker waits with
  ``aie.use_lock(Acquire, value)``, releases with ``aie.use_lock(Release,
  value)`` (`release_with_value`), and the runtime sets every lock with
  ``aiex.set_lock``, as IRON lowers ``WorkerRuntimeBarrier``.
- On an xclbin (`device_block(..., rtp=names)`) the named parameters a
  core reads are words of its runtime-parameter buffer (`iron.design.lower`
  says why): ``aie.buffer`` ``@rtp_<worker>`` of i32 words and a lock at
  0 on the core's tile; the core waits for the lock once, before its
  loop (``aie.use_lock(Acquire, 1)``), or, where it reads a word before
  its first acquire (an iteration is a call), at the top of every
  iteration, releasing 1 at its end so the next iteration waits for the
  next call's set (mlir-aie's programming_examples/ml/
  mm_activation_epilogue: ``wait_for_value(1)``, a pass,
  ``release_with_value(1)``); it loads a word (``memref.load``) where it
  would read the scratchpad; the sequence begins with one
  ``aiex.npu.rtp_write`` per word, each of a constant (the call's value,
  as its instructions-only compile bakes it in), then ``aiex.set_lock`` of
  every such lock to 1.
- Kernels are private ``func.func`` declarations with ``link_with`` naming
  their object; kernels built from one source with one set of flags share
  one object (`kernel_objects`).

Names in a design become MLIR and ELF symbols, so fifo, kernel, parameter,
barrier, worker and buffer names must be identifiers (letters, digits, ``_``,
not starting with a digit); anything else raises `DesignError`, as does a
design the dialect cannot express (block floats off npu2). `to_mlir` does
not re-check device limits: run `check` first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping

import attrs

from iron.design.lower import (
    Await,
    Core,
    CoreOp,
    Free,
    Lowered,
    SetLocks,
    Start,
    Task,
    WriteRtp,
    endpoint_tile,
    lower,
)
from iron.design.model import (
    Acquire,
    Buf,
    Call,
    Design,
    DesignError,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    ReleaseBarrier,
    Tile,
    WaitBarrier,
    Worker,
    element_type,
    link_offsets,
    require_design,
)

DEVICE_SYMBOL = "main"
SEQUENCE_SYMBOL = "sequence"
FOREVER = 2**63 - 1  # IRON's while_true: scf.for to sys.maxsize
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# AIEDevice names at full width; narrower devices are <name>_<columns>col
_DEVICES = ("npu1", "npu2")


@attrs.frozen
class DeviceBlock:
    """One design's ``aie.device`` block, as a fused program composes it.

    `text` is the block (two spaces in, as a module holds it); `device` the
    AIEDevice it names; `argument_types` its sequence's argument memrefs, in
    tensor order; `parameters` the scratchpad symbols it reads, which the
    module around it declares."""

    text: str
    device: str
    argument_types: tuple[str, ...]
    parameters: tuple[str, ...]


def to_mlir(design: Design) -> str:
    """The placed design as MLIR text for aiecc. The same design always
    gives the same text."""
    require_design("place", design)
    block = device_block(design)
    lines = ["module {"]
    lines += [f"  aiex.scratchpad_parameter @{p} : i32" for p in design.params]
    return "\n".join([*lines, block.text, "}"]) + "\n"


def device_block(
    design: Design,
    *,
    symbol: str = DEVICE_SYMBOL,
    params: Mapping[str, str | int] | None = None,
    objects: Mapping[str, str] | None = None,
    load_pdi: bool = True,
    rtp: Collection[str] = (),
) -> DeviceBlock:
    """`design`'s device block named `symbol`. `params` binds each design
    parameter to the scratchpad symbol it reads (a str) or to a constant (an
    int, folded in where the parameter is used); by default each reads its
    own symbol. `objects` renames the kernel objects it links. With
    `load_pdi` the sequence loads the block's own PDI and then syncs the
    scratchpad (a standalone full ELF); without, the program around it does.
    `rtp` names the parameters that are runtime-parameter words (an
    xclbin's per-call values its cores read): the sequence writes each one's
    constant from `params`."""
    require_design("place", design)
    lowered = lower(design, rtp=rtp)
    return _Printer(lowered, symbol, params, objects, load_pdi).block()


def kernel_objects(design: Design) -> dict[Kernel, str]:
    """The object file each kernel links with. Kernels compiled from one
    source with the same flags share one object (a source defining two
    kernels must not be linked twice), named after the first of them."""
    first: dict[tuple, str] = {}
    return {k: first.setdefault((k.source, k.flags), k.object_file) for k in design.kernels}


# ---- names --------------------------------------------------------------------


def _check_names(design: Design, pool_symbols=(), rtp_symbols=()) -> None:
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
    device += [(f"worker {worker}'s runtime parameters", symbol) for worker, symbol in rtp_symbols]
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


def device_name(design: Design) -> str:
    """The AIEDevice of `design`'s device: npu1, npu2, or npu<n>_<columns>col."""
    device = design.device
    if device.name not in _DEVICES:
        raise DesignError(
            f"design {design.name}: mlir-aie has no aie.device for {device.name} "
            f"(valid choices: {', '.join(_DEVICES)})"
        )
    if device.columns == device.max_columns:
        return device.name
    return f"{device.name}_{device.columns}col"


def memref(design: Design, shape, dtype: str, owner: str) -> str:
    if element_type(dtype).block_float and not design.device.block_float:
        raise DesignError(
            f"design {design.name}: {owner} holds block-float {dtype}, which "
            f"{design.device.name} does not support (block floats need npu2)"
        )
    return str(Memref(shape, dtype))


def _scalar_type(dtype: str) -> str:
    # arith constants are signless, and the C ABI passes an unsigned integer as
    # the signless one of its width
    kind = element_type(dtype)
    return kind.mlir.removeprefix("u") if kind.mlir.startswith("ui") else kind.mlir


def _signless(value: int, dtype: str) -> int:
    """An unsigned scalar's bits as the signed value of its width, which a
    signless integer constant holds."""
    kind = element_type(dtype)
    bits = 8 * kind.nbytes
    if kind.mlir.startswith("ui") and value >= 2 ** (bits - 1):
        return value - 2**bits
    return value


def tile_value(tile: Tile) -> str:
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


def _list(items) -> str:
    return f"[{', '.join(map(str, items))}]"


def _dims(dims) -> str:
    return _list(f"<size = {s}, stride = {t}>" for s, t in dims)


def _emitted_tiles(design: Design) -> list[Tile]:
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


# ---- the device block --------------------------------------------------------------


class _Printer:
    def __init__(self, lowered: Lowered, symbol, params, objects, load_pdi):
        from iron.design.mlir_pools import Pools  # it builds on this module's helpers

        self.lowered, self.design = lowered, lowered.design
        self.symbol, self.load_pdi = symbol, load_pdi
        self.params = {p: p for p in self.design.params} | dict(params or {})
        self.objects = dict(objects or {})
        self.pools = Pools(lowered)
        self.barrier_locks = {
            (barrier, core.tile): f"%lock.{barrier}.{core.tile.col}.{core.tile.row}"
            for core in lowered.configuration.cores
            for barrier, _ in core.barrier_locks
        }
        self.lock_values = {
            lock: self.barrier_locks[barrier, core.tile]
            for core in lowered.configuration.cores
            for barrier, lock in core.barrier_locks
        }
        self.lock_values |= self.pools.lock_values()
        rtps = lowered.configuration.rtps
        self.lock_values |= {b.lock: f"%rtp_lock.{b.worker}" for b in rtps}

    def read_param(self, value: str, name: str) -> str:
        """The line that gives SSA `value` parameter `name`'s word."""
        bound = self.params[name]
        if isinstance(bound, int):
            return f"{value} = arith.constant {bound} : i32"
        return f"{value} = aiex.read_scratchpad_parameter @{bound} : i32"

    def block(self) -> DeviceBlock:
        design = self.design
        rtps = self.lowered.configuration.rtps
        _check_names(design, self.pools.symbols(), [(b.worker, b.symbol) for b in rtps])
        body = [f"{tile_value(t)} = aie.tile({t.col}, {t.row})" for t in _emitted_tiles(design)]
        body += [self._objectfifo(f) for f in design.fifos if not self.pools.skips(f.name)]
        body += [self._link(k) for k in design.links if not k.programmed]
        body += self.pools.device_lines()
        body += self._declarations()
        for worker in design.workers:
            body += [
                f"{_buffer_value(worker, b)} = aie.buffer({tile_value(worker.tile)}) "
                f'{{sym_name = "{worker.name}_{b.name}"}} : '
                f"{memref(design, b.shape, b.dtype, f'worker {worker.name} buffer {b.name}')}"
                f"{_initial_value(b)}"
                for b in worker.buffers
            ]
        body += [
            f"{value} = aie.lock({tile_value(tile)}) {{init = 0 : i32}}"
            for (_, tile), value in self.barrier_locks.items()
        ]
        for b in rtps:
            body += [
                f'%rtp.{b.worker} = aie.buffer({tile_value(b.tile)}) {{sym_name = "{b.symbol}"}} '
                f": memref<{len(b.params)}xi32>",
                f"%rtp_lock.{b.worker} = aie.lock({tile_value(b.tile)}) {{init = 0 : i32}}",
            ]
        for core in self.lowered.configuration.cores:
            body += _Core(self, core).lines()
        sequence, types = self._sequence()
        body += sequence
        lines = [f"  aie.device({device_name(design)}) @{self.symbol} {{"]
        lines += ["    " + line for line in body]
        lines.append("  }")
        read = tuple(dict.fromkeys(b for b in self.params.values() if isinstance(b, str)))
        return DeviceBlock("\n".join(lines), device_name(design), types, read)

    # ---- fifos, links, kernels

    def _objectfifo(self, fifo: ObjectFifo) -> str:
        design = self.design
        shim_dims = (fifo.producer.kind == "shim" and fifo.dims_to_stream) or any(
            c.kind == "shim" and c.dims_from_stream for c in fifo.consumers
        )
        if shim_dims:
            raise DesignError(
                f"design {design.name}: fifo {fifo.name}: mlir-aie has no dimensionsToStream or "
                "dimensionsFromStream on a shim tile; reorder with the fill's or drain's TAP"
            )
        producer = tile_value(endpoint_tile(design, fifo.producer))
        if fifo.dims_to_stream:
            producer += f" dimensionsToStream {_dims(fifo.dims_to_stream)}"
        consumers = []
        for consumer in fifo.consumers:
            text = tile_value(endpoint_tile(design, consumer))
            if consumer.dims_from_stream:
                text += f" dimensionsFromStream {_dims(consumer.dims_from_stream)}"
            consumers.append(text)
        depth = dict(self.lowered.configuration.fifo_depths)[fifo.name]
        depth = _list(f"{d} : i32" for d in depth) if isinstance(depth, tuple) else f"{depth} : i32"
        attributes = []
        if any(c.channel is not None for c in fifo.consumers):
            pins = ", ".join(str(-1 if c.channel is None else c.channel) for c in fifo.consumers)
            attributes.append(f"cons_dma_channels = array<i32: {pins}>")
        for name, value in (
            ("iter_count", fifo.iter_count),
            ("prod_dma_channel", fifo.producer.channel),
            ("repeat_count", fifo.repeat_count),
        ):
            if value is not None:
                attributes.append(f"{name} = {value} : i32")
        attributes = f" {{{', '.join(attributes)}}}" if attributes else ""
        type_ = memref(design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        return (
            f"aie.objectfifo @{fifo.name}({producer}, {{{', '.join(consumers)}}}, {depth})"
            f"{attributes} : !aie.objectfifo<{type_}>"
        )

    def _link(self, link) -> str:
        fifos = (
            f"{_list(f'@{f}' for f in link.sources)} -> {_list(f'@{f}' for f in link.destinations)}"
        )
        if link.kind == "forward":
            return f"aie.objectfifo.link {fifos}([] [])"
        offsets = _list(link_offsets(self.design, link))
        pair = f"[] {offsets}" if link.kind == "split" else f"{offsets} []"
        return f"aie.objectfifo.link {fifos}({pair})"

    def _signature(self, kernel: Kernel) -> str:
        return ", ".join(
            memref(self.design, a.shape, a.dtype, f"kernel {kernel.symbol}")
            if isinstance(a, Memref)
            else _scalar_type(a.dtype)
            for a in kernel.args
        )

    def _declarations(self) -> list[str]:
        design = self.design
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
            linked = self.objects.get(objects[kernel], objects[kernel])
            lines.append(
                f"func.func private @{kernel.symbol}({self._signature(kernel)}) "
                f'attributes {{link_with = "{linked}"}}'
            )
        return lines

    # ---- the runtime sequence

    def _sequence(self) -> tuple[list[str], tuple[str, ...]]:
        design, runtime = self.design, self.lowered.runtime
        arguments = {t.name: f"%arg{i}" for i, t in enumerate(design.tensors)}
        types = tuple(memref(design, t.shape, t.dtype, f"tensor {t.name}") for t in design.tensors)
        signature = ", ".join(f"{arguments[t.name]}: {m}" for t, m in zip(design.tensors, types))
        body = []
        if self.load_pdi:
            body.append(f"aiex.npu.load_pdi {{device_ref = @{self.symbol}}}")
            if design.params:
                body.append("aiex.sync_scratchpad_parameters_from_host")
        tasks = {t.index: t for t in runtime.tasks}
        pushes = {p.index: p for p in runtime.pushes}
        for op in runtime.ops:
            if isinstance(op, Start) and op.task in tasks:
                task = tasks[op.task]
                body += self._task(task, arguments[task.statement.tensor], types)
            elif isinstance(op, Start):
                body += self.pools.push(pushes[op.task], f"%task{op.task}")
            elif isinstance(op, Await):
                body.append(f"aiex.dma_await_task(%task{op.task})")
            elif isinstance(op, Free):
                body.append(f"aiex.dma_free_task(%task{op.task})")
            elif isinstance(op, SetLocks):
                body += [
                    f"aiex.set_lock({self.lock_values[lock]}, {op.value})" for lock in op.locks
                ]
            elif isinstance(op, WriteRtp):
                body += self._rtp_write(op)
        lines = [
            f"aie.runtime_sequence @{SEQUENCE_SYMBOL}({signature}) {{",
            *("  " + line for line in body),
            "}",
        ]
        return lines, types

    def _rtp_write(self, op: WriteRtp) -> list[str]:
        """One word of a runtime-parameter buffer, the call's constant."""
        buffer = self.lowered.configuration.rtps[op.buffer]
        bound = self.params[op.param]
        if not isinstance(bound, int):
            raise DesignError(
                f"design {self.design.name}: parameter {op.param} is a runtime-parameter word, "
                f"which the sequence writes as this call's constant, not scratchpad @{bound}"
            )
        value = f"%rtp.{buffer.worker}.{op.index}"
        return [
            f"{value} = arith.constant {bound} : i32",
            f"aiex.npu.rtp_write(@{buffer.symbol}, {op.index}, {value}) : i32",
        ]

    def _task(self, task: Task, argument: str, types) -> list[str]:
        """One shim DMA task: its pattern padded to 4 dimensions, the highest
        one repeating the BD (`repeat_count` is repeats - 1)."""
        statement = task.statement
        tensor_index = next(
            i for i, t in enumerate(self.design.tensors) if t.name == statement.tensor
        )
        tap = task.tap
        attributes = ["issue_token = true"] if statement.wait else []
        if tap.sizes[0] > 1:
            attributes.append(f"repeat_count = {tap.sizes[0] - 1} : i32")
        attributes = f" {{{', '.join(attributes)}}}" if attributes else ""
        offset, patched = tap.offset, ""
        if statement.offset_param:
            bound = self.params[statement.offset_param]
            if isinstance(bound, int):  # a constant parameter is part of the static offset
                offset += bound
            else:  # the word is added to the BD's address when the task is issued
                patched = f" {{offset_parameter = @{bound}}}"
        return [
            f"%task{task.index} = aiex.dma_configure_task_for @{statement.fifo} {{",
            f"  aie.dma_bd({argument} : {types[tensor_index]} offset = {offset} len = "
            f"{math.prod(tap.sizes[1:])} sizes = {_list(tap.sizes)} strides = {_list(tap.strides)})"
            f"{patched}",
            "  aie.end",
            f"}}{attributes}",
            f"aiex.dma_start_task(%task{task.index})",
        ]


# ---- cores ----------------------------------------------------------------------


class _Core:
    """One worker's ``aie.core``: its body in a loop, constants hoisted to the
    top (so nested loops never define a name twice)."""

    def __init__(self, printer: _Printer, core: Core) -> None:
        self.printer, self.design, self.core = printer, printer.design, core
        self.worker = self.design.worker(core.worker)
        self.where = f"design {self.design.name}: worker {core.worker}"
        self.constants: dict[str, str] = {}  # name -> definition
        self.values = 0

    def lines(self) -> list[str]:
        core, tile = self.core, self.core.tile
        bound = FOREVER if core.forever else 1
        body = [
            f"memref.store {self._constant(0, 'i32')}, {self.printer.pools.next_value(end.fifo, core.worker)}"
            f"[{self._index(0)}] : memref<1xi32>"
            for end in core.ends
            if end.programmed
        ]
        rtp = None if core.rtp is None else self.printer.lowered.configuration.rtps[core.rtp]
        head, tail = [], []
        if rtp is not None:  # the runtime's set of its words: once, or every call
            one = self._constant(1, "i32")
            wait = [f"aie.use_lock(%rtp_lock.{core.worker}, Acquire, {one})"]
            if rtp.each_iteration:
                head, tail = wait, [f"aie.use_lock(%rtp_lock.{core.worker}, Release, {one})"]
            else:
                body += wait
        body += self._loop(bound, core.body, {}, depth=0, head=head, tail=tail)
        return [
            f"%core_{tile.col}_{tile.row} = aie.core({tile_value(tile)}) {{",
            *("  " + c for c in self.constants.values()),
            *("  " + line for line in body),
            "  aie.end",
            f"}} {{stack_size = {core.stack} : i32}}",
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

    def _loop(
        self, count, body: tuple[CoreOp, ...], subviews: dict, depth: int, head=(), tail=()
    ) -> list[str]:
        """An ``scf.for`` of `body`, `head` and `tail` lines first and last in it."""
        lines, start, step = [], self._index(0), self._index(1)
        if isinstance(count, Param):
            word = self._param(count.name, lines)
            bound = self._value()
            lines.append(f"{bound} = arith.index_cast {word} : i32 to index")
        else:
            bound = self._index(count)
        lines.append(f"scf.for %i{depth} = {start} to {bound} step {step} {{")
        # values defined in the body are not in scope after it
        inner = dict(subviews)
        lines += ["  " + line for line in head]
        for op in body:
            lines += ["  " + line for line in self._op(op, inner, depth + 1)]
        return [*lines, *("  " + line for line in tail), "}"]

    def _op(self, lowered: CoreOp, subviews: dict, depth: int) -> list[str]:
        """`subviews` maps a fifo to an acquire in scope (its subview, and how
        many it acquired: an access's index stays below that, as
        `ObjectFifoSubviewAccessOp::verify` requires)."""
        op = lowered.op
        if isinstance(op, (Acquire, Release)) and self.core.end(op.fifo).programmed:
            return self._pool_lock(op, lowered.held.of(op.fifo)[0])
        if isinstance(op, Acquire):
            value = self._value()
            subviews[op.fifo] = (value, op.n)
            return [
                f"{value} = aie.objectfifo.acquire @{op.fifo}({self._port(op.fifo)}, {op.n}) "
                f": {self._subview(op.fifo)}"
            ]
        if isinstance(op, Release):
            return [f"aie.objectfifo.release @{op.fifo}({self._port(op.fifo)}, {op.n})"]
        if isinstance(op, Call):
            return self._call(lowered, subviews)
        if isinstance(op, (WaitBarrier, ReleaseBarrier)):
            lock = self.printer.barrier_locks[(op.barrier, self.core.tile)]
            action = "Acquire" if isinstance(op, WaitBarrier) else "Release"
            return [f"aie.use_lock({lock}, {action}, {self._constant(op.value, 'i32')})"]
        if isinstance(op, Loop):
            return self._loop(op.count, lowered.body, subviews, depth)
        raise DesignError(f"{self.where}: cannot emit {op!r}")

    def _param(self, name: str, lines: list) -> str:
        """The SSA value of parameter `name` where the core uses it, its
        read added to `lines`: a word of its runtime-parameter buffer, a
        scratchpad read, or a constant."""
        value = self._value()
        rtps = self.printer.lowered.configuration.rtps
        if self.core.rtp is not None and name in rtps[self.core.rtp].params:
            buffer = rtps[self.core.rtp]
            lines.append(
                f"{value} = memref.load %rtp.{buffer.worker}"
                f"[{self._index(buffer.params.index(name))}] : memref<{len(buffer.params)}xi32>"
            )
        else:
            lines.append(self.printer.read_param(value, name))
        return value

    def _pool_lock(self, op, held: int) -> list[str]:
        """An acquire takes only the objects not yet held (cumulative, as
        the ObjectFifo lowering counts); a release hands the oldest back
        and moves the ring's next object on. What is held here is the same in
        every iteration (`check` makes sure)."""
        pools, name = self.printer.pools, self.core.worker
        if isinstance(op, Acquire):
            if op.n <= held:
                return []
            value = self._constant(op.n - held, "i32")
            return [
                f"aie.use_lock({pools.end_lock(op.fifo, name, 'cons')}, AcquireGreaterEqual, {value})"
            ]
        depth = self.printer.lowered.configuration.pools[self.core.end(op.fifo).pool].depth
        now, moved, wrapped = (self._value() for _ in range(3))
        zero, next_ = self._index(0), pools.next_value(op.fifo, name)
        return [
            f"aie.use_lock({pools.end_lock(op.fifo, name, 'prod')}, Release, {self._constant(op.n, 'i32')})",
            f"{now} = memref.load {next_}[{zero}] : memref<1xi32>",
            f"{moved} = arith.addi {now}, {self._constant(op.n, 'i32')} : i32",
            f"{wrapped} = arith.remui {moved}, {self._constant(depth, 'i32')} : i32",
            f"memref.store {wrapped}, {next_}[{zero}] : memref<1xi32>",
        ]

    def _pool_object(self, arg: Obj, lines: list):
        """The held object `arg` of a pool-fed fifo: the ring buffer at
        (next + index) mod depth, chosen with ``scf.index_switch``."""
        fifo, name = self.design.fifo(arg.fifo), self.core.worker
        pools = self.printer.pools
        depth = self.printer.lowered.configuration.pools[self.core.end(arg.fifo).pool].depth
        type_ = memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        now, moved, wrapped, index, chosen = (self._value() for _ in range(5))
        lines += [
            f"{now} = memref.load {pools.next_value(arg.fifo, name)}[{self._index(0)}] : memref<1xi32>",
            f"{moved} = arith.addi {now}, {self._constant(arg.index, 'i32')} : i32",
            f"{wrapped} = arith.remui {moved}, {self._constant(depth, 'i32')} : i32",
            f"{index} = arith.index_cast {wrapped} : i32 to index",
            f"{chosen} = scf.index_switch {index} -> {type_}",
        ]
        for case in [*range(depth), "default"]:
            buffer = pools.end_buffer(arg.fifo, name, 0 if case == "default" else case)
            head = "default" if case == "default" else f"case {case}"
            lines += [f"{head} {{", f"  scf.yield {buffer} : {type_}", "}"]
        return chosen, fifo.shape, fifo.dtype

    def _port(self, fifo: str) -> str:
        return "Produce" if self.core.end(fifo).producer else "Consume"

    def _subview(self, fifo: str) -> str:
        f = self.design.fifo(fifo)
        return f"!aie.objectfifosubview<{memref(self.design, f.shape, f.dtype, f'fifo {fifo}')}>"

    def _call(self, lowered: CoreOp, subviews: dict) -> list[str]:
        call = lowered.op
        kernel = call.kernel
        where = f"{self.where}: call of {kernel.symbol}"
        lines, operands = [], []
        for index, (arg, param) in enumerate(zip(call.args, kernel.args)):
            what = f"{where}: argument {index}"
            if isinstance(param, Memref):
                value, shape, dtype = self._buffer_operand(
                    arg, param, lowered, subviews, lines, what
                )
                operands.append(self._reshaped(value, shape, dtype, param, lines, what))
            elif isinstance(arg, Param):
                operands.append(self._param(arg.name, lines))
            else:
                type_ = _scalar_type(param.dtype)
                operands.append(self._constant(_signless(arg, param.dtype), type_))
        types = self.printer._signature(kernel)
        lines.append(f"func.call @{kernel.symbol}({', '.join(operands)}) : ({types}) -> ()")
        return lines

    def _buffer_operand(self, arg, param: Memref, lowered: CoreOp, subviews, lines, what):
        if isinstance(arg, Buf):
            buffer = next(b for b in self.worker.buffers if b.name == arg.name)
            return _buffer_value(self.worker, buffer), buffer.shape, buffer.dtype
        if self.core.end(arg.fifo).programmed:
            return self._pool_object(arg, lines)
        subview, acquired = subviews.get(arg.fifo, (None, 0))
        if acquired <= arg.index:  # an acquire of what is held: a handle, taking nothing
            subview, acquired = self._value(), max(arg.index + 1, lowered.held.of(arg.fifo)[0])
            lines.append(
                f"{subview} = aie.objectfifo.acquire @{arg.fifo}({self._port(arg.fifo)}, "
                f"{acquired}) : {self._subview(arg.fifo)}"
            )
            subviews[arg.fifo] = (subview, acquired)
        fifo = self.design.fifo(arg.fifo)
        value = self._value()
        type_ = memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        lines.append(
            f"{value} = aie.objectfifo.subview.access {subview}[{arg.index}] "
            f": {self._subview(arg.fifo)} -> {type_}"
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
