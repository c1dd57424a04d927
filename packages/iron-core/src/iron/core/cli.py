# PYTHON_ARGCOMPLETE_OK (argcomplete, where installed, completes `iron` in a shell)
"""The `iron` command: the catalog, devices, plugins, spec snapshots and a
health check of the NPU stack. Plugins add subcommands (`iron cache ...`).

Exit status: 0 done, 1 a check found a problem (`doctor`, `spec diff`), 2
bad input (one line naming the file, the parameter or the variable, and the
rule), 130 interrupted (Ctrl-C: one line, nothing half-written), 141 a
closed stdout; SIGTERM ends it as the signal does (143), silently.
"""

from __future__ import annotations

import argparse
import ast
import enum
import json
import os
import platform
import sys
import types
import typing
from importlib.metadata import PackageNotFoundError, distributions, version

import attrs
import numpy as np

from iron.core import environment, registry, settings, snapshot
from iron.core.device import Device
from iron.core.operator import BindError, Composite, Operator, OperatorError, ParameterType
from iron.core.spec import dtype_name
from iron.core.terminal import INTERRUPTED, printable, stdout_closed


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
    an item without ``=``, or a key given twice, raises `ValueError` naming
    `command`."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{command}: parameters are key=value, got {item!r}")
        if key in params:
            raise ValueError(f"{command}: parameter {key} is given twice")
        params[key] = parse_value(value)
    return params


class ParameterError(ValueError):
    """Parameters an operator cannot be made of: the message says which are
    missing, unknown or of the wrong type, and lists them all."""


def _type_text(annotation) -> str:
    """A parameter's type as a listing spells it (``int | None``)."""
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(arm) for arm in typing.get_args(annotation))
    if origin is not None:
        arms = ", ".join(
            "..." if a is Ellipsis else _type_text(a) for a in typing.get_args(annotation)
        )
        return f"{getattr(origin, '__name__', origin)}[{arms}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(repr(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def parameter_rows(cls: type[Operator]) -> list[list[str]]:
    """[name, type, default] for each parameter of `cls`: what `key=value`
    may set (tunables say they are resolved for the device when unset)."""
    types_ = cls.parameter_types()
    tunable = set(cls.tunables())
    rows = []
    for field in attrs.fields(cls):
        if field.name == "device" or field.name not in types_:
            continue
        if field.default is attrs.NOTHING:
            default = "required"
        elif isinstance(field.default, attrs.Factory):
            default = "computed" if field.default.takes_self else repr(field.default.factory())
        elif isinstance(field.default, np.dtype):
            default = dtype_name(field.default)
        elif isinstance(field.default, enum.Enum):
            default = repr(field.default.value)
        else:
            default = repr(field.default)
        if field.name in tunable and field.default is None:
            default = "None (resolved for the device)"
        if field.name in cls.per_call_members():
            default += " (per call)"
        rows.append([field.name, _type_text(types_[field.name]), default])
    return rows


def make_operator(name: str, params: dict, command: str) -> Operator:
    """The operator registered as `name`, made of `params`. A parameter
    missing, unknown or of the wrong type raises `ParameterError` listing
    every parameter with its type and default (not the constructor's
    "missing 3 required positional arguments")."""
    cls = registry.get_operator(name)
    fields = {f.name: f for f in attrs.fields(cls) if f.name != "device"}
    types_ = cls.parameter_types()
    wrong = [f"unknown parameter {k}" for k in params if k not in fields]
    missing = [n for n, f in fields.items() if f.default is attrs.NOTHING and n not in params]
    if missing:
        wrong.append(f"missing {', '.join(missing)}")
    for key, value in params.items():
        if key in types_:
            wrong.append(ParameterType(types_[key]).problem(cls.__name__, key, value))
    wrong = [w for w in wrong if w]
    if wrong:
        listing = table(parameter_rows(cls), ["parameter", "type", "default"])
        raise ParameterError(
            f"{command} {name}: {'; '.join(wrong)}. Its parameters (key=value):\n{_indent(listing)}"
        )
    return cls(**params)


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
    device = Device.from_name(args.device, args.columns)
    op = make_operator(args.name, params, "iron ops show").resolve(device)
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


def doctor_report() -> dict:
    """What `iron doctor` finds, as data: settings (each with its problem,
    or None), Python, packages, plugins, the NPU stack and the plugins'
    findings. A malformed setting stops it after the settings: the
    registry reads those very values."""
    rows = [
        {"variable": name, "value": shown, "source": source, "problem": problem}
        for name, shown, source, problem in settings.report(registry.settings_problems())
    ]
    python = {"version": platform.python_version(), "executable": sys.executable,
              "platform": platform.platform()}  # fmt: skip
    report: dict = {"python": python, "settings": rows}
    try:
        settings.current()
    except settings.SettingsError:
        return report
    report["packages"] = dict(sorted(filter(None, map(_iron_distribution, distributions()))))
    report["plugins"] = [attrs.asdict(i) for i in registry.plugins()]
    probes = (environment.mlir_aie(), environment.pyxrt(), environment.npu_device())
    report["npu_stack"] = [attrs.asdict(p) | {"text": str(p)} for p in probes]
    report["findings"] = [
        {"label": label, "value": value, "ok": ok} for label, value, ok in registry.doctor()
    ]
    return report


def _iron_distribution(found) -> tuple[str, str] | None:
    """(name, version) of an installed distribution whose name has iron's
    prefix, else None. Read from the metadata's first lines: parsing the
    whole of every installed distribution's metadata took longer than the
    rest of `iron doctor`."""
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    header = dict(
        line.split(": ", 1) for line in text.split("\n\n", 1)[0].splitlines() if ": " in line
    )
    name = header.get("Name", "")
    return (
        (name, header.get("Version", "?"))
        if name.startswith(registry.DISTRIBUTION_PREFIX)
        else None
    )


def doctor_status(report: dict) -> int:
    """2 for a bad setting, 1 for a failed plugin or a problem a plugin
    reports, 0 otherwise."""
    if any(row["problem"] for row in report["settings"]):
        return 2
    failed = any(p["status"] == "failed" for p in report.get("plugins", []))
    return 1 if failed or not all(f["ok"] for f in report.get("findings", [])) else 0


def doctor_cmd(args) -> int:
    report = doctor_report()
    status = doctor_status(report)
    if args.json:
        print(json.dumps({**report, "status": status}, indent=1))
    else:
        _print_doctor(report)
    bad = [row["problem"] for row in report["settings"] if row["problem"]]
    if bad:
        print(printable(f"iron doctor: {bad[0]}"), file=sys.stderr)
    return status


def _print_doctor(report: dict) -> None:
    python = report["python"]
    print(f"Python {python['version']} ({python['executable']}) on {python['platform']}")
    print("settings:")
    rows = [
        [r["variable"], r["value"], r["source"], f"PROBLEM {r['problem']}" if r["problem"] else ""]
        for r in report["settings"]
    ]
    print(_indent(table(rows, ["variable", "value", "from", ""])))
    if "packages" not in report:
        print("(a malformed setting: plugins and the NPU stack are not examined)")
        return
    print("packages:")
    for name, found in report["packages"].items():
        print(f"  {name} {found}")
    print("plugins:")
    for info in report["plugins"]:
        error = f": {info['error']}" if info["error"] else ""
        line = f"  {info['name']} ({info['distribution']} {info['version']}): {info['status']}"
        print(printable(line + error))
    print("NPU stack:")
    for probe in report["npu_stack"]:
        print(f"  [{'x' if probe['present'] else ' '}] {probe['text']}")
    if report["findings"]:
        print("plugins report:")
        for finding in report["findings"]:
            flag = "" if finding["ok"] else "PROBLEM "
            print(printable(f"  {flag}{finding['label']}: {finding['value']}"))


def spec_snapshot(args) -> int:
    data = snapshot.write(args.file, args.family)
    cases = sum(len(c) for c in data["operators"].values())
    print(
        printable(f"wrote {args.file}: {len(data['operators'])} operators, ")
        + f"{cases} cases x {len(data['devices'])} devices"
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


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default (unless it is None or False,
    or the help already says it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and "default" not in text and (action.option_strings or action.nargs == "?"):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An argument parser whose help shows defaults; the subcommands a
    plugin adds (`add_subparsers` makes them of this class) show them too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def iron_version() -> str:
    try:
        return f"iron ({registry.CORE_DISTRIBUTION} {version(registry.CORE_DISTRIBUTION)})"
    except PackageNotFoundError:  # run from a source tree
        return f"iron ({registry.CORE_DISTRIBUTION}, not installed)"


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="npu2", help="the device to resolve for (`iron devices` lists them)"
    )
    parser.add_argument(
        "--columns", type=int, help="columns of the device to use (default: all of them)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="iron", description="IRON: operators and graphs for AMD Ryzen AI NPUs")
    parser.add_argument("--version", action="version", version=iron_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    ops = commands.add_parser("ops", help="list and show operators").add_subparsers(
        dest="ops", required=True, metavar="action"
    )
    listing = ops.add_parser("list", help="the registered operators")
    listing.add_argument("--family", help="only this family (e.g. eltwise)")
    _json_option(listing)
    listing.set_defaults(func=ops_list)
    show = ops.add_parser(
        "show",
        help="an operator's resolved parameters and arg specs",
        description="Resolve an operator for a device and show its parameters, its arg specs "
        "and its tolerance. Without the parameters it needs, it lists them with their types "
        "and defaults.",
    )
    show.add_argument("name", help="a registered operator (`iron ops list` shows them)")
    show.add_argument(
        "params",
        nargs="*",
        metavar="key=value",
        help="the operator's parameters: ints, floats, true/false, none, [lists] or text",
    )
    _device_options(show)
    _json_option(show)
    show.set_defaults(func=ops_show)

    devices = commands.add_parser("devices", help="the NPU descriptions")
    _json_option(devices)
    devices.set_defaults(func=devices_cmd)

    plugins = commands.add_parser("plugins", help="installed plugins and their load status")
    _json_option(plugins)
    plugins.set_defaults(func=plugins_cmd)

    doctor = commands.add_parser(
        "doctor",
        help="settings, packages, plugins and what this host has of the NPU stack",
        description="Report every IRON_* setting (a bad one as a problem), Python, the iron "
        "packages, the plugins and the NPU stack. Exit 2 for a bad setting, 1 for another "
        "problem.",
    )
    _json_option(doctor)
    doctor.set_defaults(func=doctor_cmd)

    spec = commands.add_parser(
        "spec", help="snapshot and diff every operator's specs"
    ).add_subparsers(dest="spec", required=True, metavar="action")
    snap = spec.add_parser("snapshot", help="write every declared case x device to FILE")
    snap.add_argument(
        "file", help="the JSON file to write (a regular file or none; replaced whole)"
    )
    snap.add_argument("--family", help="only this family")
    snap.set_defaults(func=spec_snapshot)
    check = spec.add_parser("diff", help="compare the catalog with FILE; exit 1 on any change")
    check.add_argument("file", help="a snapshot `iron spec snapshot` wrote")
    check.set_defaults(func=spec_diff)

    for entry in registry.commands().values():
        if entry.name in commands.choices:
            print(
                printable(
                    f"iron: skipping command {entry.name} of plugin {entry.plugin}: "
                    "the name is taken by another command"
                ),
                file=sys.stderr,
            )
            continue
        try:
            configure = entry.load()
        except registry.RegistryError as error:
            print(printable(f"iron: skipping command {entry.name}: {error}"), file=sys.stderr)
            continue
        configure(commands.add_parser(entry.name, help=entry.help))
    return parser


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer a shell's completion request (argcomplete sets _ARGCOMPLETE),
    where the optional `completion` extra is installed."""
    if "_ARGCOMPLETE" in os.environ:
        try:
            import argcomplete
        except ImportError:
            return
        argcomplete.autocomplete(parser)


#: what the command prints for a failure it expects, instead of a traceback
EXPECTED = (
    OSError,  # a file the command was given: its message names it
    KeyError,
    OperatorError,
    BindError,
    ValueError,
    TypeError,
    registry.RegistryError,
)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            debug = settings.value("IRON_DEBUG")
        except settings.SettingsError:
            debug = False  # doctor reports it; every other command refuses it below
        parser = build_parser()
        _complete(parser)
        args = parser.parse_args(argv)
        try:
            if args.func is not doctor_cmd:
                registry.checked_settings()  # a bad IRON_* value: one line, before any work
            status = args.func(args) or 0
            sys.stdout.flush()  # a closed pipe shows here, where it is caught, not at exit
            return status
        except BrokenPipeError:
            return stdout_closed()
        except EXPECTED as error:
            if debug:
                raise
            message = error.args[0] if isinstance(error, KeyError) and error.args else error
            print(f"iron: {printable(message)}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("iron: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
