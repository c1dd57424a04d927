"""A graph function's residents: the weights and states every version
shares at one offset of the arena, and the arena's memory that holds them.

Weights upload once per storage, in pieces, straight into the arena; a
state starts zeroed and persists across calls and versions. In poison mode
each weight's CRC-32 from its upload is checked before every call.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import attrs
import numpy as np

from iron.alloc import ArenaPlan
from iron.core import dtype_name
from iron.core.capture import Graph, storage_key
from iron.dispatch.layout import Layout
from iron.dispatch.memory import Arena, view

PIECE_BYTES = 64 * 2**20
#: weight pieces `Residents.load` copies at once: one per core, up to 4
#: (a few streams fill the memory bus; more only contend)
UPLOAD_THREADS = min(4, os.cpu_count() or 1)


@attrs.frozen
class Weight:
    """A weight as the arena holds it: its storage key when compiled (memory,
    extent, dtype, shape, strides), the array, its bytes in the arena, and
    the dtype and shape it was compiled with."""

    key: tuple
    array: np.ndarray = attrs.field(eq=False)
    offset: int
    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]

    def check_unchanged(self, function: str, name: str) -> None:
        """Refuse an array reshaped, retyped or moved since the weight was
        compiled: its arena bytes are laid out for the old one."""
        if ("weight", *storage_key(self.array)) != self.key:
            raise ValueError(
                f"{function}: weight {name!r} was compiled as {self.shape} of "
                f"{dtype_name(self.dtype)}, but its array is now {self.array.shape} of "
                f"{dtype_name(self.array.dtype)} (reshaped, retyped or moved in place); a weight "
                "is uploaded in the shape, dtype and layout it was compiled with: restore them, "
                "or build a new graph function for the new array"
            )


@attrs.frozen
class State:
    """A state: its bytes in the arena and what they hold."""

    offset: int
    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]


class Residents:
    """The weights and states of one graph function, and the arena memory."""

    def __init__(self, name: str, arena: ArenaPlan, *, granule: int, poison: bool) -> None:
        self.name, self.arena, self.granule, self.poison = name, arena, granule, poison
        self.memory: Arena | None = None
        self.weights: dict[str, Weight] = {}
        self.states: dict[str, State] = {}
        self.uploaded_crc: dict[tuple, int] = {}  # poison mode: storage key -> CRC-32 at upload

    # ---- versions: keys in, records out, all or nothing ----

    def keys(self, g: Graph) -> dict[str, tuple]:
        """The storage key of every resident of recording `g`."""
        keys = {}
        for name, array in g.weights.items():
            key = ("weight", *storage_key(array))
            known = self.weights.get(name)
            if known is not None and known.key != key:
                raise ValueError(
                    f"{self.name}: weight {name!r} names another array than in an earlier version"
                )
            keys[name] = key
        for name, buffer in g.buffers.items():
            if buffer.role == "state":
                keys[name] = ("state", name)
        return keys

    def remember(self, g: Graph, layout: Layout) -> None:
        for name, array in g.weights.items():
            if name not in self.weights:
                offset, nbytes = layout.scratch[name]
                key = ("weight", *storage_key(array))
                self.weights[name] = Weight(key, array, offset, nbytes, array.dtype, array.shape)
        for name, buffer in g.buffers.items():
            if buffer.role == "state" and name not in self.states:
                offset, nbytes = layout.scratch[name]
                self.states[name] = State(offset, nbytes, buffer.dtype, tuple(buffer.shape))

    def ensure_memory(self, unified: bool) -> Arena:
        if self.memory is None:
            self.memory = Arena(
                self.arena, granule=self.granule, unified=unified, name=f"{self.name}.arena"
            )
        return self.memory

    def snapshot(self) -> tuple:
        regions = dict(self.memory.buffer.regions) if self.memory is not None else None
        return self.arena.state(), self.memory, regions, dict(self.weights), dict(self.states)

    def restore(self, saved: tuple) -> None:
        plan, memory, regions, weights, states = saved
        self.arena.restore(plan)
        self.memory, self.weights, self.states = memory, weights, states
        if memory is not None:
            memory.buffer.regions = regions

    # ---- weights ----

    def load(self, release, piece_bytes: int, copy, threads: int | None, in_place=None) -> int:
        """Upload every weight not uploaded yet, in pieces of at most
        `piece_bytes`, straight into the arena (no whole-array temporary),
        calling ``release(piece)`` after each piece. Returns the bytes
        uploaded or held in place. `copy(target, piece)` writes each piece
        into its arena bytes (default `np.copyto`); a checkpoint reader's
        may read the file instead of faulting in its mapping.

        `in_place(array)`: whether a weight's array may be read where it
        lies for as long as the function lives (a checkpoint's mapping
        does). On a unified arena such a weight, C-contiguous, is not
        copied: its arena bytes stand for the array's own
        (`DeviceBuffer.map_in_place`), so the file's pages are shared with
        the page cache instead of duplicated, and none is released.

        `threads` copies run at once (default `UPLOAD_THREADS`): first
        writes into fresh memory fault its pages in, and on a virtual
        machine that costs more than the copy, so pieces go to several
        threads (`copy` must release the GIL to gain: numpy's copy and
        `os.preadv` do). ``release`` is called from this thread, piece by
        piece in order, and a weight counts as uploaded only once all its
        pieces are: after an error the rest upload on the next call.

        Weights are uploaded once: a weight array changed in place after
        `load` is not seen by later calls until `reload_weights` (in poison
        mode a call refuses to run on it: `check_weights`); one held in
        place is read as it is at each call. A weight whose array was
        reshaped or retyped in place is refused before any copy."""
        copy = copy or np.copyto
        if self.memory is None:
            raise RuntimeError(
                f"{self.name}: nothing compiled yet; call compile() or the function first"
            )
        pending = {n: w for n, w in self.weights.items() if w.key not in self.memory.loaded}
        for name, weight in pending.items():
            weight.check_unchanged(f"{self.name}.load", name)
        buffer = self.memory.ensure()
        uploaded = 0
        work = []  # (name, weight, [(target piece, piece), ...]) per weight to upload
        for name, weight in pending.items():
            array = weight.array
            if (
                in_place is not None
                and buffer.unified
                and array.flags.c_contiguous
                and in_place(array)
            ):
                buffer.map_in_place(weight.offset, array)
                self._uploaded(name, weight)
                uploaded += weight.nbytes
                continue
            rows = array if array.ndim else array.reshape(1)
            target = view(buffer.host, weight.offset, weight.nbytes, array.dtype, rows.shape)
            step = max(1, piece_bytes // max(1, rows[:1].nbytes))
            pieces = [
                (target[start : start + step], rows[start : start + step])
                for start in range(0, len(rows), step)
            ]
            work.append((name, weight, pieces))
        with closing(_copied(copy, work, threads or UPLOAD_THREADS)) as copied:
            for (name, weight, _), piece, last in copied:
                if release is not None and piece is not None:
                    release(piece)
                if last:
                    self._uploaded(name, weight)
                    uploaded += weight.nbytes
        return uploaded

    def held_in_place(self) -> list[str]:
        """The weights whose arena bytes stand for their arrays' own."""
        mapped = self.memory.buffer.mapped if self.memory is not None else {}
        return [name for name, weight in self.weights.items() if weight.offset in mapped]

    def _uploaded(self, name: str, weight: Weight) -> None:
        self.memory.flush(name)
        self.memory.loaded.add(weight.key)
        if self.poison:
            self.uploaded_crc[weight.key] = _crc32(weight.array)

    def forget_uploads(self, names) -> None:
        """Mark weights (all when `names` is empty) to be uploaded again,
        once each is known to fit its arena bytes (else nothing changes)."""
        unknown = [n for n in names if n not in self.weights]
        if unknown:
            raise KeyError(
                f"{self.name} has no weight {', '.join(map(repr, unknown))} "
                f"(weights: {', '.join(self.weights) or 'none'})"
            )
        chosen = names or tuple(self.weights)
        for name in chosen:
            self.weights[name].check_unchanged(f"{self.name}.reload_weights", name)
        if self.memory is not None:
            for name in chosen:
                self.memory.loaded.discard(self.weights[name].key)
                self.memory.buffer.unmap(self.weights[name].offset)

    def all_loaded(self) -> bool:
        return len(self.memory.loaded) >= len(self.weights)

    def check_weights(self) -> None:
        """Poison mode: refuse to run on weights changed in place since their
        upload (the device would compute with the old ones), by each one's
        CRC-32 (a pass over the weights per call: a debugging aid)."""
        changed = [
            name
            for name, weight in self.weights.items()
            if weight.key in self.uploaded_crc
            and _crc32(weight.array) != self.uploaded_crc[weight.key]
        ]
        if changed:
            names = ", ".join(map(repr, changed))
            raise RuntimeError(
                f"{self.name}: weight(s) {names} changed in place after load(), so the device "
                f"holds the old values; call {self.name}.reload_weights({names}) to upload them"
            )

    # ---- states ----

    def _state(self, name: str) -> State:
        if name not in self.states:
            raise KeyError(
                f"{self.name} has no state {name!r} (states: {', '.join(self.states) or 'none'})"
            )
        return self.states[name]

    def read_state(self, name: str) -> np.ndarray:
        state = self._state(name)
        buffer = self.memory.ensure()
        buffer.sync_from_device(name)
        return view(buffer.host, state.offset, state.nbytes, state.dtype, state.shape).copy()

    def write_state(self, name: str, array) -> None:
        state = self._state(name)
        array = np.asarray(array)
        # no broadcasting and no casting: a state written from the wrong array
        # would silently hold something else than the caller meant
        if array.shape != state.shape or array.dtype != state.dtype:
            raise ValueError(
                f"{self.name}: state {name!r} is {state.shape} of {dtype_name(state.dtype)}, "
                f"got {array.shape} of {dtype_name(array.dtype)}"
            )
        buffer = self.memory.ensure()
        view(buffer.host, state.offset, state.nbytes, state.dtype, state.shape)[...] = array
        self.memory.flush(name)

    def reset_states(self) -> None:
        for name, state in self.states.items():
            self.write_state(name, np.zeros(state.shape, state.dtype))


def _crc32(array: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _copied(copy, work, threads):
    """Each piece of `work` (weights as (name, weight, [(target, piece)]))
    once `copy(target, piece)` is done, in order, as (weight, piece, whether
    it is the weight's last; a weight with no pieces comes once with None).
    The copies run on `threads` threads; closing this stops those not begun."""
    if threads == 1:
        for weight in work:
            yield from _in_order(weight, (copy(target, piece) for target, piece in weight[2]))
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="iron-upload")
    try:
        futures = [[pool.submit(copy, *pair) for pair in weight[2]] for weight in work]
        for weight, pending in zip(work, futures):
            yield from _in_order(weight, (future.result() for future in pending))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _in_order(weight, results):
    pieces = weight[2]
    if not pieces:
        yield weight, None, True
    for k, ((_, piece), _) in enumerate(zip(pieces, results)):
        yield weight, piece, k == len(pieces) - 1
