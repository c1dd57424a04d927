"""iron-dispatch: operator sequences and their layout, graph functions with
per-shape versions sharing one arena, the reference / cpu / sim / npu backends,
the compile cache, and the session that owns a function's runtime state."""

from iron.dispatch.backends import Backend, BackendUnavailable, CompilingBackend, Executable
from iron.dispatch.cache import CompileCache, cache_home
from iron.dispatch.executable import StepReport
from iron.dispatch.graph import GraphFunction, Version, graph
from iron.dispatch.image import CompileError, Image
from iron.dispatch.layout import Layout, arena_layout, plan_layout
from iron.dispatch.memory import DeviceBuffer, GranuleError
from iron.dispatch.residents import Residents
from iron.dispatch.runlist import LayoutError, Runlist
from iron.dispatch.runner import run
from iron.dispatch.selection import get_backend
from iron.dispatch.sequence import OperatorSequence
from iron.dispatch.session import Session

__all__ = [
    "Backend",
    "BackendUnavailable",
    "CompileCache",
    "CompileError",
    "CompilingBackend",
    "DeviceBuffer",
    "Executable",
    "GranuleError",
    "GraphFunction",
    "Image",
    "Layout",
    "LayoutError",
    "OperatorSequence",
    "Residents",
    "Runlist",
    "Session",
    "StepReport",
    "Version",
    "arena_layout",
    "cache_home",
    "get_backend",
    "graph",
    "plan_layout",
    "run",
]
