"""iron-dispatch's plugin: its backends, the `iron cache` command and what
`iron doctor` should say about backends and the cache."""

from iron.core import hookimpl


@hookimpl
def iron_register_backends(register):
    register(
        "reference",
        "iron.dispatch.backends:make_reference",
        summary="numpy references on the host, on the planned arena",
        priority=10,
    )
    register(
        "sim",
        "iron.dispatch.backends:make_sim",
        summary="a simulated NPU: device memory, granule syncs, parameter scratchpad",
        priority=50,
    )
    register(
        "npu",
        "iron.dispatch.backends:make_npu",
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
    from iron.dispatch.cache import CompileCache
    from iron.dispatch.selection import auto_choice, get_backend

    for name in ("reference", "sim", "npu"):
        ok, why = get_backend(name).available()
        report(
            f"backend {name}", "available" if ok else f"unavailable: {why}", ok=ok or name == "npu"
        )
    chosen, passed_over = auto_choice()
    report(
        "backend auto",
        chosen + (f" (passed over: {', '.join(passed_over)})" if passed_over else ""),
    )
    info = CompileCache().info()
    report("compile cache", f"{info['root']}: {info['entries']} entries, {info['bytes']} B")
