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
        summary="a simulated NPU on this CPU: each design run by IRON's functional simulator "
        "(device memory, granule syncs, scratchpad); right bytes, not an NPU's speed",
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
    from iron.dispatch.selection import backend_names
    from iron.dispatch.session import Session

    session = Session()
    for name in backend_names():
        ok, why = session.backend(name).available()
        report(f"backend {name}", "available" if ok else f"unavailable: {why}")
    try:
        chosen, passed_over = session.auto_choice()
    except RuntimeError as error:
        report("backend auto", error, ok=False)
    else:
        over = f" (passed over: {', '.join(passed_over)})" if passed_over else ""
        report("backend auto", chosen + over)
    report("device steps", operators_with_designs())
    info = session.cache.info(verify=False)  # sizes only: `iron cache` reads every byte
    session.close()
    repaired = f", {len(info['repaired'])} repaired" if info["repaired"] else ""
    report(
        "compile cache", f"{info['root']}: {info['entries']} entries, {info['bytes']} B{repaired}"
    )


def operators_with_designs() -> str:
    """Which registered operators run designs on the device (sim, npu) and
    which fall back to host models there (imports each operator's module)."""
    from iron.core import registry
    from iron.design import has_design

    with_design, without = [], []
    for entry in registry.operators():
        try:
            cls = registry.get_operator(entry.name)
        except Exception:  # reported by the registry's own doctor line
            continue
        (with_design if has_design(cls) else without).append(entry.name)
    total = len(with_design) + len(without)
    named = f" ({', '.join(with_design)})" if with_design else ""
    back = f"; {len(without)} fall back to host models on sim" if without else ""
    return f"{len(with_design)} of {total} registered operators have designs{named}{back}"
