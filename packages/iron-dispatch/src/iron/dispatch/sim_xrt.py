"""A simulated XRT device behind the seam of `iron.dispatch.xrt`.

- Buffer objects keep host and device bytes apart: a write reaches the
  other side only through `sync`, which moves whole 64-byte coherence
  granules (the cache lines the host flushes or invalidates), so a range
  that is not granule-aligned drags its neighbours' bytes along, as on the
  NPU.
- `elf(path)` reads a program (`iron.dispatch.program.Program` as JSON) in
  place of an ELF. Kernel models and host models are code, which a cache
  entry never holds: the device takes them from its `library` (one per
  session). What the library lacks it rebuilds from the entry beside the
  program (``operators.json``: each operator's registered class, its
  parameters and device), so a cached program runs in any process; only a
  class an installed plugin registers is imported, and a rebuilt design
  must have the digest the program names. A context refuses a program
  whose designs or host models the library has not.
- Misuse is refused as XRT refuses it, naming the argument and the rule: a
  sync direction that is neither of the two, a negative buffer size, a
  sync outside the buffer, `set_arg` past the program's arguments.
- A run executes the program step by step: a step with a design runs
  its `iron.design.Simulator` (one per design, in the library: a later
  run replays the first) on the device-side bytes of its views, with its
  parameters read from the run's control scratchpad; a runtime-shaped
  step runs its configuration with the stream of the call's values and
  their derived words (`iron.dispatch.streams`, a simulator per stream);
  a step without a design runs its operator's host model on the same
  bytes. A traced program gets
  one `TRACE_RECORD` per step in its trace buffer.

- An xclbin (`xclbin(path)`: its kernels as JSON) is registered on the
  device and a context made from its uuid; each kernel is called as pyxrt
  calls one, with opcode 3, an instruction buffer and its length in words.
  The stream (`stream`: the step's program with the call's values folded
  in, under a header naming the xclbin and kernel it was made for) is read
  from the device side of that buffer, so one never synced is refused, as
  is one made for another xclbin or kernel. A kernel's design runs in the
  xclbin's form: the per-call parameters its cores read (the kernel's
  ``rtp``) are words of runtime-parameter buffers that the stream writes
  and each core waits for (`iron.design.lower`).

What is not simulated: timing (the trace's ticks count DDR words moved,
not cycles), PDI loads and reconfiguration, and the instructions of a
stream (the simulated one names the step and its values).
"""

from __future__ import annotations

import collections
import json
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

from iron.alloc import align_up
from iron.core import IN, OUT, Device, Operator, as_dtype, files, registry
from iron.design import Design, Simulator, lower
from iron.design.aiecc import ELF_KERNEL
from iron.dispatch.cache import read_json
from iron.dispatch.executable import kernel
from iron.dispatch.image import PARAMETER_WORDS
from iron.dispatch.pipeline import OPERATORS
from iron.dispatch.program import Program, step_design
from iron.dispatch.streams import Streams
from iron.dispatch.values import step_values

#: a trace record: the device block's name (UTF-8, zero-padded), the step's
#: start and end in simulated ticks (one tick per 32-bit word moved to or
#: from DDR), and the bytes it moved
TRACE_RECORD = struct.Struct("<20sIII")
COMPLETED = "ERT_CMD_STATE_COMPLETED"


class SimBufferObject:
    def __init__(self, nbytes: int, granule: int = 64) -> None:
        self.host = np.zeros(nbytes, np.uint8)
        self.device = np.zeros(nbytes, np.uint8)
        self.granule = granule

    def map(self) -> np.ndarray:
        return self.host

    def size(self) -> int:
        return self.host.size

    def sync(self, direction: str, size: int, offset: int) -> None:
        if direction not in (SimulatedXrt.TO_DEVICE, SimulatedXrt.FROM_DEVICE):
            raise ValueError(
                f"sync: direction {direction!r} is neither {SimulatedXrt.TO_DEVICE} nor "
                f"{SimulatedXrt.FROM_DEVICE}"
            )
        if offset < 0 or size < 0 or offset + size > self.host.size:
            raise ValueError(
                f"sync of {size} B at offset {offset} is outside the {self.host.size}-byte buffer"
            )
        lo = offset // self.granule * self.granule
        hi = min(align_up(offset + size, self.granule), self.host.size)
        if direction == SimulatedXrt.TO_DEVICE:
            self.device[lo:hi] = self.host[lo:hi]
        else:
            self.host[lo:hi] = self.device[lo:hi]


class Library:
    """The code behind programs: designs by digest, host models by key."""

    def __init__(self, streams: Streams | None = None) -> None:
        self.designs: dict[str, Design] = {}
        self.hosts: dict[str, Callable] = {}
        #: by digest and runtime-parameter words: made on first run, replayed after
        self.simulators: dict[tuple[str, frozenset[str]], Simulator] = {}
        #: runtime-shaped steps: the operator behind each such design, and
        #: one simulator per stream (the configuration with that stream)
        self.operators: dict[str, Operator] = {}
        self.streams = streams if streams is not None else Streams()
        self._streamed: collections.OrderedDict[tuple, Simulator] = collections.OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        self.designs.clear()
        self.hosts.clear()
        self.simulators.clear()
        self.operators.clear()
        self._streamed.clear()
        self.streams.clear()

    def stream(
        self, digest: str, values: dict[str, int], rtp: frozenset[str] = frozenset()
    ) -> tuple[Simulator, dict[str, int]]:
        """The simulator of the runtime-shaped design `digest` with the
        stream for `values` (its words `rtp` as runtime-parameter writes: an
        xclbin's form), and the parameter words it reads."""
        op, design = self.operators[digest], self.designs[digest]
        stream = self.streams.stream(op, design, values, rtp)
        key = (digest, tuple(sorted(values.items())), rtp)
        with self._lock:  # graph functions of one session share the library
            simulator = self._streamed.get(key)
            if simulator is None or simulator.lowered is not stream.lowered:
                simulator = Simulator(stream.lowered.design, lowered=stream.lowered)
                self._streamed[key] = simulator
                if len(self._streamed) > Streams.KEPT:
                    self._streamed.popitem(last=False)
            return simulator, stream.params

    def simulator(self, digest: str, rtp: frozenset[str] = frozenset()) -> Simulator:
        """The simulator of the design `digest` names, lowered with `rtp` as
        runtime-parameter words (an xclbin's form)."""
        key = (digest, rtp)
        if key not in self.simulators:
            design = self.designs[digest]
            self.simulators[key] = Simulator(design, lowered=lower(design, rtp=rtp))
        return self.simulators[key]

    def load(self, program: Program, entry: Path) -> None:
        """Rebuild what `program` names and the library lacks from the
        operator records of cache `entry` (see the module docstring)."""
        self.load_named(program.name, [(s.digest, s.host) for s in program.steps], entry)

    def load_named(self, where: str, names, entry: Path) -> None:
        """Rebuild each (design digest, host key) of `names` (one of the two
        None) that the library lacks from the operator records of `entry`."""
        wanted = [
            (digest, True) if digest is not None else (host, False)
            for digest, host in names
            if (digest not in self.designs if digest is not None else host not in self.hosts)
        ]
        if not wanted:
            return
        try:
            records = read_json(entry / OPERATORS)
        except (OSError, ValueError) as error:
            raise RuntimeError(
                f"program {where}: its entry has no readable {OPERATORS} ({error})"
            ) from None
        for name, is_design in wanted:
            op = _rebuilt(where, entry / OPERATORS, name, records.get(name))
            if is_design:
                design = step_design(op, f"program {where}")
                if design is None or design.digest() != name:
                    raise RuntimeError(
                        f"program {where}: {type(op).__name__} builds another design "
                        f"here than the {name[:12]} it was compiled with (its code changed)"
                    )
                self.designs[name] = design
                self.operators[name] = op
            else:
                self.hosts[name] = kernel(op, use_device_model=True)


class SimDevice:
    def __init__(self, index: int, library: Library) -> None:
        self.index = index
        self.library = library
        self.xclbins: dict[str, SimXclbin] = {}  # registered, by uuid


class SimContext:
    def __init__(self, device: SimDevice, program: Program) -> None:
        missing = [d for d in program.devices.values() if d not in device.library.designs]
        missing += [s.host for s in program.steps if s.host and s.host not in device.library.hosts]
        if missing:
            raise RuntimeError(
                f"program {program.name}: the simulated device was given no design or host "
                f"model for {', '.join(missing)}"
            )
        self.device, self.program = device, program


class SimRun:
    """A run of a program; `rtp` (a kernel of an xclbin): the parameters
    its device block's cores read from runtime-parameter buffers, which the
    stream writes (`iron.design.lower`)."""

    def __init__(self, context: SimContext, rtp: frozenset[str] = frozenset()) -> None:
        self.context, self.rtp = context, rtp
        self.args: dict[int, SimBufferObject] = {}
        self.scratchpad = SimBufferObject(4 * PARAMETER_WORDS)
        self.ticks = 0
        self._views = None

    def set_arg(self, index: int, bo: SimBufferObject) -> None:
        count = len(self.context.program.sizes)
        if (
            isinstance(index, bool)
            or not isinstance(index, (int, np.integer))
            or not 0 <= index < count
        ):
            raise IndexError(
                f"program {self.context.program.name}: set_arg index {index!r} is not one of its "
                f"{count} arguments (0..{count - 1})"
            )
        self.args[index] = bo
        self._views = None

    def _bound(self) -> list[list[np.ndarray]]:
        """Each step's views of the device-side bytes, made once per binding
        (a run repeats with the same arguments)."""
        if self._views is None:
            self._views = [
                [
                    self.args[a].device[o : o + n].view(as_dtype(d)).reshape(shape)
                    for a, o, n, d, shape in step.args
                ]
                for step in self.context.program.steps
            ]
        return self._views

    def get_ctrl_scratchpad_bo(self) -> SimBufferObject:
        return self.scratchpad

    def start(self) -> None:
        program = self.context.program
        absent = [i for i in range(len(program.sizes)) if i not in self.args]
        if absent:
            raise RuntimeError(f"program {program.name}: argument(s) {absent} were never set")
        words = self.scratchpad.device.view(np.int32)
        library = self.context.device.library
        self.ticks = 0
        for number, (step, arrays) in enumerate(zip(program.steps, self._bound())):
            if step.device is None:
                moved = self._host_step(library.hosts[step.host], step, arrays, words)
            elif step.stream:
                values = step_values(step.values, words)
                simulator, params = library.stream(step.digest, values, self.rtp)
                moved = self._design_step(simulator, params, arrays)
            else:
                params = step_values(step.params, words)
                simulator = library.simulator(step.digest, self.rtp)
                moved = self._design_step(simulator, params, arrays)
            self._trace(number, step.device or f"host:{step.operator}", moved)

    def _design_step(self, simulator: Simulator, params: dict[str, int], arrays) -> int:
        design = simulator.design
        pairs = zip(design.tensors, arrays)
        run = simulator.run({t.name: a for t, a in pairs if t.direction is not OUT}, params)
        for tensor, array in zip(design.tensors, arrays):
            if tensor.direction is not IN:
                array[...] = run[tensor.name]
        ddr = run.traffic.ddr
        return ddr.read + ddr.written

    def _host_step(self, model: Callable, step, arrays, words) -> int:
        outputs = model(*(arrays[i] for i in step.reads), **step_values(step.params, words))
        for i, out in zip(step.writes, outputs):
            arrays[i][...] = out
        return sum(arrays[i].nbytes for i in (*step.reads, *step.writes))

    def _trace(self, number: int, name: str, moved: int) -> None:
        program = self.context.program
        if not program.trace_size:
            return
        trace = self.args[len(program.sizes) - 1].device
        start, self.ticks = self.ticks, self.ticks + max(1, moved // 4)
        at = number * TRACE_RECORD.size
        if at + TRACE_RECORD.size <= trace.size:  # records past the buffer's end are dropped
            TRACE_RECORD.pack_into(trace, at, name.encode()[:20], start, self.ticks, moved)

    def wait(self) -> str:
        return COMPLETED


def _rebuilt(program: str, path: Path, name: str, record):
    """The operator of an entry's record (in the file `path`), each field's
    JSON type checked, its class found among the registered operators'
    (never imported by a name from a file)."""
    if record is None:
        raise RuntimeError(f"program {program}: {path} has no operator record for {name}")
    try:
        files.expect(path, name, record, "an object")
        target = files.expect(path, f"{name}.class", record.get("class"), "a string")
        params = files.expect(path, f"{name}.params", record.get("params"), "an object")
        device = files.expect(path, f"{name}.device", record.get("device"), "an array", "null")
        if device is not None:
            if len(device) != 2:
                raise ValueError(f"{path}: {name}.device: an array of a name and columns")
            files.expect(path, f"{name}.device[0]", device[0], "a string")
            files.expect(path, f"{name}.device[1]", device[1], "an integer")
    except ValueError as error:
        raise RuntimeError(f"program {program}: {error}") from None
    found = [e for e in registry.operators() if e.target == target]
    if not found:
        raise RuntimeError(
            f"program {program}: its step's operator {target} is not one an installed plugin "
            "registers, so this process cannot rebuild it (the process that compiled the "
            "program can run it)"
        )
    op = found[0].load().from_data(params)
    if device is not None:
        op = op.resolve(Device.from_name(*device))
    return op


def read_trace(data) -> list[dict]:
    """The records of a simulated trace buffer, up to the first empty one."""
    records = []
    for at in range(0, len(data) - TRACE_RECORD.size + 1, TRACE_RECORD.size):
        name, start, end, moved = TRACE_RECORD.unpack_from(bytes(data[at : at + TRACE_RECORD.size]))
        if not name.strip(b"\0"):
            break
        records.append(
            {"name": name.rstrip(b"\0").decode(), "start": start, "end": end, "bytes": moved}
        )
    return records


# ---- xclbin images ---------------------------------------------------------------


class SimXclbin:
    """An xclbin as the simulated device reads it (`pipeline.xclbin_record`):
    its uuid and kernels, one per device block (or host model)."""

    def __init__(self, record: dict, where: str) -> None:
        try:
            files.expect(where, "uuid", record.get("uuid"), "a string")
            files.expect(where, "name", record.get("name"), "a string")
            kernels = files.expect(where, "kernels", record.get("kernels"), "an array")
            for i, k in enumerate(kernels):
                files.expect(where, f"kernels[{i}]", k, "an object")
                files.expect(where, f"kernels[{i}].name", k.get("name"), "a string")
                files.expect(where, f"kernels[{i}].digest", k.get("digest"), "a string", "null")
                files.expect(where, f"kernels[{i}].host", k.get("host"), "a string", "null")
                rtp = files.expect(where, f"kernels[{i}].rtp", k.get("rtp"), "an array")
                for j, name in enumerate(rtp):
                    files.expect(where, f"kernels[{i}].rtp[{j}]", name, "a string")
        except ValueError as error:
            raise ValueError(f"xclbin {error}") from None
        self.uuid, self.name = record["uuid"], record["name"]
        self.kernels = {k["name"]: k for k in kernels}

    def get_uuid(self) -> str:
        return self.uuid


class SimXclbinContext:
    def __init__(self, device: SimDevice, xclbin: SimXclbin) -> None:
        self.device, self.xclbin = device, xclbin


def stream(xclbin_uuid: str, kernel: str, program: Program, params: dict, values: dict):
    """The simulated instruction stream of a one-step program for one
    call's `params` and dispatch-time `values` (`program.call_values`):
    the program with both folded in (what an instructions-only compile
    bakes into the real stream; a runtime-shaped step's sequence and
    derived words then come from `Library.stream` at those values) under a
    header naming the xclbin and kernel it was made for, as UTF-8 JSON
    padded with zeros to whole 32-bit words."""
    step = program.steps[0]
    folded = attrs.evolve(
        program,
        steps=(
            attrs.evolve(
                step,
                params=tuple((n, -1, int(params[n])) for n, _, _ in step.params),
                values=tuple((m, -1, int(values[m])) for m, _, _ in step.values),
            ),
        ),
        words=(),
    )
    text = json.dumps({"xclbin": xclbin_uuid, "kernel": kernel, "program": folded.to_json()})
    data = text.encode()
    return np.frombuffer(data + b"\0" * (-len(data) % 4), np.uint32)


class SimKernel:
    """A kernel of a registered xclbin: called as pyxrt calls one, with the
    opcode, the instruction buffer, its length in words, then the buffers."""

    def __init__(self, context: SimXclbinContext, name: str) -> None:
        self.context, self.name = context, name

    def group_id(self, index: int) -> int:
        return index

    def __call__(self, opcode: int, instructions: SimBufferObject, count: int, *bos):
        xclbin = self.context.xclbin
        where = f"xclbin {xclbin.name} kernel {self.name}"
        if opcode != 3:
            raise ValueError(f"{where}: opcode {opcode!r}, not 3 (a DPU kernel's run)")
        if not 0 < count * 4 <= instructions.size():
            raise ValueError(
                f"{where}: {count} instruction words do not fit the {instructions.size()}-byte "
                "instruction buffer"
            )
        # the device reads its side of the buffer: a stream never synced is not there
        data = bytes(instructions.device[: 4 * count]).rstrip(b"\0")
        try:
            header = json.loads(data.decode())
            program = Program.from_json(header["program"], f"{where}: its stream")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise RuntimeError(
                f"{where}: the instruction buffer holds no stream (was it synced to the device?)"
            ) from None
        if header.get("xclbin") != xclbin.uuid or header.get("kernel") != self.name:
            raise RuntimeError(
                f"{where}: the stream was made for xclbin {header.get('xclbin')!r} kernel "
                f"{header.get('kernel')!r}; it does not belong to the loaded xclbin "
                f"{xclbin.uuid!r}"
            )
        step, record = program.steps[0], xclbin.kernels[self.name]
        # a runtime-shaped step's designs at every value share its kernel (the
        # block named by their configuration); any other runs the one design
        mine = step.device == self.name if step.stream else step.digest == record["digest"]
        if not mine or step.host != record["host"]:
            raise RuntimeError(f"{where}: the stream runs another design than this kernel's")
        run = SimRun(SimContext(self.context.device, program), frozenset(record["rtp"]))
        for index, bo in enumerate(bos):
            run.set_arg(index, bo)
        run.start()
        return run


class SimulatedXrt:
    """The seam's calls on a simulated device (`iron.dispatch.xrt`)."""

    name = "simulated"
    TO_DEVICE = "XCL_BO_SYNC_BO_TO_DEVICE"
    FROM_DEVICE = "XCL_BO_SYNC_BO_FROM_DEVICE"

    def __init__(self, granule: int = 64, library: Library | None = None) -> None:
        self.granule = granule  # iron-core Device.coherence_granule
        self.library = library if library is not None else Library()
        self._devices: dict[int, SimDevice] = {}

    def device(self, index: int = 0) -> SimDevice:
        if index not in self._devices:
            self._devices[index] = SimDevice(index, self.library)
        return self._devices[index]

    def elf(self, path) -> Program:
        """The program in `path`: a regular file (a FIFO or a device is
        refused unopened) holding a program's JSON, each field checked."""
        program = Program.from_json(files.read_bytes(path), str(path))
        self.library.load(program, Path(path).parent)
        return program

    def xclbin(self, path) -> SimXclbin:
        """The xclbin in `path` (the kernels as JSON, a regular file); the
        designs and host models its kernels run come from the library or
        the entry beside it."""
        record = read_json(Path(path))
        xclbin = SimXclbin(record, str(path))
        names = [(k["digest"], k["host"]) for k in xclbin.kernels.values()]
        self.library.load_named(xclbin.name, names, Path(path).parent)
        return xclbin

    def register_xclbin(self, device: SimDevice, xclbin: SimXclbin) -> None:
        device.xclbins[xclbin.uuid] = xclbin

    def hw_context(self, device: SimDevice, elf):
        """A context of a full ELF (a program), or of a registered xclbin by uuid."""
        if isinstance(elf, Program):
            return SimContext(device, elf)
        if elf not in device.xclbins:
            raise RuntimeError(f"hw_context: no xclbin with uuid {elf!r} is registered")
        return SimXclbinContext(device, device.xclbins[elf])

    def xclbin_kernel(self, context: SimXclbinContext, name: str) -> SimKernel:
        if name not in context.xclbin.kernels:
            raise RuntimeError(
                f"xclbin {context.xclbin.name} has no kernel {name!r} "
                f"(kernels: {', '.join(context.xclbin.kernels)})"
            )
        return SimKernel(context, name)

    def instruction_bo(self, device: SimDevice, nbytes: int, kernel: SimKernel) -> SimBufferObject:
        """An instruction buffer for `kernel` (pyxrt: cacheable, the kernel's group 1)."""
        return self.bo(device, nbytes)

    def kernel(self, context: SimContext, name: str) -> SimContext:
        if not isinstance(context, SimContext):
            raise RuntimeError("kernel: an xclbin's context takes xclbin_kernel (pyxrt.kernel)")
        if name != ELF_KERNEL:
            raise RuntimeError(f"a full ELF's kernel is {ELF_KERNEL!r}, not {name!r}")
        return context

    def run(self, kernel: SimContext) -> SimRun:
        return SimRun(kernel)

    def bo(self, device: SimDevice, nbytes: int) -> SimBufferObject:
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ValueError(f"bo: nbytes must be an int >= 0, got {nbytes!r}")
        return SimBufferObject(max(1, int(nbytes)), self.granule)  # XRT allocates at least a byte
