"""The README's "Writing a backend", as the fixture distribution
iron-example-backend (installed by `nox -s iron-dispatch`) ships it."""

import re
from pathlib import Path

import numpy as np
import pytest
from dispatch_fakes import N, Scale

from iron.core import bf16, registry
from iron.core.cli import main
from iron.core.testing import require_distribution
from iron.dispatch import Backend, get_backend, graph

HERE = Path(__file__).parent
PLUGIN = HERE / "plugins" / "iron-example-backend"
README = HERE.parent / "README.md"


@pytest.fixture(autouse=True)
def installed():
    require_distribution("iron-example-backend")


def test_the_readme_shows_the_plugin_as_it_is():
    section = README.read_text().split("## Writing a backend", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)
    shipped = {
        "backend.py": PLUGIN / "src" / "iron_example_backend" / "backend.py",
        "plugin.py": PLUGIN / "src" / "iron_example_backend" / "plugin.py",
    }
    for name, path in shipped.items():
        (code,) = [body for _, body in blocks if body.startswith(f"# {name}\n")]
        assert code.split("\n", 1)[1] == path.read_text(), name
    (toml,) = [body for kind, body in blocks if kind == "toml"]
    assert toml in (PLUGIN / "pyproject.toml").read_text()


def test_a_registered_backend_runs_graphs_and_counts_its_steps():
    assert registry.backends()["counting"].plugin == "example-backend"
    assert isinstance(get_backend("counting"), Backend)

    @graph(backend="counting")
    def twice(g, x):
        return g(Scale(N, 2.0), g(Scale(N, 0.5), x))

    counting = twice.backend  # the instance of the function's own session

    x = np.random.default_rng(0).standard_normal(N).astype(bf16)
    before = counting.steps_run
    got = twice(x)
    half = (x.astype(np.float32) * 0.5).astype(bf16)
    assert got.tobytes() == (half.astype(np.float32) * 2).astype(bf16).tobytes()
    assert counting.steps_run - before == 2

    @graph(backend="counting", mode="compare")
    def judged(g, x):
        return g(Scale(N), x)

    with pytest.raises(ValueError, match="backend 'counting' has no mode 'compare'"):
        judged(x)


def test_doctor_and_auto_know_it(capsys, monkeypatch):
    main(["doctor"])
    assert "backend counting: available" in capsys.readouterr().out
    monkeypatch.setenv("IRON_BACKEND", "counting")
    assert get_backend().name == "counting"
