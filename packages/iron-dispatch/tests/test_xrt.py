"""The runtime over the pyxrt adapter: the calls it makes, in order, on a
stand-in pyxrt module that records them (the real one runs under the `npu`
marker)."""

import sys
import types

import numpy as np
import pytest
from dispatch_fakes import AddK, AddOne

from iron.dispatch import get_backend, graph
from iron.dispatch.executable import allocate
from iron.dispatch.runtime import XclbinExecutable, XrtExecutable
from iron.dispatch.xrt import PyXrt

SIZE = 1024


class Recorder:
    def __init__(self):
        self.calls = []

    def module(self):
        calls = self.calls

        class bo:  # pyxrt's spelling
            host_only = "host_only"
            cacheable = "cacheable"

            def __init__(self, device, nbytes, flags, group):
                calls.append(("bo", nbytes, flags, group))
                self.bytes = bytearray(nbytes)

            def map(self):
                return memoryview(self.bytes)

            def sync(self, direction, size, offset):
                calls.append(("sync", direction, size, offset))

        class run:
            def __init__(self, kernel):
                calls.append(("run", kernel))
                self.scratchpad = bo(None, 128, "scratchpad", 0)

            def set_arg(self, index, buffer):
                calls.append(("set_arg", index, len(buffer.bytes)))

            def get_ctrl_scratchpad_bo(self):
                return self.scratchpad

            def start(self):
                calls.append(("start",))

            def wait(self):
                calls.append(("wait",))
                return "ERT_CMD_STATE_COMPLETED"

        class device(str):
            def register_xclbin(self, xclbin):
                calls.append(("register_xclbin", str(self), xclbin.path))

        class xclbin:
            def __init__(self, path):
                calls.append(("xclbin", path.rsplit("/", 1)[-1]))
                self.path = path.rsplit("/", 1)[-1]

            def get_uuid(self):
                return "uuid"

        class kernel:  # pyxrt.kernel: an xclbin's
            def __init__(self, ctx, name):
                calls.append(("xclbin_kernel", ctx, name.split("_")[0]))

            def group_id(self, index):
                return 10 + index

            def __call__(self, opcode, instructions, count, *bos):
                calls.append(("call", opcode, len(instructions.bytes), count, len(bos)))
                return types.SimpleNamespace(wait=lambda: "ert_cmd_state.ERT_CMD_STATE_COMPLETED")

        return types.SimpleNamespace(
            device=lambda index: calls.append(("device", index)) or device(f"device{index}"),
            xclbin=xclbin,
            kernel=kernel,
            elf=lambda path: calls.append(("elf", path.rsplit("/", 1)[-1])) or "elf",
            hw_context=lambda device, elf: calls.append(("hw_context", device, elf)) or "ctx",
            ext=types.SimpleNamespace(
                kernel=lambda ctx, name: calls.append(("kernel", ctx, name)) or "kernel"
            ),
            run=run,
            bo=bo,
            xclBOSyncDirection=types.SimpleNamespace(
                XCL_BO_SYNC_BO_TO_DEVICE="to", XCL_BO_SYNC_BO_FROM_DEVICE="from"
            ),
        )


def test_the_runtime_calls_pyxrt_as_a_full_elf_wants(monkeypatch, npu_stack):
    npu_stack(present=True)
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "pyxrt", recorder.module())

    @graph(backend="sim", device="npu2")
    def one(g, x, *, pos):
        return g(AddK(SIZE), x, k=pos)

    one.compile(((SIZE,), np.int32))
    (version,) = one.versions.values()
    image = version.image
    buffers = allocate(image, granule=64, unified=False)
    executable = XrtExecutable(image, buffers, PyXrt())
    calls = recorder.calls
    assert calls[0] == ("device", 0)
    made = [c for c in calls if c[0] == "bo"]  # input, output, scratch, then the run's scratchpad
    assert [c[2:] for c in made[:3]] == [("host_only", 0)] * 3
    loading = [c for c in calls if c[0] in ("elf", "hw_context", "kernel")]
    assert loading == [("elf", "program0.json"), ("hw_context", "device0", "elf"),
                       ("kernel", "ctx", "main:sequence")]  # fmt: skip
    del calls[:]
    executable({"pos": -3})
    names = [c[0] for c in calls]
    assert names.index("set_arg") < names.index("start") < names.index("wait")
    assert [c for c in calls if c[0] == "set_arg"] == [
        ("set_arg", 0, SIZE * 4), ("set_arg", 1, SIZE * 4), ("set_arg", 2, image.sizes["scratch"] or 1),
    ]  # fmt: skip
    before, after = names.index("start"), names.index("wait")
    assert ("sync", "to", SIZE * 4, 0) in calls[:before]  # the input, before the run
    assert ("sync", "to", 128, 0) in calls[:before]  # the control scratchpad
    assert ("sync", "from", SIZE * 4, 0) in calls[after:]  # the output, after it
    run = executable.runs[0]
    assert np.frombuffer(run.scratchpad.bytes, np.int32)[0] == -3


def test_the_runtime_calls_pyxrt_as_an_xclbin_wants(monkeypatch, npu_stack):
    npu_stack(present=True)
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "pyxrt", recorder.module())

    @graph(backend="sim", device="npu1")
    def two(g, x, *, pos):
        return g(AddOne(SIZE), g(AddK(SIZE), x, k=pos))

    two.compile(((SIZE,), np.int32))
    (version,) = two.versions.values()
    image = version.image
    made = []

    def streams(index, params, values):
        made.append((index, params, values))
        return np.arange(4 + index, dtype=np.uint32)  # a stream of 4 or 5 words

    executable = XclbinExecutable(
        image, allocate(image, granule=64, unified=False), PyXrt(), streams=streams
    )
    calls = recorder.calls
    loading = [c for c in calls if c[0] in ("xclbin", "register_xclbin", "hw_context")]
    assert loading == [("xclbin", "image.xclbin.json"), ("register_xclbin", "device0",
                       "image.xclbin.json"), ("hw_context", "device0", "uuid")]  # fmt: skip
    kernels = [c for c in calls if c[0] == "xclbin_kernel"]
    assert kernels == [("xclbin_kernel", "ctx", "AddK"), ("xclbin_kernel", "ctx", "AddOne")]
    del calls[:]
    executable({"pos": 7})
    executable({"pos": 7})  # the same values: the same streams, already on the device
    executable({"pos": 8})
    assert made == [(0, {"k": 7}, {}), (1, {}, {}), (0, {"k": 8}, {})]
    instructions = [c for c in calls if c[0] == "bo" and c[2] == "cacheable"]
    assert instructions == [("bo", 16, "cacheable", 11), ("bo", 20, "cacheable", 11),
                            ("bo", 16, "cacheable", 11)]  # group_id(1) of each kernel  # fmt: skip
    runs = [c for c in calls if c[0] == "call"]
    # opcode 3, the instruction buffer and its length in words, then input, output, scratch
    assert runs == [("call", 3, 16, 4, 3), ("call", 3, 20, 5, 3)] * 3
    names = [c[0] for c in calls]
    assert names.index("sync") < names.index("call")


def test_without_pyxrt_the_adapter_says_what_is_missing(npu_stack):
    npu_stack(present=False)
    with pytest.raises(ImportError, match=r"pyxrt is missing .*source its setup\.sh"):
        PyXrt()
    assert get_backend("npu").available()[0] is False


@pytest.mark.npu
def test_a_design_runs_on_the_npu():
    @graph(backend="npu", device="npu2")
    def one(g, x, *, pos):
        return g(AddK(SIZE), x, k=pos)

    x = np.arange(SIZE, dtype=np.int32)
    assert np.array_equal(one(x, pos=4), x + 4)


@pytest.mark.npu
def test_an_xclbin_chain_runs_on_the_npu():
    @graph(backend="npu", device="npu2", mode="separate")
    def two(g, x, *, pos):
        return g(AddOne(SIZE), g(AddOne(SIZE), x))

    x = np.arange(SIZE, dtype=np.int32)
    assert np.array_equal(two(x, pos=0), x + 2)
    (version,) = two.versions.values()
    assert version.image.xclbin.endswith("image.xclbin")
