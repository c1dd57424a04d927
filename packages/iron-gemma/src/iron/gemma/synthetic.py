"""Synthetic Gemma 4 checkpoints: a real Gemma4ForCausalLM directory with random weights.

`make_synthetic(dir, preset)` writes config.json, model.safetensors (bf16,
random from the seed), tokenizer.json (a byte-level BPE trained on iron-lm's
bundled text, Gemma's special tokens first: <pad> 0, <eos> 1, <bos> 2,
<start_of_turn>, <end_of_turn>) and chat_template.jinja (Gemma's turn
format). Same arguments, same bytes. Presets:

- `tiny`: the smallest shapes the FLM operators take that still exercise
  every feature: 5 layers (sliding, sliding, full, then a KV-shared sliding
  and full one), head dims 128 / 256, a double-wide MLP on the shared
  layers, per-layer inputs, soft-capping, a window of 128;
- `e2b-shaped`: Gemma 4 E2B's text widths (hidden 1536, 8 heads over 1 KV
  head, head dims 256 / 512, MLP 6144 doubled on shared layers, per-layer
  inputs of 256, window 512, vocabulary 262144) with `layers` layers
  (default 35: 4 sliding + 1 full, x7, the last 20 KV-shared).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tokenizers

from iron.gemma.config import FULL, SLIDING, GemmaConfig
from iron.gemma.weights import GemmaWeights
from iron.lm.checkpoint import LazyTensor
from iron.lm.synthetic import SyntheticRecipe, normal_tensor, preset_dims
from iron.lm.synthetic import train_tokenizer as train_bpe

__all__ = [
    "PRESETS",
    "RECIPE",
    "ensure_synthetic",
    "make_synthetic",
    "synthetic_config",
    "synthetic_tensors",
]

SPECIAL = ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>")
BOS, END_OF_TURN = 2, 4
TOKENIZER_VOCAB = 512
#: Gemma's turn format (the template Gemma checkpoints ship, without tools or images)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

PRESETS: dict[str, dict] = {
    "tiny": dict(
        hidden_size=512,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=128,
        global_head_dim=256,
        intermediate_size=512,
        vocab_size=TOKENIZER_VOCAB,
        vocab_size_per_layer_input=TOKENIZER_VOCAB,
        hidden_size_per_layer_input=256,
        sliding_window=128,
        use_double_wide_mlp=True,
    ),
    "e2b-shaped": dict(
        hidden_size=1536,
        num_hidden_layers=35,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
        global_head_dim=512,
        intermediate_size=6144,
        vocab_size=262_144,
        vocab_size_per_layer_input=262_144,
        hidden_size_per_layer_input=256,
        sliding_window=512,
        use_double_wide_mlp=True,
    ),
}
#: E2B: the last 20 of 35 layers share KV
_E2B_SHARED = 20 / 35


def _layer_types(layers: int) -> tuple[str, ...]:
    """4 sliding layers then a full one, the last layer full."""
    kinds = [FULL if i % 5 == 4 else SLIDING for i in range(layers)]
    kinds[-1] = FULL
    return tuple(kinds)


def _shared(kinds: tuple[str, ...], wanted: int) -> int:
    """The most KV-shared last layers, up to `wanted`, that leave every
    shared layer's type an earlier layer computing KV."""
    for shared in range(min(wanted, len(kinds) - 1), 0, -1):
        if set(kinds[len(kinds) - shared :]) <= set(kinds[: len(kinds) - shared]):
            return shared
    return 0


def synthetic_config(preset: str = "tiny", layers: int | None = None) -> GemmaConfig:
    """The GemmaConfig of a preset, with `layers` decoder layers when given."""
    dims = preset_dims(PRESETS, preset, layers)
    n = dims["num_hidden_layers"]
    if preset == "tiny":
        kinds = ((SLIDING, SLIDING, FULL, SLIDING, FULL) * n)[:n]
        kinds = (*kinds[:-1], FULL)
        shared = _shared(kinds, 2 * n // 5)
    else:
        kinds = _layer_types(n)
        shared = _shared(kinds, round(n * _E2B_SHARED))
    return GemmaConfig(
        **dims,
        layer_types=kinds,
        num_kv_shared_layers=shared,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
        max_position_embeddings=131_072,
        bos_token_id=BOS,
        eos_token_ids=(1, END_OF_TURN),
        pad_token_id=0,
    )


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB) -> tokenizers.Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens, Gemma's special
    tokens first; its encode adds <bos>, like Gemma's."""
    return train_bpe(vocab_size, SPECIAL, bos="<bos>")


def _tokenizer_config() -> dict:
    return {
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "add_bos_token": True,
    }


def synthetic_tensors(config: GemmaConfig, seed: int = 0) -> dict[str, LazyTensor]:
    """Random bf16 tensors for every name `config` implies, each from its own
    generator (seeded by `seed` and the name). Scales: matrices N(0, 1/in);
    the embedding N(0, 4/hidden), so the scaled embedding has rms 2 and the
    tied head's logits a spread of about 2; the per-layer embedding
    N(0, 1/per_layer) (rms 1 once scaled); norm weights N(1, 0.1), q and k
    norms N(d^-1/4, 0.1 d^-1/4) (scores of order 1: attention scales by 1);
    the layer scalars N(1, 0.1)."""
    tensors = {}
    for name, shape in GemmaWeights.expected_shapes(config).items():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            scale = shape[0] ** -0.25
            mean, std = scale, 0.1 * scale
        elif len(shape) == 1:
            mean, std = 1.0, 0.1
        elif name == "model.embed_tokens.weight":
            mean, std = 0.0, 2.0 / np.sqrt(shape[1])
        elif name == "model.embed_tokens_per_layer.weight":
            mean, std = 0.0, 1.0 / np.sqrt(config.per_layer)
        else:
            mean, std = 0.0, 1.0 / np.sqrt(shape[1])
        tensors[name] = normal_tensor(name, shape, mean, std, seed)
    return tensors


RECIPE = SyntheticRecipe(
    presets=tuple(PRESETS),
    config=synthetic_config,
    read_config=GemmaConfig.from_file,
    expected_shapes=GemmaWeights.expected_shapes,
    tensors=synthetic_tensors,
    files={
        "tokenizer.json": lambda: train_tokenizer().to_str(pretty=True),
        "tokenizer_config.json": lambda: json.dumps(_tokenizer_config(), indent=2) + "\n",
        "chat_template.jinja": lambda: CHAT_TEMPLATE,
    },
)


def make_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a synthetic `preset` model ("tiny" or "e2b-shaped") into
    `directory` and return it; `progress(name)` after each tensor. Written
    whole or not at all, under a lock (iron-lm's `SyntheticRecipe`)."""
    return RECIPE.make(directory, preset, layers, seed, progress)


def ensure_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> bool:
    """Make sure `directory` holds the synthetic model of these arguments,
    writing it when missing, incomplete or another recipe. Returns whether
    it was written."""
    return RECIPE.ensure(directory, preset, layers, seed, progress)
