"""iron-dispatch: operator sequences and their layout, graph functions with
per-shape versions sharing one arena, the reference / cpu / sim / npu backends,
the compile cache, and the session that owns a function's runtime state.

Importing this package imports none of its modules: each name below is
imported from its module on first use (`iron.core.lazy`), so a plugin that
lives here costs the `iron` command nothing it does not use."""

from iron.core.lazy import lazy_exports

#: exported name -> the module under iron.dispatch that defines it
EXPORTS = {
    "Backend": "backends",
    "BackendUnavailable": "backends",
    "CompilingBackend": "backends",
    "Executable": "backends",
    "CompileCache": "cache",
    "cache_home": "cache",
    "StepReport": "executable",
    "GraphFunction": "graph",
    "Version": "graph",
    "graph": "graph",
    "CompileError": "image",
    "Image": "image",
    "Layout": "layout",
    "arena_layout": "layout",
    "plan_layout": "layout",
    "DeviceBuffer": "memory",
    "GranuleError": "memory",
    "Residents": "residents",
    "LayoutError": "runlist",
    "Runlist": "runlist",
    "run": "runner",
    "get_backend": "selection",
    "OperatorSequence": "sequence",
    "Session": "session",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, EXPORTS)
