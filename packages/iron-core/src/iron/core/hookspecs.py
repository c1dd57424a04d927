"""The hooks an IRON plugin may implement.

A plugin is a module named by an entry point in the group ``iron.plugins``.
It should import nothing heavy: every hook receives a ``register`` callback
and registers names with import paths as strings, so listing what a plugin
offers never imports what it offers.

    from iron.core import hookimpl

    @hookimpl
    def iron_register_operators(register):
        register("RMSNorm", "iron.ops.eltwise.rms_norm:RMSNorm", summary="row-wise RMS norm")
"""

import pluggy

hookspec = pluggy.HookspecMarker("iron")
hookimpl = pluggy.HookimplMarker("iron")


# ---- catalog -----------------------------------------------------------------


@hookspec
def iron_register_operators(register):
    """Register operators.

    Call ``register(name, target, *, family=None, summary="")`` once per
    operator. ``target`` is ``"module:Class"`` and is imported only when the
    operator is looked up by name. ``family`` defaults to the plugin's entry
    point name. A name registered by two plugins is an error naming both.
    """


@hookspec
def iron_register_devices(register):
    """Register NPU descriptions.

    Call ``register(device)`` with an ``iron.core.Device`` at full width; it
    becomes available to ``Device.from_name(device.name, columns=...)``.
    """


# ---- execution -----------------------------------------------------------------


@hookspec
def iron_register_backends(register):
    """Register execution backends.

    Call ``register(name, target, *, summary="", priority=0)``. ``target`` is
    ``"module:factory"``, a callable taking one argument, the session that
    will own the instance (``iron.dispatch.Session``: its compile cache,
    simulated device library and host kernels), that returns an object
    following ``iron.dispatch.Backend``, the ``typing.Protocol`` whose
    docstrings state what ``available``, ``compile``, ``load``, ``close``,
    the executable and its buffers must do. The factory is imported when a
    session first asks for the backend and called once per session; its
    object's ``name`` must be ``name``. Among available backends,
    ``"auto"`` picks the highest priority (IRON's: reference 10, sim 50,
    npu 100).
    """


# ---- command line and diagnostics ------------------------------------------------


@hookspec
def iron_register_commands(register):
    """Register ``iron`` subcommands.

    Call ``register(name, target, *, help="")``. ``target`` is
    ``"module:function"``; the function receives the subcommand's
    ``argparse`` parser, adds its arguments and sets ``func`` (called with
    the parsed namespace; its return value is the exit status). It is
    imported only when ``iron`` builds its parser.
    """


@hookspec
def iron_doctor(report):
    """Add lines to ``iron doctor``.

    Call ``report(label, value, ok=True)`` for each finding; ``ok=False``
    marks a problem. Must not raise when the toolchain or device is absent:
    reporting that absence is the point.
    """
