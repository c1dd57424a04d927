"""A second model app, as small as one can be: a bigram model (the next
token's logits are the head times the last token's embedding) on iron-lm.

It is what an app gives iron-lm and nothing more: a config read from
config.json, an operator and a graph, the weight names, a float32 oracle,
synthetic checkpoints, and the `App` that makes its command line. The
tests run the whole scaffold through it (every command, the server), and
`python bigram.py ...` is its console script.

Its own flag, `--seconds-per-token S` (an `iron.lm.cli.ModelFlag`), makes
each decode sleep, so a test can hold the model busy as long as it needs.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Operator, Tolerance, bf16
from iron.dispatch import GraphFunction, graph
from iron.lm import Checkpoint, CheckpointError, GraphModel
from iron.lm.cli import App, ModelFlag, SyntheticModels
from iron.lm.config import is_int, read_config, require, token_ids
from iron.lm.protocols import OracleModel
from iron.lm.synthetic import (
    holds_recipe,
    locked,
    normal_tensor,
    recipe_metadata,
    train_tokenizer,
    write_model_dir,
)

BOS, EOS, HEADER, END_HEADER, EOT = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
SPECIAL = (BOS, EOS, HEADER, END_HEADER, EOT)  # ids 0..4
VOCAB, HIDDEN = 384, 64
#: the Llama 3 Instruct chat template, as Meta ships it
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
WEIGHTS = ("model.embed_tokens.weight", "lm_head.weight")


@attrs.frozen
class MatVec(Operator):
    """y = A @ x for A (M, K) bf16: float32 sums, one rounding per output."""

    M: int
    K: int

    @staticmethod
    def arg_spec(M, K):
        return [ArgSpec("A", (M, K), bf16, IN), ArgSpec("x", (K,), bf16, IN),
                ArgSpec("y", (M,), bf16, OUT)]  # fmt: skip

    def reference(self, A, x):
        return (A.astype(np.float32) @ x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@dataclass(frozen=True)
class BigramConfig:
    vocab_size: int
    hidden_size: int
    max_position_embeddings: int = 512
    bos_token_id: int | None = 0
    eos_token_ids: tuple[int, ...] = (1,)
    num_hidden_layers = 1  # what make-synthetic's summary counts

    @classmethod
    def from_file(cls, path: str | Path) -> BigramConfig:
        return read_config(path, cls.from_dict)

    @classmethod
    def from_dict(cls, data: dict) -> BigramConfig:
        for name in ("vocab_size", "hidden_size", "max_position_embeddings"):
            require(
                name,
                data.get(name),
                is_int(data.get(name)) and data[name] > 0,
                "must be a positive integer",
            )
        vocab = data["vocab_size"]
        bos = token_ids("bos_token_id", data.get("bos_token_id"), vocab)
        return cls(
            vocab,
            data["hidden_size"],
            data["max_position_embeddings"],
            bos[0] if bos else None,
            token_ids("eos_token_id", data.get("eos_token_id"), vocab),
        )

    def to_dict(self) -> dict:
        return {
            "model_type": "bigram",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids),
        }


def expected_shapes(config: BigramConfig) -> dict[str, tuple[int, int]]:
    return dict.fromkeys(WEIGHTS, (config.vocab_size, config.hidden_size))


def load_weights(checkpoint: Checkpoint, config: BigramConfig) -> dict[str, np.ndarray]:
    expected = expected_shapes(config)
    problems = [f"missing tensor {n!r}" for n in expected if n not in checkpoint]
    problems += [
        f"tensor {n!r} has shape {checkpoint.info(n).shape}, the config needs {shape}"
        for n, shape in expected.items()
        if n in checkpoint and checkpoint.info(n).shape != shape
    ]
    if problems:
        raise CheckpointError("checkpoint does not match the config: " + "; ".join(problems))
    return {name: checkpoint[name] for name in expected}


class Model(GraphModel):
    config_class = BigramConfig

    def __init__(self, config, weights, tokenizer=None, *, seconds_per_token=0.0, **options):
        super().__init__(config, weights, tokenizer, **options)
        self.seconds_per_token = seconds_per_token

    @classmethod
    def load_weights(cls, checkpoint, config):
        return load_weights(checkpoint, config)

    def build_graph(self, backend, device) -> GraphFunction:
        config, head = self.config, self.weights["lm_head.weight"]

        def forward(g, x):
            logits = g(MatVec(M=config.vocab_size, K=config.hidden_size),
                       g.weight("lm_head.weight", head), x.reshape(config.hidden_size))  # fmt: skip
            return logits

        return graph(forward, name="bigram", backend=backend, device=device)

    def graph_weights(self):
        return {"lm_head.weight": self.weights["lm_head.weight"]}

    def ahead_versions(self):
        return [("decode", {"x": ((1, self.config.hidden_size), bf16)})]

    def run_prefill(self, ids):
        return self.forward(self.gather_rows(self.weights["model.embed_tokens.weight"], ids[-1:]))

    def run_decode(self, token, pos):
        time.sleep(self.seconds_per_token)
        return self.forward(self.gather_rows(self.weights["model.embed_tokens.weight"], [token]))


class Oracle:
    """float32 logits of every position, from the definition."""

    def __init__(self, weights: dict[str, np.ndarray]):
        self.weights = weights

    @classmethod
    def from_pretrained(cls, path):
        config = BigramConfig.from_file(path)
        return cls(load_weights(Checkpoint.open(path), config))

    def logits(self, token_ids):
        embedding = self.weights["model.embed_tokens.weight"].astype(np.float32)
        head = self.weights["lm_head.weight"].astype(np.float32)
        return embedding[np.asarray(token_ids)] @ head.T


def synthetic_config(preset: str = "tiny", layers: int | None = None) -> BigramConfig:
    if preset != "tiny":
        raise ValueError(f"make_synthetic: preset={preset!r} must be one of ['tiny']")
    if layers not in (None, 1):
        raise ValueError(f"make_synthetic: layers={layers!r}: a bigram model has one")
    return BigramConfig(VOCAB, HIDDEN, eos_token_ids=(1, SPECIAL.index(EOT)))


def _texts(config: BigramConfig) -> dict[str, str]:
    tokenizer_config = {"bos_token": BOS, "eos_token": EOT, "chat_template": LLAMA3_TEMPLATE}
    generation = {"bos_token_id": 0, "eos_token_id": list(config.eos_token_ids), "do_sample": True,
                  "temperature": 0.6, "top_p": 0.9}  # fmt: skip
    return {
        "config.json": json.dumps(config.to_dict(), indent=2),
        "tokenizer.json": train_tokenizer(config.vocab_size, SPECIAL, bos=BOS).to_str(),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2),
        "generation_config.json": json.dumps(generation, indent=2),
    }


def _tensors(config: BigramConfig, seed: int):
    std = 3.0 / np.sqrt(config.hidden_size)  # logits with a spread of a few units
    return {
        name: normal_tensor(name, shape, 0.0, std, seed)
        for name, shape in expected_shapes(config).items()
    }


def make_synthetic(directory, preset="tiny", layers=None, seed=0, progress=None) -> Path:
    config = synthetic_config(preset, layers)
    directory = Path(directory)
    with locked(directory):
        metadata = recipe_metadata(preset=preset, layers=layers, seed=seed)
        write_model_dir(directory, _texts(config), _tensors(config, seed), metadata, progress)
    return directory


def ensure_synthetic(directory, preset="tiny", layers=None, seed=0, progress=None) -> bool:
    directory = Path(directory)
    metadata = recipe_metadata(preset=preset, layers=layers, seed=seed)
    with locked(directory):
        if holds_recipe(directory, metadata, WEIGHTS):
            return False
    make_synthetic(directory, preset, layers, seed, progress)
    return True


SLOW = ModelFlag(
    ("--seconds-per-token",),
    "seconds_per_token",
    {"type": float, "default": 0.0, "metavar": "S", "help": "sleep in every decode"},
)
APP = App(
    name="iron-bigram",
    title="A bigram model on IRON (iron-lm's test app).",
    model=Model,
    oracle=lambda directory: OracleModel(Oracle.from_pretrained(directory)),
    synthetic=SyntheticModels(
        presets=("tiny",),
        config=synthetic_config,
        tensor_names=lambda config: list(WEIGHTS),
        make=make_synthetic,
        ensure=ensure_synthetic,
    ),
    describe=lambda config: f"a tiny synthetic bigram model (hidden {config.hidden_size})",
    real_model="There is no real bigram checkpoint: this app exists to test iron-lm.",
    model_help="a bigram model directory",
    demo_model="bigram",
    model_flags=[SLOW],
)

if __name__ == "__main__":
    sys.exit(APP.main())
