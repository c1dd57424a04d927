"""iron-core's own plugin: the NPU generations mlir-aie targets."""

from iron.core.device import BUILTIN_DEVICES
from iron.core.hookspecs import hookimpl


@hookimpl
def iron_register_devices(register):
    for device in BUILTIN_DEVICES:
        register(device)
