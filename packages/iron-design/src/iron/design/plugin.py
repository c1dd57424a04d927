"""iron-design's plugin: the `iron design` command."""

from iron.core import hookimpl


@hookimpl
def iron_register_commands(register):
    register("design", "iron.design.cli:configure", help="show, check and emit operator designs")
