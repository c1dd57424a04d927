"""The README's Python example runs as written, and its commands are the CLI's."""

import re
import shlex
from pathlib import Path

from iron.llama.cli import _parser

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs(capsys):
    (block,) = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    model, report = namespace["model"], namespace["report"]
    assert report.passed and len(report.kl) == 16
    assert len(namespace["drawn"]) <= 20 and model.metrics.backend == "reference"
    assert "time to first token" in capsys.readouterr().out


def test_readme_commands_parse():
    text = README.read_text()
    commands = set(re.findall(r"^iron-llama ([a-z-]+)(?: |$)", text, re.M))
    assert commands == {
        "demo", "generate", "chat", "serve", "check-accuracy", "check-determinism",
        "make-synthetic",
    }  # fmt: skip
    lines = re.findall(
        r"^iron-llama (?:generate|chat|serve|check-\w+) (?:--model|-m) llama-3\.2-1b.*$",
        text,
        re.M,
    )
    assert len(lines) == 5
    for line in lines:
        args = _parser().parse_args(shlex.split(line)[1:])
        assert str(args.model).startswith("llama-3.2-1b")
