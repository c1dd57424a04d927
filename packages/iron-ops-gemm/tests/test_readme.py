"""The README's examples run as written (docs that drift are worse than none)."""

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    for block in blocks:  # later blocks may build on earlier ones, as a reader would
        exec(compile(block, str(README), "exec"), namespace)
