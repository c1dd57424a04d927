"""Every code block of a README, run as a test: documentation that drifts
from the code fails CI instead of a reader.

A fenced block's info string is its language and then options::

    ```python            run in a fresh module, in a scratch folder
    ```sh                run by bash (-e, -o pipefail) in a scratch folder
    ```toml              parsed
    ```text              not code: an output, a synopsis, a tree
    ```text output       the output the code block just before it prints

and the options `slow` (marked slow: the slow session runs it), `checkout`
(a shell block run in a copy of the repository instead of an empty
folder, as a reader runs it in a clone), `ci` (the commands CI itself
runs, such as `uv run nox`: checked by the caller, never run inside the
tests they start) and `with:NAME` (the test's fixture NAME prepares the
scratch folder first and is left after the block: a model directory the
commands name, a server a client block talks to). A block without a
language is refused: every block says what it is.

Each block is self-contained: a Python block gets a module of its own, a
shell block a folder of its own, with ``IRON_CACHE_HOME`` inside it so
nothing reaches the user's cache. ``uv run`` at the start of a command
means "in the project's environment", which a test already is: it is
dropped, and the interpreter's scripts come first on PATH. An expected
output is compared line by line with trailing spaces dropped; ``...``
stands for any text (as doctest's ELLIPSIS), and a `normalise` function
given by the test is applied to both sides first (for figures that change
from run to run).

Why not a plugin from the index: pytest-markdown-docs and pytest-examples
run Python blocks only, and these READMEs are half shell commands; one
small collector runs both, compares outputs and works the same in every
package's tests.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "toml": "toml",
             "text": "text"}  # fmt: skip
OPTIONS = {"slow", "output", "checkout", "ci"}
FENCE = re.compile(r"^```(.*)$")
#: what a shell block may take before it is stopped (a whole demo takes a minute)
SHELL_TIMEOUT = 900
#: left out of a checkout copy: what a build or a test run leaves, and git's own
CHECKOUT_IGNORED = (".git", ".venv", ".nox", "dist", "build", "__pycache__", "*.egg-info",
                    ".pytest_cache", ".ruff_cache", ".hypothesis")  # fmt: skip


__all__ = ["Block", "ReadmeError", "matches", "readme_blocks", "readme_params", "run_block"]


class ReadmeError(ValueError):
    """A README block that is malformed, or did not do what it says."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language and options, its text,
    and the output the block after it expects (a `text output` block)."""

    path: Path
    line: int
    language: str
    options: frozenset[str]
    code: str
    expected: str | None = None

    @property
    def name(self) -> str:
        """`README.md:12` for the repository's own, `iron-core/README.md:12` for a package's."""
        folder = self.path.parent
        where = "" if (folder / "uv.lock").is_file() else f"{folder.name}/"
        return f"{where}{self.path.name}:{self.line}"

    def __str__(self) -> str:
        return f"{self.name} ({self.language})"


def readme_blocks(path: str | Path) -> list[Block]:
    """Every fenced block of the Markdown file `path` that is code, each
    with the output the `text output` block after it expects."""
    path = Path(path)
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    at = 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        words = opening[1].split()
        where = f"{path}:{at + 1}"
        if not words or words[0] not in LANGUAGES:
            raise ReadmeError(
                f"{where}: a block must name its language ({', '.join(sorted(LANGUAGES))}), "
                f"not {opening[1]!r}"
            )
        unknown = {w for w in words[1:] if w not in OPTIONS and not w.startswith("with:")}
        if unknown:
            raise ReadmeError(
                f"{where}: unknown option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}"
            )
        end = next((i for i in range(at + 1, len(lines)) if lines[i] == "```"), None)
        if end is None:
            raise ReadmeError(f"{where}: the block is never closed")
        language, options = LANGUAGES[words[0]], frozenset(words[1:])
        text = "\n".join(lines[at + 1 : end]) + "\n"
        if "output" in options:
            if language != "text" or not blocks or blocks[-1].expected is not None:
                raise ReadmeError(f"{where}: a `text output` block follows the code it shows")
            previous = blocks.pop()
            blocks.append(Block(**{**previous.__dict__, "expected": text}))
        elif language != "text":
            blocks.append(Block(path, at + 1, language, options, text))
        at = end + 1
    return blocks


def readme_params(*paths: str | Path) -> list:
    """`pytest.param`s of every code block of `paths`, slow ones marked slow."""
    import pytest

    return [
        pytest.param(
            block, id=block.name, marks=[pytest.mark.slow] if "slow" in block.options else []
        )
        for path in paths
        for block in readme_blocks(path)
    ]


def run_block(
    block: Block,
    scratch: Path,
    *,
    checkout: Path | None = None,
    ci: Callable[[Block], None] | None = None,
    fixtures: Mapping[str, Callable[[Path], AbstractContextManager]] | None = None,
    normalise: Callable[[str], str] = lambda text: text,
) -> str:
    """Run `block` in the empty folder `scratch` (a `checkout` block in a
    copy of the repository at `checkout`) and return what it printed;
    raise `ReadmeError` when it fails or prints other than it expects.
    `ci` checks a `ci` block; `fixtures[NAME](scratch)` is a context
    entered around a block with the option `with:NAME`."""
    needed = sorted(o.removeprefix("with:") for o in block.options if o.startswith("with:"))
    missing = [n for n in needed if n not in (fixtures or {})]
    if missing:
        raise ReadmeError(f"{block}: no fixture {', '.join(missing)} was given")
    with contextlib.ExitStack() as stack:
        for name in needed:
            stack.enter_context(fixtures[name](scratch))
        return _run(block, scratch, checkout, ci, normalise)


def _run(block: Block, scratch: Path, checkout, ci, normalise) -> str:
    if "ci" in block.options:
        if ci is None:
            raise ReadmeError(f"{block}: a ci block needs its caller's check")
        ci(block)
        return ""
    if block.language == "toml":
        _parse_toml(block)
        return ""
    if block.language == "python":
        printed = _run_python(block, scratch)
    else:
        if "checkout" in block.options:
            if checkout is None:
                raise ReadmeError(f"{block}: a checkout block needs the repository's folder")
            scratch = scratch / checkout.name
            shutil.copytree(checkout, scratch, ignore=shutil.ignore_patterns(*CHECKOUT_IGNORED))
        printed = _run_shell(block, scratch)
    if block.expected is not None and not matches(normalise(printed), normalise(block.expected)):
        raise ReadmeError(
            f"{block}: printed other than the README shows\n--- README\n{block.expected}"
            f"--- printed\n{printed}"
        )
    return printed


def matches(printed: str, expected: str) -> bool:
    """Whether `printed` is `expected`, line ends' spaces aside, with each
    ``...`` in `expected` standing for any text."""

    def lines(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())

    pattern = ".*?".join(re.escape(part) for part in lines(expected).split("..."))
    return re.fullmatch(pattern, lines(printed), re.S) is not None


def _run_python(block: Block, scratch: Path) -> str:
    module = types.ModuleType(f"readme_{abs(hash((str(block.path), block.line)))}")
    module.__file__ = str(scratch / "readme_block.py")
    sys.modules[module.__name__] = module  # a plugin registers itself by its module
    out = io.StringIO()
    cwd = Path.cwd()
    try:
        os.chdir(scratch)
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, f"{block.path}:{block.line}", "exec"), module.__dict__)
    finally:
        os.chdir(cwd)
        del sys.modules[module.__name__]
    return out.getvalue()


def _shell_script(code: str) -> str:
    """The block as bash runs it here: ``uv run [--package P]`` dropped at
    the start of a command (the test runs in the project's environment)."""
    return re.sub(r"(^|[;&|(]\s*)uv run (?:--package \S+ )?", r"\1", code, flags=re.M)


def _run_shell(block: Block, folder: Path) -> str:
    env = dict(os.environ)
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")])
    env["IRON_CACHE_HOME"] = str(folder / ".iron-cache")
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in the order they happen
    env.pop("IRON_BACKEND", None)
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", _shell_script(block.code)],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=SHELL_TIMEOUT,
        start_new_session=True,  # its own process group, ended with it
    )
    if result.returncode != 0:
        raise ReadmeError(f"{block}: exit status {result.returncode}\n{result.stdout}")
    return result.stdout


def _parse_toml(block: Block) -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import pytest

        tomllib = pytest.importorskip("tomli", reason="TOML blocks parse with tomllib (3.11+)")
    try:
        tomllib.loads(block.code)
    except tomllib.TOMLDecodeError as error:
        raise ReadmeError(f"{block}: not TOML: {error}") from None
