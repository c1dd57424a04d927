import re
from pathlib import Path

import pytest

from iron.core.settings import VARIABLES, Settings, SettingsError, current, report, value


def test_defaults_and_where_they_came_from():
    s = Settings.from_environment({"XDG_CACHE_HOME": "/xdg"})
    assert (s.backend, s.device, s.poison, s.debug) == ("auto", "npu2", False, False)
    assert (s.plugins, s.disable_plugins, s.require_fixture_plugins) == (None, frozenset(), False)
    assert s.sources == dict.fromkeys([v.name for v in VARIABLES], "default")
    assert Settings.from_environment({}).cache_home.name == "iron"


def test_environment_values_and_their_source():
    env = {
        "IRON_BACKEND": "sim",
        "IRON_DEVICE": "npu1",
        "IRON_POISON": "1",
        "IRON_CACHE_HOME": "/tmp/iron-cache",
        "IRON_KERNEL_CACHE": "/tmp/iron-kernels",
        "IRON_PLUGINS": " eltwise, gemm ,",
        "IRON_DISABLE_PLUGINS": "*",
        "IRON_DEBUG": "1",
        "IRON_REQUIRE_FIXTURE_PLUGINS": "1",
        "IRON_UNRELATED": "x",
    }
    s = Settings.from_environment(env)
    assert (s.backend, s.device, s.poison, s.debug, s.require_fixture_plugins) == (
        "sim", "npu1", True, True, True,
    )  # fmt: skip
    assert (s.cache_home, s.kernel_cache) == (Path("/tmp/iron-cache"), Path("/tmp/iron-kernels"))
    assert s.plugins == {"eltwise", "gemm"} and s.disable_plugins == {"*"}
    assert set(s.sources.values()) == {"env"}
    assert ("IRON_PLUGINS", "eltwise,gemm", "env", None) in report({}, env)


def test_an_empty_variable_is_unset():
    s = Settings.from_environment({"IRON_BACKEND": "", "IRON_PLUGINS": " "})
    assert s.backend == "auto" and s.plugins is None
    assert s.sources["IRON_BACKEND"] == "default"
    assert ("IRON_PLUGINS", "(all)", "default", None) in report({}, {"IRON_PLUGINS": " "})


@pytest.mark.parametrize("variable", ["IRON_POISON", "IRON_DEBUG", "IRON_REQUIRE_FIXTURE_PLUGINS"])
def test_a_flag_is_0_or_1(variable):
    with pytest.raises(ValueError, match=f"{variable}='yes': a flag is 0 or 1"):
        Settings.from_environment({variable: "yes"})


def test_current_reads_the_environment_when_called(monkeypatch):
    monkeypatch.setenv("IRON_DEVICE", "npu1")
    assert current().device == "npu1" and current().sources["IRON_DEVICE"] == "env"
    monkeypatch.delenv("IRON_DEVICE")
    assert current().device == "npu2"


def test_no_other_module_reads_an_iron_variable():
    """settings.py is the one place, in every package of the repository: a
    new IRON_* read elsewhere fails here, as does one the README's table
    leaves out."""
    packages = Path(__file__).parents[2]
    sources = [p for p in packages.glob("*/src/**/*.py") if p.name != "settings.py"]
    assert len(sources) > 50
    reads = re.compile(r"(environ|getenv)[^\n]*IRON_")
    assert [str(p) for p in sources if reads.search(p.read_text())] == []
    documented = (Path(__file__).parents[1] / "README.md").read_text()
    assert [v.name for v in VARIABLES if f"| `{v.name}` |" not in documented] == []


def test_a_cache_home_is_an_absolute_path_to_a_folder_or_nothing_yet(tmp_path):
    assert Settings.from_environment({"IRON_CACHE_HOME": str(tmp_path / "new")}).cache_home == (
        tmp_path / "new"
    )
    (tmp_path / "file").write_text("")
    for text, rule in [("cache", "must be an absolute path"),
                       (str(tmp_path / "file"), "is a regular file, not a folder")]:  # fmt: skip
        with pytest.raises(SettingsError, match=re.escape(f"IRON_CACHE_HOME={text!r}: {rule}")):
            Settings.from_environment({"IRON_CACHE_HOME": text})


def test_the_kernel_cache_follows_the_cache_home_unless_given(tmp_path):
    """A test that keeps a private IRON_CACHE_HOME may still share compiled kernels."""
    home = {"IRON_CACHE_HOME": str(tmp_path / "home")}
    assert Settings.from_environment(home).kernel_cache == tmp_path / "home" / "numba"
    given = {**home, "IRON_KERNEL_CACHE": str(tmp_path / "kernels")}
    assert Settings.from_environment(given).kernel_cache == tmp_path / "kernels"
    with pytest.raises(SettingsError, match="IRON_KERNEL_CACHE='kernels': must be an absolute"):
        Settings.from_environment({"IRON_KERNEL_CACHE": "kernels"})


def test_one_variable_is_read_alone():
    """The registry reads its lists so: a malformed flag does not stop it."""
    environ = {"IRON_DEBUG": "yes", "IRON_PLUGINS": "a, b"}
    assert value("IRON_PLUGINS", environ) == {"a", "b"}
    with pytest.raises(SettingsError, match="IRON_DEBUG='yes'"):
        value("IRON_DEBUG", environ)
    rows = {row[0]: row for row in report({"IRON_DEBUG": "bad"}, environ)}
    assert rows["IRON_DEBUG"] == ("IRON_DEBUG", "yes", "env", "bad")
