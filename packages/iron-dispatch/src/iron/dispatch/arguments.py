"""What a graph function is given, checked before any work: its
definition, its options, its input specs, a call's arguments, `load`'s
arguments. Each refusal names the function, the parameter and the rule."""

from __future__ import annotations

import inspect

import numpy as np

from iron.core import Device, as_dtype
from iron.dispatch.packaging import DISPATCHES, IMAGES


def check_options(name: str, mode, flags, poison, session, image=None) -> None:
    from iron.dispatch.session import Session

    if mode not in DISPATCHES:
        raise ValueError(f"graph {name}: mode={mode!r}: one of {', '.join(DISPATCHES)}")
    if image not in (None, *IMAGES):
        raise ValueError(f"graph {name}: image={image!r}: None, 'elf' or 'xclbin'")
    if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
        raise TypeError(f"graph {name}: flags must be a sequence of strings, got {flags!r}")
    if poison is not None and not isinstance(poison, bool):
        raise TypeError(f"graph {name}: poison must be True, False or None, got {poison!r}")
    if session is not None and not isinstance(session, Session):
        raise TypeError(f"graph {name}: session must be a Session or None, got {session!r}")


def check_call(name: str, input_names, value_names, arrays, values) -> None:
    if len(arrays) != len(input_names):
        raise TypeError(
            f"{name} takes {len(input_names)} input(s) ({', '.join(input_names)}), got {len(arrays)}"
        )
    if set(values) != set(value_names):
        missing, extra = set(value_names) - set(values), set(values) - set(value_names)
        raise TypeError(
            f"{name}: per-call values missing {sorted(missing)} / unexpected {sorted(extra)}"
        )
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}: per-call value {key} must be an int, got {value!r}")


def device_of(device, default: str, name: str) -> Device:
    if device is None:
        try:
            return Device.from_name(default)
        except ValueError as error:
            raise ValueError(f"IRON_DEVICE={default!r}: {error}") from error
    if isinstance(device, str):
        return Device.from_name(device)
    if not isinstance(device, Device):
        raise TypeError(
            f"graph {name}: device must be a Device or a device name, got {type(device).__name__}"
        )
    return device


def check_load(name: str, release, piece_bytes, copy, threads, in_place=None) -> None:
    if isinstance(piece_bytes, bool) or not isinstance(piece_bytes, (int, np.integer)):
        raise TypeError(f"{name}.load: piece_bytes must be an int, got {piece_bytes!r}")
    if piece_bytes < 1:
        raise ValueError(f"{name}.load: piece_bytes must be >= 1, got {piece_bytes}")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
    ):
        raise TypeError(f"{name}.load: threads must be an int or None, got {threads!r}")
    if threads is not None and threads < 1:
        raise ValueError(f"{name}.load: threads must be >= 1, got {threads}")
    for label, fn in (("release", release), ("copy", copy), ("in_place", in_place)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name}.load: {label} must be callable or None")


def parameters(fn, name: str) -> tuple[list[str], list[str]]:
    parameters = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        raise TypeError(f"graph function {name} must take the builder `g` as its first parameter")
    inputs, values = [], []
    for p in parameters[1:]:
        if p.kind in positional:
            inputs.append(p.name)
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            values.append(p.name)
        else:
            raise TypeError(f"graph function {name}: *args and **kwargs are not supported ({p})")
    return inputs, values


def shape_dtype(spec, where: str) -> tuple[tuple[int, ...], np.dtype]:
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return tuple(spec.shape), as_dtype(spec.dtype)
    rule = "a (shape, dtype) pair or anything with .shape and .dtype"
    if not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise TypeError(f"{where}: {rule}, got {spec!r}")
    shape, dtype = spec
    shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise TypeError(f"{where}: a shape of non-negative ints, got {spec[0]!r}")
    try:
        return tuple(int(d) for d in shape), as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{where}: {error}") from None
