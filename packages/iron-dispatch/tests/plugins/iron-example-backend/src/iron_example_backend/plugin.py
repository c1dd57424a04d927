from iron.core import hookimpl


@hookimpl
def iron_register_backends(register):
    register(
        "counting", "iron_example_backend.backend:CountingBackend", summary="references, counted"
    )
