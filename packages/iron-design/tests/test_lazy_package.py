"""Importing iron.design imports none of its modules: the `iron` command
loads its plugin without paying for them."""

import subprocess
import sys

from iron.core.testing import modules_imported_by


def test_loading_the_plugins_imports_no_module_of_the_package():
    loaded = modules_imported_by(
        "from iron.core import registry; registry.plugins()", "iron.design"
    )
    assert loaded == {"iron.design", "iron.design.plugin"}


def test_a_name_that_shadows_its_module_stays_the_export():
    """`simulate`, `lower`, `check`, `place` and `usage` are functions of
    modules of the same names: importing those modules leaves the names."""
    code = (
        "import iron.design.simulate, iron.design.lower, iron.design.check\n"
        "from iron.design.place import place\n"
        "from iron.design import check, lower, simulate\n"
        "import iron.design as d\n"
        "print(all(callable(f) and f.__module__ == 'iron.design.' + f.__name__ "
        "for f in (check, lower, simulate, d.place, d.usage)))\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.split() == ["True"]
