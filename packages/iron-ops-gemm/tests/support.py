"""What the tests share: a tiny host interpreter for captured graphs, and the
check that a bf16 result is its exact value rounded once."""

from __future__ import annotations

import numpy as np

from iron.core import Graph, View, dtype_name


def run_graph(g: Graph, inputs: dict, scalars: dict | None = None, state: dict | None = None):
    """Evaluate `g` on the host once: every step's `call_reference` in order
    over a dict of arrays, with per-call members from the graph's bindings
    evaluated at `scalars`. Weights come from the graph; states from `state`
    (zeroed on first use, updated in place so a later call sees them).
    Returns every buffer by name."""
    state = {} if state is None else state
    for name, buffer in g.buffers.items():
        if buffer.role == "state":
            state.setdefault(name, np.zeros(buffer.shape, buffer.dtype))
    arrays = {**g.weights, **state, **inputs}
    for step in g.steps:
        assert not any(isinstance(a, View) for a in step.args), "views are not interpreted here"
        reads = [arrays[n].reshape(s.shape) for n, s in zip(step.args, step.specs) if s.reads]
        members = {m: e.evaluate(scalars or {}) for m, e in step.bindings.items()}
        written = step.op.call_reference(*reads, **members)
        targets = [n for n, s in zip(step.args, step.specs) if s.writes]
        for name, array in zip(targets, written):
            buffer = g.buffers[name]
            assert dtype_name(array.dtype) == dtype_name(buffer.dtype), (name, array.dtype)
            arrays[name] = array.reshape(buffer.shape)
            if name in state:
                state[name] = arrays[name]
    return arrays


def unfaithful_fraction(actual: np.ndarray, exact: np.ndarray) -> float:
    """The fraction of bf16 elements of `actual` that are not one of the two
    bf16 values around `exact` (float64): what one rounding of a float32
    computation gives, except where float32 error crosses a rounding
    boundary of a result that cancelled to near zero."""
    got, exact = actual.astype(np.float64), np.asarray(exact, np.float64)
    with np.errstate(divide="ignore"):
        ulp = 2.0 ** (np.floor(np.log2(np.abs(exact))) - 7)  # bf16 keeps 8 significant bits
    faithful = (got == exact) | (np.abs(got - exact) < ulp)
    return float(np.mean(~faithful))


def random_inputs(op, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal bf16 (or uniform int8) arrays for `op`'s inputs, in
    spec order."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in op.arg_specs():
        if not spec.reads:
            continue
        if np.dtype(spec.dtype) == np.int8:
            arrays.append(rng.integers(-128, 128, spec.shape, dtype=np.int8))
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
    return arrays


def simulated(op, inputs, params=None, design=None) -> np.ndarray:
    """`op`'s output as its design computes it on the simulator."""
    from iron.design import design_of, simulate

    design = design if design is not None else design_of(op)
    specs = op.arg_specs()
    names = [s.name for s in specs if s.reads]
    (out,) = [s.name for s in specs if s.writes]
    return simulate(design, dict(zip(names, inputs)), params)[out]
