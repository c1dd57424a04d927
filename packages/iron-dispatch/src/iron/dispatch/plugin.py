"""iron-dispatch's plugin: its backends, the `iron cache` command and what
`iron doctor` should say about backends and the cache."""

from iron.core import hookimpl


@hookimpl
def iron_register_backends(register):
    register(
        "reference",
        "iron.dispatch.backends.reference:ReferenceBackend",
        summary="numpy references on the host, on the planned arena",
        priority=10,
    )
    register(
        "cpu",
        "iron.dispatch.backends.cpu:CpuBackend",
        summary="host kernels (fused bf16, every core) where operators have them, else references",
        priority=30,
    )
    register(
        "sim",
        "iron.dispatch.backends.sim:SimBackend",
        summary="a simulated NPU: device memory, granule syncs, parameter scratchpad",
        priority=50,
    )
    register(
        "npu",
        "iron.dispatch.backends.npu:NpuBackend",
        summary="mlir-aie + XRT on a Ryzen AI NPU",
        priority=100,
    )


@hookimpl
def iron_register_commands(register):
    register(
        "cache", "iron.dispatch.cli:configure_cache", help="inspect or clear the compile cache"
    )


@hookimpl
def iron_doctor(report):
    """Every registered backend, available or why not (an unavailable one is
    not a problem: most hosts have no NPU), which one "auto" picks (a
    problem when none is available), and the compile cache."""
    from iron.dispatch.cache import CompileCache
    from iron.dispatch.selection import auto_choice, backend_names, get_backend

    for name in backend_names():
        ok, why = get_backend(name).available()
        report(f"backend {name}", "available" if ok else f"unavailable: {why}")
    try:
        chosen, passed_over = auto_choice()
    except RuntimeError as error:
        report("backend auto", error, ok=False)
    else:
        over = f" (passed over: {', '.join(passed_over)})" if passed_over else ""
        report("backend auto", chosen + over)
    info = CompileCache().info()
    report("compile cache", f"{info['root']}: {info['entries']} entries, {info['bytes']} B")
