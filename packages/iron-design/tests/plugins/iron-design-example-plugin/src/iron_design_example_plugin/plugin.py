from iron.core import hookimpl


@hookimpl
def iron_register_operators(register):
    register("AddOne", "iron_design_example_plugin.add_one:AddOne", summary="y = x + 1 (int32)")
