"""The registry, measured in fresh interpreters: this process's sys.modules
and entry points are whatever the test run happened to load."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iron.core import Device, hookimpl, registry
from iron.core.testing import modules_imported_by, require_distribution

OPERATOR_MODULE = """
import attrs, numpy as np
from iron.core import Case, Operator, Tolerance, bf16, same_shape_unary

@attrs.frozen
class {name}(Operator):
    size: int
    cases = (Case({{"size": 8}}),)

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x):
        return x.copy()

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
"""


def make_distribution(root: Path, dist: str, package: str, plugin_source: str, modules=()) -> None:
    """An installed distribution as importlib.metadata sees one: a dist-info
    folder with an `iron.plugins` entry point, beside its package."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[iron.plugins]\n{package} = {package}.plugin\n")
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    (root / package / "plugin.py").write_text(textwrap.dedent(plugin_source))
    for name in modules:
        (root / package / f"{name.lower()}.py").write_text(OPERATOR_MODULE.format(name=name))


def run(root: Path, code: str, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(root), **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
    )


FAMILY_PLUGIN = """
from iron.core import hookimpl

@hookimpl
def iron_register_operators(register):
    register("Alpha", "lazyfam.alpha:Alpha", summary="first")
    register("Beta", "lazyfam.beta:Beta", summary="second")
"""


@pytest.fixture
def family(tmp_path, monkeypatch):
    make_distribution(tmp_path, "lazy-family", "lazyfam", FAMILY_PLUGIN, modules=("Alpha", "Beta"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("IRON_PLUGINS", "lazyfam")
    return tmp_path


def test_listing_imports_no_operator_module(family):
    imported = modules_imported_by(
        "from iron.core import registry\nassert registry.operator_names() == ['Alpha', 'Beta']",
        prefix="lazyfam",
    )
    assert imported == {"lazyfam", "lazyfam.plugin"}


def test_looking_one_up_imports_only_its_module(family):
    imported = modules_imported_by(
        "from iron.core import registry\nassert registry.get_operator('Beta').__name__ == 'Beta'",
        prefix="lazyfam",
    )
    assert imported == {"lazyfam", "lazyfam.plugin", "lazyfam.beta"}


def test_the_probe_sees_imports(family):
    """Guard: the absence checks above would be vacuous if the probe were blind."""
    assert "lazyfam.alpha" in modules_imported_by("import lazyfam.alpha", prefix="lazyfam")


def test_broken_plugin_is_reported_and_skipped(tmp_path):
    make_distribution(tmp_path, "lazy-family", "lazyfam", FAMILY_PLUGIN, modules=("Alpha", "Beta"))
    make_distribution(
        tmp_path, "crashy-plugin", "crashy", "raise ImportError('missing native library')"
    )
    result = run(
        tmp_path,
        """
        import json
        from iron.core import registry
        print(json.dumps([registry.operator_names(), {p.name: [p.status, p.error] for p in registry.plugins()}]))
    """,
        IRON_PLUGINS="lazyfam,crashy-plugin",
    )
    assert result.returncode == 0, result.stderr
    names, plugins = json.loads(result.stdout)
    assert names == ["Alpha", "Beta"]
    assert plugins["crashy"] == ["failed", "ImportError: missing native library"]
    assert (
        "iron plugin 'crashy' (distribution crashy-plugin 0.1) failed to load and is skipped"
        in result.stderr
    )


def test_plugin_whose_hook_raises_keeps_nothing(tmp_path):
    make_distribution(
        tmp_path,
        "half-plugin",
        "half",
        """
        from iron.core import hookimpl

        @hookimpl
        def iron_register_operators(register):
            register("Half", "half.half:Half")
            raise ValueError("second registration crashed")
    """,
    )
    result = run(
        tmp_path,
        """
        from iron.core import registry
        print(registry.operator_names(), [p.status for p in registry.plugins() if p.name == 'half'])
    """,
        IRON_PLUGINS="half",
    )
    assert result.stdout.strip() == "[] ['failed']"
    assert (
        "raised in iron_register_operators" in result.stderr
        and "second registration crashed" in result.stderr
    )


def test_duplicate_names_name_both_plugins(tmp_path):
    for package in ("first", "second"):
        make_distribution(
            tmp_path,
            f"{package}-plugin",
            package,
            f"""
            from iron.core import hookimpl

            @hookimpl
            def iron_register_operators(register):
                register("Dup", "{package}.dup:Dup")
        """,
        )
    result = run(
        tmp_path,
        "from iron.core import registry; registry.operator_names()",
        IRON_PLUGINS="first,second",
    )
    assert result.returncode != 0
    assert (
        "RegistryError: operator 'Dup' is registered by both plugin 'first' and plugin 'second'"
        in result.stderr
    )


def test_allow_and_disable_lists(tmp_path):
    make_distribution(tmp_path, "lazy-family", "lazyfam", FAMILY_PLUGIN, modules=("Alpha", "Beta"))
    code = "from iron.core import registry; print(registry.operator_names(), [p.status for p in registry.plugins() if p.name == 'lazyfam'])"
    assert (
        run(tmp_path, code, IRON_PLUGINS="lazyfam").stdout.strip() == "['Alpha', 'Beta'] ['loaded']"
    )
    assert (
        run(tmp_path, code, IRON_PLUGINS="lazy-family").stdout.strip()
        == "['Alpha', 'Beta'] ['loaded']"
    )
    assert run(tmp_path, code, IRON_PLUGINS="other").stdout.strip() == "[] ['disabled']"
    disabled = run(tmp_path, code, IRON_PLUGINS="", IRON_DISABLE_PLUGINS="*")
    assert disabled.stdout.strip() == "[] ['disabled']"


def test_plugins_register_devices(tmp_path):
    make_distribution(
        tmp_path,
        "future-npu",
        "future",
        """
        from iron.core import Device, hookimpl

        @hookimpl
        def iron_register_devices(register):
            register(Device(name="npu9", arch="aie9", max_columns=16, columns=16))
    """,
    )
    result = run(
        tmp_path,
        "from iron.core import Device; print(Device.from_name('npu9', columns=12).key)",
        IRON_PLUGINS="future",
    )
    assert result.stdout.strip() == "npu9:aie9:12x4", result.stderr


def test_unknown_operator_suggests_close_names(family):
    result = run(
        family,
        "from iron.core import registry; registry.get_operator('Alpah')",
        IRON_PLUGINS="lazyfam",
    )
    assert "KeyError: \"unknown operator 'Alpah'; did you mean Alpha?" in result.stderr


def test_unknown_operator_in_this_process():
    with pytest.raises(KeyError, match="unknown operator 'NoSuchOperator'"):
        registry.get_operator("NoSuchOperator")


# ---- the third-party fixture distributions (installed by `nox -s iron-core`) ----


def test_installed_third_party_plugin_is_found():
    require_distribution("iron-example-plugin")
    assert registry.operator_names(family="example") == ["Offset", "Scale"]
    assert registry.get_operator("Scale").__module__ == "iron_example_plugin.scale"
    listing = subprocess.run(
        [sys.executable, "-m", "iron.core.cli", "ops", "list"], capture_output=True, text=True
    )
    assert listing.returncode == 0
    rows = {line.split()[0]: line.split()[1] for line in listing.stdout.splitlines()[1:]}
    assert rows["Scale"] == "example" and rows["Offset"] == "example"


def test_installed_broken_plugin_is_reported_and_the_rest_work():
    require_distribution("iron-broken-plugin")
    statuses = {p.name: (p.distribution, p.status, p.error) for p in registry.plugins()}
    assert statuses["broken"] == (
        "iron-broken-plugin",
        "failed",
        "RuntimeError: this plugin is broken on purpose",
    )
    shown = subprocess.run(
        [sys.executable, "-m", "iron.core.cli", "plugins"], capture_output=True, text=True
    )
    assert (
        "broken" in shown.stdout
        and "failed" in shown.stdout
        and "broken on purpose" in shown.stderr
    )


# ---- plugins registered in this process ----


class Counter:
    """A backend factory (called with the owning session): each instance is counted."""

    name = "counter"
    made = 0

    def __init__(self, session):
        Counter.made += 1


class InProcess:
    """A plugin as an object: an operator, a device and a backend."""

    @staticmethod
    @hookimpl
    def iron_register_operators(register):
        register("Square", "core_fakes:Square", summary="y = x * x")

    @staticmethod
    @hookimpl
    def iron_register_devices(register):
        register(Device(name="npu7", arch="aie2p", max_columns=2, columns=2))

    @staticmethod
    @hookimpl
    def iron_register_backends(register):
        register("counter", "test_registry:Counter")
        register("misnamed", "test_registry:Counter")


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setitem(sys.modules, "test_registry", sys.modules[__name__])
    registry.register_plugin(InProcess, name="in-process")
    yield
    registry.unregister_plugin("in-process")


def test_a_plugin_registered_in_process_loads_like_an_installed_one(in_process):
    import core_fakes

    assert registry.get_operator("Square") is core_fakes.Square
    assert registry.operator_entry("Square").family == "in-process"
    assert Device.from_name("npu7", columns=1).key == "npu7:aie2p:1x4"
    info = {p.name: p for p in registry.plugins()}["in-process"]
    assert (info.distribution, info.status) == ("(in process)", "loaded")
    with pytest.raises(ValueError, match="a plugin named 'in-process' is already registered"):
        registry.register_plugin(InProcess, name="in-process")


def test_unregistering_removes_what_the_plugin_offered(in_process):
    assert "Square" in registry.operator_names()
    registry.unregister_plugin("in-process")
    assert "Square" not in registry.operator_names() and "npu7" not in registry.devices()
    with pytest.raises(KeyError, match="no in-process plugin 'in-process'"):
        registry.unregister_plugin("in-process")
    registry.register_plugin(InProcess, name="in-process")  # for the fixture's teardown


def test_the_registry_keeps_backend_entries_never_instances(in_process):
    """Backends are made by whoever owns them, from the entry's factory;
    the registry holds no instance (no process-wide runtime state)."""
    entry = registry.backend_entry("counter")
    made = Counter.made
    first, second = entry.load()(None), entry.load()(None)
    assert first is not second and Counter.made == made + 2
    assert registry.backend_entry("counter") is entry and Counter.made == made + 2
    with pytest.raises(KeyError, match=r"unknown backend .nope.; registered backends: .*counter"):
        registry.backend_entry("nope")
    assert not hasattr(registry, "backend")


def test_iron_core_modules_import_without_a_cycle():
    """device -> registry is the only edge between them: the registry loads
    iron-core's own plugin (which names the devices) by module name."""
    root = Path(__file__).parents[1] / "src" / "iron" / "core"
    files = {p.stem: p for p in root.glob("*.py")} | {
        p.parent.name: p for p in root.glob("*/__init__.py")
    }
    files.pop("__init__")
    modules = set(files)
    edges = {}
    for name in modules:
        found = set()
        for node in ast.walk(ast.parse(files[name].read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "iron.core":
                found |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("iron.core."):
                found.add(node.module.split(".")[2])
        edges[name] = found
    assert "registry" in edges["device"] and "device" in edges["builtin"]

    def reaches(start, goal, seen=()):
        return any(
            n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in edges[start]
        )

    assert [m for m in sorted(modules) if reaches(m, m)] == []
