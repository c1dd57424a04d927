"""The `iron` command: the catalog, devices, plugins, spec snapshots and a
health check of the NPU stack. Plugins add subcommands (`iron cache ...`)."""

from __future__ import annotations

import argparse
import ast
import json
import platform
import sys
from importlib.metadata import distributions

import attrs

from iron.core import environment, registry, settings, snapshot
from iron.core.device import Device
from iron.core.operator import BindError, Composite, OperatorError
from iron.core.spec import dtype_name
from iron.core.terminal import printable, stdout_closed


def parse_value(text: str):
    """`k=v` values: true/false/none, Python literals (ints, floats, lists,
    tuples), anything else as a string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def parse_params(items: list[str], command: str) -> dict:
    """``["size=64", "weighted=true"]`` -> ``{"size": 64, "weighted": True}``;
    an item without ``=`` raises `ValueError` naming `command`."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{command}: parameters are key=value, got {item!r}")
        params[key] = parse_value(value)
    return params


def table(rows: list[list[str]], header: list[str]) -> str:
    """Left-aligned columns under `header`, two spaces apart; cells are made
    printable (plugin names and errors come from outside)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


# ---- commands -------------------------------------------------------------------


def ops_list(args) -> int:
    entries = registry.operators(args.family)
    if args.json:
        print(
            json.dumps(
                [
                    {"name": e.name, "family": e.family, "summary": e.summary, "target": e.target}
                    for e in entries
                ],
                indent=1,
            )
        )
        return 0
    if not entries:
        print(f"no operators registered{f' in family {args.family!r}' if args.family else ''}")
        return 0
    print(
        table([[e.name, e.family, e.summary] for e in entries], ["operator", "family", "summary"])
    )
    return 0


def ops_show(args) -> int:
    params = parse_params(args.params, "iron ops show")
    entry = registry.operator_entry(args.name)
    cls = registry.get_operator(args.name)
    device = Device.from_name(args.device, args.columns)
    op = cls(**params).resolve(device)
    described = snapshot.describe(op)
    if args.json:
        print(json.dumps({"operator": entry.name, "device": device.key, **described}, indent=1))
        return 0
    print(printable(f"{entry.name}  ({entry.target}, family {entry.family})"))
    if entry.summary:
        print(printable(f"  {entry.summary}"))
    print(f"device {device.name}: {device.columns} columns, {device.arch}")
    print("parameters:")
    for name, value in described["params"].items():
        print(printable(f"  {name} = {value}"))
    per_call = op.per_call_members()
    if per_call:
        print("per-call: " + ", ".join(f"{n} ({dtype_name(d)})" for n, d in per_call.items()))
    if isinstance(op, Composite):
        print("inputs:")
        rows = [[d, n, str(tuple(s)), t] for n, s, t, d in described["inputs"]]
        print(_indent(table(rows, ["dir", "arg", "shape", "dtype"])))
        print("parts:")
        for part, args_ in described["parts"]:
            print(f"  {part}: " + ", ".join(f"{n} {tuple(s)}" for n, s, *_ in args_))
        return 0
    print("arg specs:")
    rows = [[d, n, str(tuple(s)), t] for n, s, t, d in described["args"]]
    print(_indent(table(rows, ["dir", "arg", "shape", "dtype"])))
    try:
        print(f"tolerance: {op.tolerance(device)}")
    except NotImplementedError:
        print("tolerance: not defined")
    return 0


def devices_cmd(args) -> int:
    found = registry.devices()
    if args.json:
        print(json.dumps({n: d.describe() for n, d in sorted(found.items())}, indent=1))
        return 0
    rows = [
        [
            d.name,
            d.arch,
            str(d.max_columns),
            str(d.shim_dma_limit),
            f"{d.memtile_bytes // 1024} KiB",
            f"{d.core_bytes // 1024} KiB",
            d.products,
        ]
        for d in sorted(found.values(), key=lambda d: d.name)
    ]
    print(table(rows, ["device", "arch", "columns", "shim DMA", "memtile", "core", "products"]))
    return 0


def plugins_cmd(args) -> int:
    infos = registry.plugins()
    if args.json:
        print(json.dumps([attrs.asdict(i) for i in infos], indent=1))
        return 0
    rows = [[i.name, f"{i.distribution} {i.version}", i.status, i.error or ""] for i in infos]
    print(table(rows, ["plugin", "distribution", "status", "error"]))
    return 0


def doctor_cmd(args) -> int:
    problems = 0
    print(f"Python {platform.python_version()} ({sys.executable}) on {platform.platform()}")
    print("settings:")
    rows = [list(row) for row in settings.current().rows()]
    print(_indent(table(rows, ["variable", "value", "from"])))
    print("packages:")
    iron_dists = sorted(
        {
            d.metadata["Name"]: d.version
            for d in distributions()
            if d.metadata["Name"].startswith(registry.DISTRIBUTION_PREFIX)
        }.items()
    )
    for name, version in iron_dists:
        print(f"  {name} {version}")
    print("plugins:")
    for info in registry.plugins():
        problems += info.status == "failed"
        print(
            printable(
                f"  {info.name} ({info.distribution} {info.version}): {info.status}"
                + (f": {info.error}" if info.error else "")
            )
        )
    print("NPU stack:")
    for probe in (environment.mlir_aie(), environment.pyxrt(), environment.npu_device()):
        print(f"  [{'x' if probe.present else ' '}] {probe}")
    findings = registry.doctor()
    if findings:
        print("plugins report:")
        for label, value, ok in findings:
            problems += not ok
            print(printable(f"  {'' if ok else 'PROBLEM '}{label}: {value}"))
    return 1 if problems else 0


def spec_snapshot(args) -> int:
    data = snapshot.write(args.file, args.family)
    cases = sum(len(c) for c in data["operators"].values())
    print(
        f"wrote {args.file}: {len(data['operators'])} operators, {cases} cases x {len(data['devices'])} devices"
    )
    return 0


def spec_diff(args) -> int:
    changes = snapshot.check_file(args.file)
    for line in changes:
        print(printable(line))
    if changes:
        print(f"{len(changes)} change(s) against {printable(args.file)}", file=sys.stderr)
        return 1
    print(f"no change against {printable(args.file)}")
    return 0


# ---- parser ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iron", description="IRON: operators and graphs for AMD Ryzen AI NPUs"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    ops = commands.add_parser("ops", help="list and show operators").add_subparsers(
        dest="ops", required=True, metavar="action"
    )
    listing = ops.add_parser("list", help="the registered operators")
    listing.add_argument("--family", help="only this family (e.g. eltwise)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=ops_list)
    show = ops.add_parser("show", help="an operator's resolved parameters and arg specs")
    show.add_argument("name")
    show.add_argument("params", nargs="*", metavar="key=value")
    show.add_argument("--device", default="npu2", help="device to resolve for (default npu2)")
    show.add_argument("--columns", type=int, help="device width (default: full)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=ops_show)

    devices = commands.add_parser("devices", help="the NPU descriptions")
    devices.add_argument("--json", action="store_true")
    devices.set_defaults(func=devices_cmd)

    plugins = commands.add_parser("plugins", help="installed plugins and their load status")
    plugins.add_argument("--json", action="store_true")
    plugins.set_defaults(func=plugins_cmd)

    commands.add_parser(
        "doctor", help="settings, packages, plugins and what this host has of the NPU stack"
    ).set_defaults(func=doctor_cmd)

    spec = commands.add_parser(
        "spec", help="snapshot and diff every operator's specs"
    ).add_subparsers(dest="spec", required=True, metavar="action")
    snap = spec.add_parser("snapshot", help="write every declared case x device to FILE")
    snap.add_argument("file")
    snap.add_argument("--family", help="only this family")
    snap.set_defaults(func=spec_snapshot)
    check = spec.add_parser("diff", help="compare the catalog with FILE; exit 1 on any change")
    check.add_argument("file")
    check.set_defaults(func=spec_diff)

    for entry in registry.commands().values():
        try:
            configure = entry.load()
        except registry.RegistryError as error:
            print(printable(f"iron: skipping command {entry.name}: {error}"), file=sys.stderr)
            continue
        configure(commands.add_parser(entry.name, help=entry.help))
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        debug = settings.current().debug
    except ValueError as error:  # a malformed IRON_* variable
        print(printable(f"iron: {error}"), file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, where it is caught, not at exit
        return status
    except BrokenPipeError:
        return stdout_closed()
    except (
        OSError,  # a file the command was given: its message names it
        KeyError,
        OperatorError,
        BindError,
        ValueError,
        TypeError,
        registry.RegistryError,
    ) as error:
        if debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"iron: {printable(message)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
