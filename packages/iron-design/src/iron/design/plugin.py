"""iron-design's plugin: the `iron design` command, and what `iron doctor`
should say about the toolchain that builds designs."""

from iron.core import hookimpl


@hookimpl
def iron_register_commands(register):
    register("design", "iron.design.cli:configure", help="show, check and emit operator designs")


@hookimpl
def iron_doctor(report):
    from iron.design.aiecc import ToolchainError, find_toolchain

    try:
        tools = find_toolchain()
    except ToolchainError as missing:
        # designs are checked, simulated and emitted without it: not a problem
        report("design toolchain", f"not found; designs are not built here ({missing})")
        return
    report("design toolchain", f"aiecc {tools.aiecc}, Peano {tools.peano}")
