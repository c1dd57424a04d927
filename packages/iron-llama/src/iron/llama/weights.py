"""Strict Llama weight loading: checkpoint tensor names -> `LlamaWeights`.

Every tensor the config implies must be present with its exact shape, and
nothing else may be: a missing or unexpected tensor, a gap in the layer
numbers or a wrong shape raises, naming the tensor (and both shapes). A tied
model has no `lm_head.weight` (the head is the embedding); an untied one
must have it. Matrices stay [out, in] as shipped: the fields are the
checkpoint's own zero-copy views, nothing is transposed or copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from iron.llama.config import LlamaConfig
from iron.lm.checkpoint import SHOWN as _SHOWN
from iron.lm.checkpoint import Checkpoint, check_weights

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer. Matrices are [out, in]; norms are (hidden,)."""

    input_norm: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    post_attention_norm: np.ndarray
    gate: np.ndarray
    up: np.ndarray
    down: np.ndarray


_LAYER_TENSORS = {
    "input_norm": "input_layernorm.weight",
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "o": "self_attn.o_proj.weight",
    "post_attention_norm": "post_attention_layernorm.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
}


def layer_tensor_name(layer: int, field: str) -> str:
    """The checkpoint name of a `LayerWeights` field: (3, "q") ->
    "model.layers.3.self_attn.q_proj.weight"."""
    return f"model.layers.{layer}.{_LAYER_TENSORS[field]}"


@dataclass(frozen=True)
class LlamaWeights:
    """All weights of a Llama model; `head is embedding` when the config ties them."""

    embedding: np.ndarray
    layers: tuple[LayerWeights, ...]
    norm: np.ndarray
    head: np.ndarray

    @staticmethod
    def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
        """Checkpoint name -> shape for every tensor `config` implies."""
        hidden, ffn, d = config.hidden_size, config.intermediate_size, config.head_dim
        q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
        per_layer = {
            "input_norm": (hidden,),
            "q": (q_out, hidden),
            "k": (kv_out, hidden),
            "v": (kv_out, hidden),
            "o": (hidden, q_out),
            "post_attention_norm": (hidden,),
            "gate": (ffn, hidden),
            "up": (ffn, hidden),
            "down": (hidden, ffn),
        }
        shapes = {"model.embed_tokens.weight": (config.vocab_size, hidden)}
        for i in range(config.num_hidden_layers):
            for field in _LAYER_TENSORS:
                shapes[layer_tensor_name(i, field)] = per_layer[field]
        shapes["model.norm.weight"] = (hidden,)
        if not config.tie_word_embeddings:
            shapes["lm_head.weight"] = (config.vocab_size, hidden)
        return shapes

    @classmethod
    def load(cls, checkpoint: Checkpoint, config: LlamaConfig) -> LlamaWeights:
        """Views of every weight in `checkpoint`, checked against `config` first."""
        check_weights(checkpoint, cls.expected_shapes(config), _layer_problems(checkpoint, config))
        embedding = checkpoint["model.embed_tokens.weight"]
        layers = tuple(
            LayerWeights(
                **{field: checkpoint[layer_tensor_name(i, field)] for field in _LAYER_TENSORS}
            )
            for i in range(config.num_hidden_layers)
        )
        head = embedding if config.tie_word_embeddings else checkpoint["lm_head.weight"]
        return cls(embedding, layers, checkpoint["model.norm.weight"], head)


def _layer_problems(checkpoint: Checkpoint, config: LlamaConfig) -> list[str]:
    present = sorted({int(m.group(1)) for name in checkpoint if (m := _LAYER.match(name))})
    # gaps only up to the config's layers: a name like model.layers.10**12.x
    # must not make a range that long
    top = min(present[-1] + 1, config.num_hidden_layers) if present else 0
    gaps = sorted(set(range(top)) - set(present))
    problems = []
    if gaps and present[-1] > gaps[0]:
        shown = gaps[:_SHOWN] + (["..."] if len(gaps) > _SHOWN else [])
        problems.append(
            f"layer gap: no tensors for layer(s) {shown} although layers up to {present[-1]} exist"
        )
    extra = [i for i in present if i >= config.num_hidden_layers]
    if extra:
        shown = extra[:_SHOWN] + (["..."] if len(extra) > _SHOWN else [])
        problems.append(f"layer(s) {shown} beyond num_hidden_layers={config.num_hidden_layers}")
    return problems
