"""What a graph function's run looks like, as files to open elsewhere.

- `plan_svg(f, path)`: its shared arena over every version, time across
  (the versions' steps end to end) and bytes up, weights, states and
  transients coloured (`iron.alloc.render_svg` draws it);
- `chrome_trace(version)`: a traced version's last call on the simulated
  device as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
  chrome://tracing open: one track per step, each event with the device
  block's full name, its operator's parameters, the buffers it read and
  wrote and the bytes it moved.
"""

from __future__ import annotations

import json
from pathlib import Path

from iron.alloc import LiveRange, Plan, render_svg, touch_ranges
from iron.dispatch.sim_xrt import read_trace

#: the kinds of arena bytes a plan picture tells apart, in legend order
KINDS = ("weights", "states", "transients")


def plan_svg(fn, path: str | Path | None = None, **options) -> str:
    """The SVG picture of graph function `fn`'s arena (returned, and written
    to `path` if given): every compiled version's steps end to end, each
    version's start marked with its input shapes; weights and states span
    the whole run at the one offset they keep, transients span their steps.
    `options` go to `iron.alloc.render_svg` (title, labels, width, height)."""
    if not fn.versions:
        raise ValueError(f"{fn.name}.plan_svg: nothing compiled yet; call or compile it first")
    residents = {n: (w.offset, w.nbytes) for n, w in fn.residents.weights.items()}
    kinds = dict.fromkeys(residents, KINDS[0])
    for name, state in fn.residents.states.items():
        residents[name] = (state.offset, state.nbytes)
        kinds[name] = KINDS[1]
    offsets, sizes, ranges, marks, start = {}, {}, {}, [], 0
    for version in fn.versions.values():
        scratch = version.layout.scratch
        steps = [
            ([n for n in reads if n in scratch], [n for n in writes if n in scratch])
            for reads, writes in version.runlist.accesses()
        ]
        shapes = ", ".join(f"{name} {tuple(shape)}" for name, shape, _ in version.signature)
        marks.append((start, shapes))
        transients = [n for n in scratch if n not in residents]
        for name, live in touch_ranges(steps, transients).items():
            key = f"{shapes}: {name}"
            offsets[key], sizes[key] = scratch[name][0], scratch[name][1]
            ranges[key] = LiveRange(start + live.begin, start + live.end)
            kinds[key] = KINDS[2]
        start += len(steps)
    for name, (offset, nbytes) in residents.items():
        offsets[name], sizes[name], ranges[name] = offset, nbytes, LiveRange(0, start - 1)
    plan = Plan(offsets, fn.arena.size, alignment=fn.arena.alignment, strategy="arena")
    title = options.pop(
        "title",
        f"{fn.name}: one arena for {len(fn.versions)} version(s), backend {fn.backend.name}",
    )
    return render_svg(plan, ranges, sizes, path, kinds=kinds, marks=marks, title=title, **options)


def chrome_trace(version) -> dict:
    """The trace of `version`'s last call as Chrome trace-event JSON (a
    dict: `json.dump` it). Simulated ticks count 32-bit words moved to or
    from DDR, not time: an event's length is its step's traffic. Needs a
    fused version of a graph traced on the simulated device
    (`graph(..., backend="sim", trace_size=32 * steps)`)."""
    image = version.image
    if image.trace_size == 0 or len(image.programs) != 1:
        raise ValueError(
            f"{image.name}: chrome_trace reads a fused, traced version (graph(trace_size=...), "
            f"mode 'fused'); this one is {image.mode} with trace_size {image.trace_size}"
        )
    (program,) = image.programs
    records = read_trace(version.trace)
    process = 1
    events = [
        {"ph": "M", "name": "process_name", "pid": process,
         "args": {"name": f"{image.name} on the simulated {image.device} (ticks: words moved)"}},
    ]  # fmt: skip
    for record, step in zip(records, program.steps):
        block = step.device or f"host:{step.operator}"
        if record["name"] != block.encode()[:20].decode(errors="ignore"):
            raise ValueError(
                f"{image.name}: trace record {step.index} names {record['name']!r}, not step "
                f"{step.index}'s {block!r}: the trace is not this version's"
            )
        placed = image.steps[step.index]
        names = [str(n) for n in placed.names]
        track = f"step {step.index}: {step.operator}"
        events += [
            {"ph": "M", "name": "thread_name", "pid": process, "tid": step.index,
             "args": {"name": track}},
            {"ph": "M", "name": "thread_sort_index", "pid": process, "tid": step.index,
             "args": {"sort_index": step.index}},
            {"ph": "X", "name": block, "cat": "design" if step.device else "host",
             "pid": process, "tid": step.index, "ts": record["start"],
             "dur": record["end"] - record["start"],
             "args": {"operator": step.operator, "parameters": placed.op.to_data(),
                      "reads": [names[i] for i in step.reads],
                      "writes": [names[i] for i in step.writes],
                      "bytes moved": record["bytes"]}},
        ]  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(version, path: str | Path) -> Path:
    """`chrome_trace(version)` written to `path` as JSON."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(version), indent=1), encoding="utf-8")
    return path
