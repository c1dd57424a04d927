"""The README's Python example runs as written, and its command table is the CLI's."""

import re
from pathlib import Path

from bigram import APP

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["prompt"] == "<s><|user|>Why does iron rust?<|assistant|>"
    assert namespace["token"] in range(4)


def test_readme_commands_are_the_cli_commands():
    listed = set(re.findall(r"^\| `([a-z-]+) ", README.read_text(), re.M))
    parser = APP.parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    assert listed == set(commands.choices)
