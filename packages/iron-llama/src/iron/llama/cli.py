"""The `iron-llama` command line: iron-lm's app CLI (`demo`, `generate`,
`chat`, `serve`, `check-accuracy`, `check-determinism`, `make-synthetic`)
for Llama."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from iron.llama.config import LlamaConfig
from iron.llama.model import Model
from iron.llama.reference import Oracle, OracleModel
from iron.llama.synthetic import RECIPE
from iron.lm.cli import App, SyntheticModels, printable, side_by_side
from iron.lm.synthetic import paragraphs

__all__ = ["APP", "demo_dir", "main", "paragraphs", "printable", "side_by_side"]


def _describe(config: LlamaConfig) -> str:
    return (
        f"a tiny synthetic Llama ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {config.num_attention_heads} heads over "
        f"{config.num_key_value_heads} kv heads)"
    )


APP = App(
    name="iron-llama",
    title="Llama 3.2 1B on IRON.",
    model=Model,
    oracle=lambda directory: OracleModel(Oracle.from_pretrained(directory)),
    synthetic=SyntheticModels.of(RECIPE),
    describe=_describe,
    real_model="For Llama 3.2 1B: iron-llama generate --model DIR --prompt TEXT (see the README).",
    model_help="a Hugging Face Llama directory: config.json, model.safetensors, tokenizer.json",
    distribution="iron-npu-llama",
)


def demo_dir() -> Path:
    """Where `demo` keeps its synthetic model."""
    return APP.demo_dir()


def _parser():
    return APP.parser()


def main(argv: Sequence[str] | None = None) -> int:
    return APP.main(argv)


if __name__ == "__main__":
    sys.exit(main())
