"""Synthetic Llama checkpoints: a real HF-layout model directory with random weights.

`make_synthetic(dir)` writes config.json (llama3 RoPE scaling, grouped-query
attention, tied embeddings), model.safetensors (bf16, random from the seed)
and tokenizer.json (a byte-level BPE trained with `tokenizers` on the text
bundled with iron-lm). Same arguments, same bytes. The weights carry no
knowledge: generated text is fluent only at the byte level. The writing
itself (private folder, lock, rename) is iron-lm's `SyntheticRecipe`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import tokenizers

from iron.llama.config import Llama3RopeScaling, LlamaConfig
from iron.llama.weights import LlamaWeights
from iron.lm.checkpoint import LazyTensor
from iron.lm.synthetic import SyntheticRecipe, corpus, normal_tensor, preset_dims
from iron.lm.synthetic import train_tokenizer as train_bpe

__all__ = [
    "PRESETS",
    "RECIPE",
    "corpus",
    "ensure_synthetic",
    "make_synthetic",
    "synthetic_config",
    "synthetic_tensors",
    "train_tokenizer",
]

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
TOKENIZER_VOCAB = 512
PRESETS: dict[str, dict[str, int]] = {
    # the smallest shapes the IRON graph takes: MHA's heads are 64 wide
    "tiny": dict(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        vocab_size=TOKENIZER_VOCAB,
    ),
    # Llama 3.2 1B's dimensions
    "1b-shaped": dict(
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
    ),
}


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB) -> tokenizers.Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens (ids 0 and 1 are BOS and
    EOS) trained on iron-lm's bundled text; its encode adds BOS, like Llama 3's."""
    return train_bpe(vocab_size, [BOS, EOS], bos=BOS)


def synthetic_config(preset: str = "tiny", layers: int | None = None) -> LlamaConfig:
    """The LlamaConfig of a preset, with `layers` decoder layers when given."""
    dims = preset_dims(PRESETS, preset, layers)
    return LlamaConfig(
        **dims,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling=Llama3RopeScaling(32.0, 1.0, 4.0, 8192),
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        bos_token_id=0,
        eos_token_ids=(1,),
    )


def synthetic_tensors(config: LlamaConfig, seed: int = 0) -> dict[str, LazyTensor]:
    """Random bf16 tensors for every name `config` implies, each drawn from its
    own generator (seeded by `seed` and the name), so a tensor does not depend
    on which others are written. Scales: matrices N(0, 1/in) keep activations
    near unit size; the embedding N(0, 4/hidden) gives tied-head logits a
    spread of about 2; o and down are 4x larger so each layer's output
    outweighs the token's own embedding in the residual (else the tied head
    mostly predicts the input token back); norm weights N(1, 0.1) so a
    dropped norm weight shows."""
    tensors = {}
    for name, shape in LlamaWeights.expected_shapes(config).items():
        if len(shape) == 1:
            mean, std = 1.0, 0.1
        elif name == "model.embed_tokens.weight":
            mean, std = 0.0, 2.0 / np.sqrt(shape[1])
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            mean, std = 0.0, 4.0 / np.sqrt(shape[1])
        else:
            mean, std = 0.0, 1.0 / np.sqrt(shape[1])
        tensors[name] = normal_tensor(name, shape, mean, std, seed)
    return tensors


RECIPE = SyntheticRecipe(
    presets=tuple(PRESETS),
    config=synthetic_config,
    read_config=LlamaConfig.from_file,
    expected_shapes=LlamaWeights.expected_shapes,
    tensors=synthetic_tensors,
    files={"tokenizer.json": lambda: train_tokenizer().to_str(pretty=True)},
)


def make_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write config.json, tokenizer.json and model.safetensors of a synthetic
    `preset` model ("tiny" or "1b-shaped") into `directory` and return it.
    `progress(name)` is called after each tensor is written.

    The files are written into a private folder beside `directory` and
    renamed into place whole, under a lock (`.NAME.lock` beside it), so an
    interrupted or failed run leaves `directory` as it was and two writers
    never share a file. An existing `directory` is replaced only when it
    holds nothing but those three files (a model this wrote); anything else
    is refused, naming what is there."""
    return RECIPE.make(directory, preset, layers, seed, progress)


def ensure_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> bool:
    """Make sure `directory` holds the synthetic model of these arguments,
    writing it (`make_synthetic`) when it is missing, incomplete, corrupt or
    another recipe. Returns whether it was written."""
    return RECIPE.ensure(directory, preset, layers, seed, progress)
