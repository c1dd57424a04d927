"""`iron design`: print an operator's placed design, its per-tile use of the
device against the limits, the check's verdict, or its MLIR (and draw it
as SVG); simulate an operator's design on random inputs against its
reference; check every registered operator's designs.

    iron design show AddOne size=4096 --device npu1 --svg add_one.svg
    iron design show AddOne size=4096 --mlir
    iron design example split_join workers=4 --device npu2
    iron design example add_one --lowered
    iron design simulate AddOne size=4096 --device npu1 --json
    iron design check --device npu1 --json
"""

from __future__ import annotations

import json
import sys

import attrs
import numpy as np

from iron.core.cli import make_operator, parse_params, table
from iron.core.device import Device
from iron.core.tolerance import compare
from iron.design.check import check
from iron.design.examples import EXAMPLES
from iron.design.lower import Await, Free, Lowered, SetLocks, Start, WriteRtp, lower
from iron.design.model import Design, element_type
from iron.design.operators import catalog_designs, design_of
from iron.design.pictures import design_svg
from iron.design.place import place
from iron.design.simulate import SimulationError, simulate
from iron.design.usage import MM2S, S2MM, usage


def configure(parser) -> None:
    actions = parser.add_subparsers(dest="design_action", required=True, metavar="action")

    show = actions.add_parser("show", help="an operator's placed design, its tiles and its check")
    show.add_argument("name", help="a registered operator (`iron ops list` shows them)")
    show.set_defaults(func=show_operator)
    example = actions.add_parser("example", help="one of iron.design.examples, placed and checked")
    example.add_argument("name", choices=sorted(EXAMPLES), help="the example")
    example.set_defaults(func=show_example)
    for sub in (show, example):
        sub.add_argument(
            "params", nargs="*", metavar="key=value", help="the operator's or example's parameters"
        )
        _device_arguments(sub)
        output = sub.add_mutually_exclusive_group()
        output.add_argument(
            "--mlir", action="store_true", help="print the MLIR aiecc takes instead"
        )
        output.add_argument(
            "--lowered",
            action="store_true",
            help="print the lowered form: the configuration and the runtime sequence",
        )
        output.add_argument("--json", action="store_true", help="print the design as JSON")
        _svg_argument(sub, "the placed array, fifos, per-tile use and violations")

    run = actions.add_parser(
        "simulate",
        help="simulate an operator's design on random inputs against its reference",
        description="Run a registered operator's design in iron-design's simulator on random "
        "inputs (as the families' tests draw them), judge each output against the operator's "
        "reference within its tolerance, and print the bytes each tensor moved; a design that "
        "cannot finish prints its blocked actors. Exits 1 unless every output passes.",
    )
    run.add_argument("name", help="a registered operator (`iron ops list` shows them)")
    run.add_argument("params", nargs="*", metavar="key=value", help="the operator's parameters")
    _device_arguments(run)
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    _svg_argument(run, "the design, with the fifos a deadlock blocks marked")
    run.set_defaults(func=simulate_operator)

    every = actions.add_parser("check", help="check every registered operator case with a design")
    _device_arguments(every)
    every.add_argument("--family", help="only this family")
    every.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    every.set_defaults(func=check_catalog)


def _device_arguments(parser) -> None:
    parser.add_argument("--device", default="npu2", help="device to design for (default: npu2)")
    parser.add_argument("--columns", type=int, help="device width (default: full)")


def _svg_argument(parser, what: str) -> None:
    parser.add_argument("--svg", metavar="FILE", help=f"also write a picture ({what}) as SVG")


def show_operator(args) -> int:
    device = Device.from_name(args.device, args.columns)
    params = parse_params(args.params, "iron design")
    op = make_operator(args.name, params, "iron design show").resolve(device)
    return _show(design_of(op), args)


def show_example(args) -> int:
    device = Device.from_name(args.device, args.columns)
    return _show(EXAMPLES[args.name](device, **parse_params(args.params, "iron design")), args)


def _show(design: Design, args) -> int:
    if args.mlir:
        from iron.design.mlir import to_mlir

        print(to_mlir(design), end="")
        return 0
    if args.lowered:
        print(lowered_text(lower(design)))
        return 0
    report = check(design)
    print(json.dumps(as_data(design), indent=1) if args.json else describe(design))
    _picture(design, args)
    return 0 if report.ok else 1


def _picture(design: Design, args, blocked=()) -> None:
    """Write the design's picture where `--svg` says (saying so on stderr)."""
    if args.svg:
        design_svg(design, args.svg, blocked=blocked)
        print(f"wrote the picture to {args.svg}", file=sys.stderr)


def simulate_operator(args) -> int:
    device = Device.from_name(args.device, args.columns)
    params = parse_params(args.params, "iron design simulate")
    op = make_operator(args.name, params, "iron design simulate").resolve(device)
    design = design_of(op)
    where = f"iron design simulate {args.name}: design {design.name}"
    specs = op.arg_specs()
    if [t.nbytes for t in design.tensors] != [s.nbytes for s in specs]:
        raise ValueError(
            f"{where}: its runtime tensors are not the operator's buffers, one per arg spec "
            "with its bytes"
        )
    values = _design_values(op, design, where)
    inputs = op.example_inputs(np.random.default_rng(args.seed))
    reads = iter(inputs)
    tensors = {
        t.name: _as(next(reads), element_type(t.dtype).numpy, t.shape)
        for t, spec in zip(design.tensors, specs)
        if spec.reads
    }
    outcome = {"operator": args.name, "params": op.to_data(), "device": device.key,
               "design": design.name, "seed": args.seed}  # fmt: skip
    try:
        run = simulate(design, tensors, values)
    except SimulationError as error:
        blocked = getattr(error, "blocked", ())
        outcome |= {"passed": False, "error": type(error).__name__, "message": str(error),
                    "blocked": [attrs.asdict(b) for b in blocked]}  # fmt: skip
        print(json.dumps(outcome, indent=1) if args.json else f"{type(error).__name__}: {error}")
        _picture(design, args, blocked)
        return 1
    tolerance = op.tolerance(device, inputs=inputs)
    written = [(t, s) for t, s in zip(design.tensors, specs) if s.writes]
    verdicts = [
        compare(_as(run[t.name], want.dtype, want.shape), want, tolerance, name=s.name)
        for (t, s), want in zip(written, op.call_reference(*inputs))
    ]
    traffic = run.traffic
    outcome |= {
        "passed": all(verdicts),
        "outputs": [{"output": s.name, "passed": v.passed, "mismatches": v.n_mismatch,
                     "elements": v.n_checked, "max_abs": v.max_abs, "max_rel": v.max_rel,
                     "detail": v.detail} for (_, s), v in zip(written, verdicts)],
        "traffic": {"tensors": {n: attrs.asdict(b) for n, b in traffic.tensors.items()},
                    "ddr": attrs.asdict(traffic.ddr)},
    }  # fmt: skip
    if args.json:
        print(json.dumps(outcome, indent=1))
    else:
        print(
            f"design {design.name} on {device.key}, simulated on random inputs (seed "
            f"{args.seed}) against {type(op).__name__}'s reference, tolerance {tolerance}:"
        )
        for verdict in verdicts:
            print(f"  {'PASS' if verdict.passed else 'FAIL'} {verdict.detail}")
        rows = [[n, f"{b.read:,}", f"{b.written:,}"] for n, b in traffic.tensors.items()]
        rows.append(["DDR", f"{traffic.ddr.read:,}", f"{traffic.ddr.written:,}"])
        print()
        print(table(rows, ["tensor", "bytes read", "bytes written"]))
    _picture(design, args)
    return 0 if outcome["passed"] else 1


def _design_values(op, design: Design, where: str) -> dict[str, int]:
    """Each runtime parameter of the design: the operator's per-call member
    or integer field of that name (as a compiled graph binds a step's)."""
    values = {}
    for name in design.params:
        value = getattr(op, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if name in op.per_call_members():
                raise ValueError(f"{where} reads {name} per call: give it ({name}=INT)")
            raise ValueError(
                f"{where}: parameter {name} is neither a per-call member nor an integer field "
                f"of {type(op).__name__}"
            )
        values[name] = int(value)
    return values


def _as(array: np.ndarray, dtype, shape) -> np.ndarray:
    """`array`'s bytes as `dtype` in `shape` (an operator's buffer as its
    design's tensor sees it, and back)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).view(dtype).reshape(shape)


def as_data(design: Design) -> dict:
    """What `describe` prints, as JSON data."""
    design = place(design)
    device, report = design.device, check(design)
    tiles = []
    for tile, used in usage(design).items():
        limits = device.limits(used.kind)
        tiles.append(
            {"tile": str(tile), "kind": used.kind, "memory_bytes": used.memory_bytes,
             "memory_limit": limits.memory_bytes, "locks": used.lock_count,
             "lock_limit": limits.locks, "bds": used.bds, "bd_limit": limits.bds,
             "s2mm": len(used.channels_in(S2MM)), "mm2s": len(used.channels_in(MM2S)),
             "channel_limit": limits.dma_channels}
        )  # fmt: skip
    return {
        "design": design.name, "device": device.key, "digest": design.digest(),
        "configuration": lower(design).configuration.digest(),
        "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype),
                     "direction": t.direction.value} for t in design.tensors],
        "workers": [{"name": w.name, "tile": str(w.tile), "kernels": _kernels(w).split(", ")}
                    for w in design.workers],
        "fifos": [{"name": f.name, "shape": list(f.shape), "dtype": str(f.dtype),
                   "depth": f.depth, "bytes": f.nbytes, "producer": _end(design, f.producer),
                   "consumers": [_end(design, e) for e in f.consumers]} for f in design.fifos],
        "tiles": tiles,
        "ok": report.ok, "violations": [str(v) for v in report.violations],
    }  # fmt: skip


def describe(design: Design) -> str:
    """The placed design as text: what runs where, the fifos, what each tile
    uses against its limits, and the check's verdict."""
    design = place(design)
    device = design.device
    lines = [
        f"design {design.name} for {device.name} ({device.columns} columns, {device.arch}), "
        f"digest {design.digest()[:12]}, configuration {lower(design).configuration.digest()[:12]}",
        "tensors: "
        + ", ".join(f"{t.name} {t.shape} {t.dtype} {t.direction.value}" for t in design.tensors),
        "",
    ]
    actors = [[str(w.tile), "worker", w.name, _kernels(w)] for w in design.workers]
    actors += [[str(k.tile), k.kind, k.name, ", ".join(k.fifos)] for k in design.links]
    lines += [table(sorted(actors), ["tile", "actor", "name", "runs / links"]), ""]

    rows = []
    for fifo in design.fifos:
        ends = [_end(design, e) for e in fifo.consumers]
        rows.append(
            [fifo.name, f"{fifo.shape} {fifo.dtype}", str(fifo.depth), str(fifo.nbytes),
             _end(design, fifo.producer), ", ".join(ends)]
        )  # fmt: skip
    lines += [table(rows, ["fifo", "object", "depth", "bytes", "producer", "consumers"]), ""]

    rows = []
    for tile, used in usage(design).items():
        limits = device.limits(used.kind)
        memory = f"{used.memory_bytes}/{limits.memory_bytes} B" if limits.memory_bytes else "-"
        rows.append(
            [str(tile), used.kind, memory, f"{used.lock_count}/{limits.locks}",
             f"{used.bds}/{limits.bds}", f"{len(used.channels_in(S2MM))}/{limits.dma_channels}",
             f"{len(used.channels_in(MM2S))}/{limits.dma_channels}", used.memory_text()]
        )  # fmt: skip
    header = ["tile", "kind", "memory", "locks", "BDs", "S2MM", "MM2S", "memory holds"]
    lines += [table(rows, header), "", str(check(design))]
    return "\n".join(lines)


def _kernels(worker) -> str:
    return ", ".join(dict.fromkeys(call.kernel.symbol for call in worker.calls()))


def _end(design: Design, endpoint) -> str:
    if endpoint.kind == "shim":
        return f"runtime {endpoint.tile}"
    tile = (design.worker if endpoint.kind == "core" else design.link)(endpoint.name).tile
    return f"{endpoint.name} {tile}"


def check_catalog(args) -> int:
    device = Device.from_name(args.device, args.columns)
    rows, failed, found = [], 0, []
    for item in catalog_designs(device, args.family):
        if item.design is None:
            rows.append([item.operator, item.case, "refused", item.refusal])
            found.append({"operator": item.operator, "case": item.case, "refused": item.refusal})
            continue
        report = check(item.design)
        failed += not report.ok
        first = "" if report.ok else str(report.violations[0])
        verdict = "ok" if report.ok else f"{len(report.violations)} violation(s)"
        rows.append([item.operator, item.case, verdict, first])
        found.append({"operator": item.operator, "case": item.case, "ok": report.ok,
                      "violations": [str(v) for v in report.violations]})  # fmt: skip
    if args.json:
        print(json.dumps({"device": device.key, "failed": failed, "cases": found}, indent=1))
        return 1 if failed else 0
    if not rows:
        print(
            f"no registered operator has a design{f' in family {args.family!r}' if args.family else ''}"
        )
        return 0
    print(table(rows, ["operator", "case", device.key, "first violation"]))
    if failed:
        print(f"{failed} design(s) break {device.name}'s limits", file=sys.stderr)
    return 1 if failed else 0


def lowered_text(lowered: Lowered) -> str:
    """The lowered form as tables: the configuration (pools, locks, channels
    and their BD chains, core programs) and the runtime sequence."""
    config, runtime = lowered.configuration, lowered.runtime
    lines = [f"configuration {config.digest()[:12]}", ""]
    rows = []
    for pool in config.pools:
        locks = [
            f"{config.locks[i].role} {config.locks[i].init}"
            for lane in pool.lanes
            for i in (lane.producer, lane.consumer)
            if i is not None
        ] or [f"2 per slot, {config.locks[pool.slot_locks[0][0]].init}"]
        lanes = ", ".join(
            f"{lane.fifo} [{lane.offset}:{lane.offset + lane.length}]" for lane in pool.lanes
        )
        rows.append([pool.name, pool.kind, str(pool.tile), f"{pool.depth} x {pool.nbytes} B",
                     ", ".join(dict.fromkeys(locks)), lanes])  # fmt: skip
    lines += [table(rows, ["pool", "kind", "tile", "slots", "locks (initial value)", "lanes"]), ""]
    by_tile: dict = {}
    for lock in config.locks:
        owners = by_tile.setdefault(lock.tile, {})
        owners[lock.owner] = owners.get(lock.owner, 0) + 1
    rows = [
        [str(tile), str(sum(owners.values())), ", ".join(f"{o} {n}" for o, n in owners.items())]
        for tile, owners in sorted(by_tile.items())
    ]
    lines += [table(rows, ["tile", "locks", "by owner"]), ""]
    rows = []
    for channel in sorted(config.channels, key=lambda c: (c.tile, c.direction, c.index)):
        if channel.driver == "static":
            chain = " ".join(
                f"{bd.slot}{'.' + str(bd.lane) if len(config.pools[channel.pool].lanes) > 1 else ''}"
                for bd in channel.chain
            )
            driven = f"slots {chain}" + (
                f", {channel.iterations} times" if channel.iterations else ""
            )
        else:
            driven = (
                "the runtime's tasks" if channel.driver == "runtime" else "the runtime's pushes"
            )
        rows.append([channel.label, channel.fifo, channel.end, driven])
    lines += [table(rows, ["channel", "fifo", "end", "BD chain"]), ""]
    rows = [
        [core.worker, str(core.tile), f"{core.stack} B", _rtp_wait(config, core) + _ops_text(core.body)]
        for core in config.cores
    ]  # fmt: skip
    if rows:
        lines += [table(rows, ["core", "tile", "stack", "program (held before each op)"]), ""]
    lines += ["runtime sequence", ""]
    rows = []
    for op in runtime.ops:
        if isinstance(op, Start):
            task = runtime.task(op.task)
            channel = config.channels[task.channel]
            ids = getattr(task, "bd_ids", None) or (task.bd_id,)
            rows.append(
                ["start", task.subject, channel.label, ", ".join(map(str, ids)), str(task.queued)]
            )
        elif isinstance(op, Await):
            why = "room in the queue" if op.group is None else f"finish of group {op.group}"
            rows.append(["await", runtime.task(op.task).subject, why, "", ""])
        elif isinstance(op, Free):
            rows.append(["free", runtime.task(op.task).subject, "", "", ""])
        elif isinstance(op, SetLocks):
            owners = ", ".join(str(config.locks[i]) for i in op.locks)
            rows.append(["set lock", f"{owners} to {op.value}", "", "", ""])
        elif isinstance(op, WriteRtp):
            into = f"{op.param} into word {op.index} of {config.rtps[op.buffer].symbol}"
            rows.append(["rtp write", into, "", "", ""])
    lines.append(table(rows, ["op", "task", "channel / why", "BD ids", "queued"]))
    return "\n".join(lines)


def _rtp_wait(config, core) -> str:
    """How a core waits for its runtime-parameter words, as text."""
    if core.rtp is None:
        return ""
    rtp = config.rtps[core.rtp]
    return (
        f"each iteration: wait for {rtp.symbol}; "
        if rtp.each_iteration
        else f"wait for {rtp.symbol}; "
    )


def _ops_text(body) -> str:
    words = []
    for lowered in body:
        op, (held) = lowered.op, lowered.held
        name = type(op).__name__
        if name in ("Acquire", "Release"):
            lo, hi = held.of(op.fifo)
            count = f"{lo}" if lo == hi else f"{lo}..{hi}"
            words.append(f"{name.lower()} {op.fifo} {op.n} (holds {count})")
        elif name == "Call":
            words.append(f"call {op.kernel.symbol}")
        elif name == "Loop":
            words.append(f"loop {op.count} [{_ops_text(lowered.body)}]")
        else:
            words.append(f"{name} {op.barrier} {op.value}")
    return "; ".join(words)
