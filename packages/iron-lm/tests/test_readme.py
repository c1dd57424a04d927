"""The README's command table is the CLI's; its code blocks run in the
workspace's README tests (`nox -s readmes`)."""

import re
from pathlib import Path

from bigram import APP

README = Path(__file__).parents[1] / "README.md"


def test_readme_commands_are_the_cli_commands():
    listed = set(re.findall(r"^\| `([a-z-]+) ", README.read_text(), re.M))
    parser = APP.parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    assert listed == set(commands.choices)
