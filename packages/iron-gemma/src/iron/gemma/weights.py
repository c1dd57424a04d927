"""Strict Gemma 4 weight loading: checkpoint tensor names -> `GemmaWeights`.

Names are those of `Gemma4ForCausalLM` (`model.layers.3.self_attn.q_proj.weight`);
a Gemma4ForConditionalGeneration checkpoint is opened at its
`model.language_model.` prefix, renamed to `model.`, so its vision and audio
towers are never read. Every tensor the config implies must be present with
its exact shape, and nothing else may be, except the key/value tensors of
KV-shared layers, which transformers ignores and so does this (they are
never read). Matrices stay [out, in] as shipped: the fields are the
checkpoint's own zero-copy views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iron.gemma.config import GemmaConfig
from iron.lm.checkpoint import Checkpoint, check_weights

__all__ = ["CONDITIONAL_PREFIX", "GemmaWeights", "layer_name"]

#: where Gemma4ForConditionalGeneration keeps the language model's tensors
CONDITIONAL_PREFIX = "model.language_model."
#: tensors a KV-shared layer may carry that transformers never reads
_SHARED_IGNORED = ("self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight")


def layer_name(layer: int, key: str) -> str:
    return f"model.layers.{layer}.{key}"


def layer_shapes(config: GemmaConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Short name (under model.layers.i.) -> shape of layer i's tensors."""
    hidden, d = config.hidden_size, config.layer_head_dim(i)
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    mlp, per_layer = config.intermediate(i), config.per_layer
    shapes = {
        "input_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (heads * d, hidden),
        "self_attn.q_norm.weight": (d,),
        "self_attn.o_proj.weight": (hidden, heads * d),
        "post_attention_layernorm.weight": (hidden,),
        "pre_feedforward_layernorm.weight": (hidden,),
        "mlp.gate_proj.weight": (mlp, hidden),
        "mlp.up_proj.weight": (mlp, hidden),
        "mlp.down_proj.weight": (hidden, mlp),
        "post_feedforward_layernorm.weight": (hidden,),
        "layer_scalar": (1,),
    }
    if not config.is_kv_shared(i):
        shapes["self_attn.k_proj.weight"] = (kv * d, hidden)
        shapes["self_attn.v_proj.weight"] = (kv * d, hidden)
        shapes["self_attn.k_norm.weight"] = (d,)
    if per_layer:
        shapes["per_layer_input_gate.weight"] = (per_layer, hidden)
        shapes["per_layer_projection.weight"] = (hidden, per_layer)
        shapes["post_per_layer_input_norm.weight"] = (hidden,)
    return shapes


@dataclass(frozen=True)
class GemmaWeights:
    """Every weight of the text model by its Gemma4ForCausalLM name
    (`tensors`), with `head` the output head (the embedding when tied)."""

    tensors: dict[str, np.ndarray]
    head: np.ndarray

    def layer(self, i: int, key: str) -> np.ndarray:
        return self.tensors[layer_name(i, key)]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]

    @property
    def embedding(self) -> np.ndarray:
        return self.tensors["model.embed_tokens.weight"]

    @staticmethod
    def expected_shapes(config: GemmaConfig) -> dict[str, tuple[int, ...]]:
        """Checkpoint name -> shape for every tensor `config` implies."""
        hidden, per_layer, layers = config.hidden_size, config.per_layer, config.num_hidden_layers
        shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (config.vocab_size, hidden)
        }
        if per_layer:
            shapes["model.embed_tokens_per_layer.weight"] = (
                config.vocab_size_per_layer_input,
                layers * per_layer,
            )
            shapes["model.per_layer_model_projection.weight"] = (layers * per_layer, hidden)
            shapes["model.per_layer_projection_norm.weight"] = (per_layer,)
        for i in range(layers):
            for key, shape in layer_shapes(config, i).items():
                shapes[layer_name(i, key)] = shape
        shapes["model.norm.weight"] = (hidden,)
        if not config.tie_word_embeddings:
            shapes["lm_head.weight"] = (config.vocab_size, hidden)
        return shapes

    @staticmethod
    def open_checkpoint(path, config: GemmaConfig) -> Checkpoint:
        """The text model's tensors of the directory `path`, under
        Gemma4ForCausalLM names."""
        if config.multimodal:
            return Checkpoint.open(path, prefix=CONDITIONAL_PREFIX, rename="model.")
        return Checkpoint.open(path)

    @classmethod
    def load(cls, checkpoint: Checkpoint, config: GemmaConfig) -> GemmaWeights:
        """Views of every weight in `checkpoint`, checked against `config` first."""
        expected = cls.expected_shapes(config)
        ignored = {
            layer_name(i, key)
            for i in range(config.first_kv_shared_layer, config.num_hidden_layers)
            for key in _SHARED_IGNORED
        }
        check_weights(checkpoint, expected, ignored=ignored)
        tensors = {name: checkpoint[name] for name in expected}
        head = tensors[
            "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
        ]
        return cls(tensors, head)
