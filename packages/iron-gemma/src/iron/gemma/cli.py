"""The `iron-gemma` command line: iron-lm's app CLI (`demo`, `generate`,
`chat`, `serve`, `check-accuracy`, `check-determinism`, `make-synthetic`)
for Gemma 4, with its own flag `--weights bf16|bfp16`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from iron.gemma.config import GemmaConfig
from iron.gemma.model import Model
from iron.gemma.reference import Oracle
from iron.gemma.synthetic import RECIPE
from iron.lm import OracleModel
from iron.lm.cli import App, ModelFlag, SyntheticModels

__all__ = ["APP", "main"]


def _describe(config: GemmaConfig) -> str:
    full = sum(kind == "full_attention" for kind in config.layer_types)
    return (
        f"a tiny synthetic Gemma 4 ({config.num_hidden_layers} layers: "
        f"{config.num_hidden_layers - full} sliding, {full} full, the last "
        f"{config.num_kv_shared_layers} KV-shared; hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads over {config.num_key_value_heads} kv head(s))"
    )


APP = App(
    name="iron-gemma",
    title="Gemma 4 text (E2B / E4B) on IRON's FLM operators.",
    model=Model,
    oracle=lambda directory: OracleModel(Oracle.from_pretrained(directory)),
    synthetic=SyntheticModels.of(RECIPE),
    describe=_describe,
    real_model="For Gemma 4 E2B: iron-gemma generate --model DIR --prompt TEXT (see the README).",
    model_help="a Hugging Face Gemma 4 directory (Gemma4ForCausalLM or "
    "Gemma4ForConditionalGeneration): config.json, model.safetensors, tokenizer.json",
    demo_model="gemma-tiny",
    model_flags=(
        ModelFlag(
            ("--weights",),
            "weight_format",
            {
                "choices": ("bf16", "bfp16"),
                "default": "bf16",
                "help": "the weights as the checkpoint has them (bf16), or packed once at "
                "load into the FLM family's bfp16ebs8 (bfp16)",
            },
        ),
    ),
    distribution="iron-npu-gemma",
)


def main(argv: Sequence[str] | None = None) -> int:
    return APP.main(argv)


if __name__ == "__main__":
    sys.exit(main())
