"""iron-core's own plugin: the NPU generations mlir-aie targets. The
registry loads it by name, like any plugin, so the registry itself never
imports a device (device -> registry is the only edge between them)."""

from iron.core.device import BUILTIN_DEVICES
from iron.core.hookspecs import hookimpl


@hookimpl
def iron_register_devices(register):
    for device in BUILTIN_DEVICES:
        register(device)
