"""Every code block of every README (the root's and each package's) runs as
written, in a folder of its own, and prints what the README shows
(`iron.core.testing.readme` says how blocks are marked and run)."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from iron.core.testing.readme import readme_params, run_block

ROOT = Path(__file__).parents[1]
READMES = [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md"))]
#: what a ci block may run: the nox sessions (one per package folder, and these)
SESSIONS = {p.parent.name for p in ROOT.glob("packages/*/pyproject.toml")} | {
    "slow",
    "lint",
    "readmes",
    "bench",
}
#: a chat template in the form Llama 3's Instruct models ship, for the stand-in
#: of an Instruct checkpoint (the synthetic tokenizer spells the markers out)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"
    "\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def check_ci(block) -> None:
    """A ci block holds only `uv run nox [-s SESSION ...]` lines naming real sessions."""
    for line in block.code.splitlines():
        command = line.split("#")[0].strip()
        if not command:
            continue
        words = shlex.split(command)
        assert words[:3] == ["uv", "run", "nox"], f"{block}: {line!r} is not a nox run"
        named = [words[i + 1] for i, w in enumerate(words) if w == "-s"]
        assert set(named) <= SESSIONS, f"{block}: no nox session {set(named) - SESSIONS}"
    assert "uv run nox" in (ROOT / ".ci" / "run").read_text()


@contextlib.contextmanager
def llama_checkpoint(folder: Path):
    """A synthetic stand-in for the Llama 3.2 1B files, where the README names them."""
    from iron.llama import make_synthetic

    make_synthetic(folder / "llama-3.2-1b", preset="tiny", seed=0)
    yield


@contextlib.contextmanager
def llama_instruct_checkpoint(folder: Path):
    """...and for the Instruct files: the same with a chat template."""
    from iron.llama import make_synthetic

    directory = make_synthetic(folder / "llama-3.2-1b-instruct", preset="tiny", seed=0)
    config = {"bos_token": "<|begin_of_text|>", "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    yield


@contextlib.contextmanager
def llama_server(folder: Path):
    """`iron-llama serve` on the Instruct stand-in, at the README's address."""
    with llama_instruct_checkpoint(folder):
        command = [str(Path(sys.executable).parent / "iron-llama"), "-q", "serve", "-m",
                   "llama-3.2-1b-instruct", "--port", "8000", "--backend", "reference"]  # fmt: skip
        server = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen("http://127.0.0.1:8000/v1/models", timeout=1)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("iron-llama serve did not come up") from None
                    time.sleep(0.2)
            yield
        finally:
            server.terminate()
            server.wait(30)


FIXTURES = {
    "llama-3.2-1b": llama_checkpoint,
    "llama-3.2-1b-instruct": llama_instruct_checkpoint,
    "llama-server": llama_server,
}
#: figures that change from run to run: times, speeds, memory
VOLATILE = re.compile(r"\d[\d,]*(\.\d+)? ?(s|ms|MiB|GiB|tokens/s|ms/token)\b")


def normalise(text: str) -> str:
    """Output with its volatile figures, the cache's place and column padding masked."""
    text = VOLATILE.sub("#", text)
    text = re.sub(r"(in |into )\S+/models/", r"\1<cache>/models/", text)
    return re.sub(r"[ \t]+", " ", text)


@pytest.mark.parametrize("block", readme_params(*READMES))
def test_readme_block(block, tmp_path):
    run_block(block, tmp_path, checkout=ROOT, ci=check_ci, fixtures=FIXTURES, normalise=normalise)


def test_every_readme_has_code_and_only_known_blocks():
    for readme in READMES:
        assert [p for p in readme_params(readme)], f"{readme} has no code block"
