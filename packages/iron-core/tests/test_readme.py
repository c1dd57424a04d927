"""The README's examples run as written (docs that drift are worse than none)."""

import re
import sys
import types
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_python_examples_run(monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 6 and any("@hookimpl" in b for b in blocks)
    # later blocks build on earlier ones, as a reader would, in one module
    module = types.ModuleType("iron_core_readme")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in blocks:
        exec(compile(block, str(README), "exec"), module.__dict__)
    assert "Shift" in module.__dict__ and "test_conformance" in module.__dict__
