from iron.core import hookimpl


@hookimpl
def iron_register_operators(register):
    register("Scale", "iron_example_plugin.scale:Scale", summary="y = factor * x")
    register("Offset", "iron_example_plugin.offset:Offset", summary="y = x + offset")
