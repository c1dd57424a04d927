"""The README's commands are the CLI's; its code blocks run in the
workspace's README tests (`nox -s readmes`)."""

import re
import shlex
from pathlib import Path

from iron.llama.cli import _parser

README = Path(__file__).parents[1] / "README.md"


def test_readme_commands_parse():
    text = README.read_text()
    commands = set(re.findall(r"^iron-llama ([a-z-]+)(?: |$)", text, re.M))
    assert commands == {
        "demo", "generate", "chat", "serve", "check-accuracy", "check-determinism",
        "plan", "make-synthetic",
    }  # fmt: skip
    lines = re.findall(
        r"^(?:echo .* \| )?iron-llama (?:generate|chat|serve|check-\w+|plan) (?:--model|-m) llama-3\.2-1b.*$",
        text,
        re.M,
    )
    assert len(lines) == 6
    for line in lines:
        words = shlex.split(line.split("| ")[-1].split("&")[0].split("#")[0])
        args = _parser().parse_args(words[1:])
        assert str(args.model).startswith("llama-3.2-1b")
