"""Kernel models that take a stack of calls at once.

A replay (`iron.design.Simulator`) holds runs of calls of one kernel, each
on objects the moves between them fill; a model with a batch form is handed
them together, which turns a numpy call per kernel call into one per run.
The form splits a model in two:

- `compute(*args, **keywords)` gets, at each argument position, the stack of
  every call's contents where the model reads an object (`reads`: an array
  of shape (calls, elements), each row that call's object as it was when the
  call ran, flat), an int64 array of the calls' values where it takes a
  scalar, and None where it only writes; it returns one result per call,
  indexable by call (an array stacked on its first axis, say);
- `write(result, *args, **keywords)` puts one call's result where that
  call writes (`writes`), on the call's own arguments (views of its objects,
  ints for scalars), as the model would have.

`compute` then `write` for each call in turn must give, bit for bit, what
calling the model on each call in turn gives: the same arithmetic in the
same order per element, vectorised over the stack (`check_batch` compares
the two). A model may read only its `reads` and write only its `writes`;
a position in both is read (as it was when the call ran) and written. The
replay proves the rest: a call joins a batch only when what it reads was not
written by a call still waiting to be written, and everything after a call
that touches what it writes waits for its write.

`batched(model, ...)` attaches the form to a model function; a
`functools.partial` of that function (how designs bind a kernel's sizes)
passes its keywords to both parts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import attrs
import numpy as np


@attrs.frozen
class Batch:
    """A kernel model's batch form: the argument positions it reads and
    writes, and its two parts (the module's docstring)."""

    reads: tuple[int, ...]
    writes: tuple[int, ...]
    compute: Callable
    write: Callable
    #: `whole(*args)`: whether `write` sets every element of the one object
    #: it writes to the call's result, flat and in order (a replay may then
    #: put a result straight where a move takes that object whole)
    whole: Callable | None = None


def batched(
    model: Callable, *, reads, writes, compute: Callable, write: Callable, whole=None
) -> Callable:
    """Give `model` (a module-level function) its batch form; returns it."""
    if whole is not None and len(tuple(writes)) != 1:
        raise ValueError(f"kernel model {model!r}: `whole` is for a model that writes one object")
    model.batch = Batch(tuple(reads), tuple(writes), compute, write, whole)
    return model


def batch_of(model: Callable) -> tuple[Batch, dict] | None:
    """(the batch form, the keywords its parts take) of a kernel model, or
    None when it has none."""
    keywords: dict = {}
    if isinstance(model, functools.partial):
        if model.args:
            return None
        model, keywords = model.func, dict(model.keywords)
    batch = getattr(model, "batch", None)
    return (batch, keywords) if isinstance(batch, Batch) else None


def stacked(batch: Batch, calls: Sequence[Sequence]) -> list:
    """`compute`'s arguments for `calls` (each a model's argument tuple):
    each read object's rows, each scalar's values, None for the rest."""
    first = calls[0]
    out: list = []
    for position, arg in enumerate(first):
        if position in batch.reads:
            out.append(np.stack([np.asarray(call[position]).reshape(-1) for call in calls]))
        elif isinstance(arg, np.ndarray):
            out.append(None)
        else:
            out.append(np.array([int(call[position]) for call in calls], np.int64))
    return out


def run_batch(model: Callable, calls: Sequence[Sequence]) -> None:
    """Run `calls` (argument tuples of `model`, in order) through the model's
    batch form: every read captured first, computed at once, then each call's
    result written in turn."""
    found = batch_of(model)
    if found is None:
        raise ValueError(f"kernel model {model!r} has no batch form")
    batch, keywords = found
    results = batch.compute(*stacked(batch, calls), **keywords)
    for i, call in enumerate(calls):
        batch.write(results[i], *call, **keywords)


def check_batch(model: Callable, calls: Sequence[Sequence]) -> None:
    """Assert that `model`'s batch form gives bit for bit what the model gives
    call by call, on copies of `calls` (argument tuples, in order); raises
    AssertionError naming the first position that differs."""

    def copies():
        return [tuple(a.copy() if isinstance(a, np.ndarray) else a for a in call) for call in calls]

    found = batch_of(model)
    if found is None:
        raise ValueError(f"kernel model {model!r} has no batch form")
    batch, keywords = found
    one_by_one, together = copies(), copies()
    for call in one_by_one:
        model(*call)
    results = batch.compute(*stacked(batch, together), **keywords)
    for i, call in enumerate(together):
        batch.write(results[i], *call, **keywords)
    for i, (want, got) in enumerate(zip(one_by_one, together)):
        for position, (a, b) in enumerate(zip(want, got)):
            if isinstance(a, np.ndarray):
                _same_bytes(a, b, f"{model!r}: call {i}, argument {position}: the batch form")
        if batch.whole is not None and batch.whole(*want, **keywords):
            (position,) = batch.writes
            result = np.asarray(results[i]).astype(want[position].dtype)
            _same_bytes(want[position], result, f"{model!r}: call {i}: its result, said whole,")


def _same_bytes(want: np.ndarray, got: np.ndarray, what: str) -> None:
    a, b = want.reshape(-1).view(np.uint8), got.reshape(-1).view(np.uint8)
    if a.size != b.size:
        raise AssertionError(f"{what} has {b.size} bytes, the model's {a.size}")
    differs = a != b
    if differs.any():
        raise AssertionError(
            f"{what} differs from the model at byte {int(np.argmax(differs))} of {want.nbytes}"
        )
