"""IRON's pytest plugin, exercised in an inner pytest run."""

import pytest

from iron.core import Device, environment, hookimpl, registry

INNER = """
import pytest

def test_device_fixture(device):
    assert device.name in ("npu1", "npu2")

def test_named_devices(device_npu1, device_npu2):
    assert (device_npu1.columns, device_npu2.columns) == (4, 8)

@pytest.mark.npu
def test_needs_npu():
    pass

@pytest.mark.toolchain
def test_needs_toolchain():
    pass
"""


def test_fixtures_and_markers(pytester):
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-rs", "--strict-markers")  # the plugin loads by its entry point
    skipped = int(not environment.npu_ready()) + int(not environment.toolchain_ready())
    result.assert_outcomes(passed=3 + 2 - skipped, skipped=skipped)


@pytest.mark.parametrize("present", [False, True], ids=["absent", "present"])
def test_markers_follow_the_probes(pytester, npu_stack, present):
    npu_stack(present)
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-rs", "--strict-markers")  # in this process: patched probes
    result.assert_outcomes(passed=5 if present else 3, skipped=0 if present else 2)
    if not present:
        result.stdout.fnmatch_lines(
            [
                "*needs an NPU: pyxrt: not importable*",
                "*needs the toolchain: mlir-aie: not installed*",
            ]
        )


def test_required_distribution_fails_instead_of_skipping(pytester, monkeypatch):
    pytester.makepyfile("""
        from iron.core.testing import require_distribution

        def test_it():
            require_distribution("no-such-distribution-anywhere")
    """)
    monkeypatch.setenv("IRON_REQUIRE_FIXTURE_PLUGINS", "0")
    pytester.runpytest().assert_outcomes(skipped=1)
    monkeypatch.setenv("IRON_REQUIRE_FIXTURE_PLUGINS", "1")
    pytester.runpytest().assert_outcomes(failed=1)


@pytest.mark.npu
def test_npu_marker_skips_here_with_its_reason():
    """Runs only where an NPU exists; everywhere else it must be skipped."""
    assert environment.npu_ready()


class ExtraDevice:
    @staticmethod
    @hookimpl
    def iron_register_devices(register):
        register(Device(name="npu7", arch="aie2p", max_columns=2, columns=2))


def test_the_device_fixture_runs_on_every_registered_device(pytester):
    pytester.makepyfile("""
        import pytest

        def test_device(device):
            print("DEVICE", device.name)

        @pytest.mark.parametrize("device", ["given"])
        def test_its_own_parameters_win(device):
            assert device == "given"
    """)
    registry.register_plugin(ExtraDevice, name="extra-device")
    try:
        result = pytester.runpytest("-s")  # in this process: it sees this registry
    finally:
        registry.unregister_plugin("extra-device")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*DEVICE npu1*", "*DEVICE npu2*", "*DEVICE npu7*"])
