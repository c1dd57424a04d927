"""`GemmaConfig`: the fields of a Gemma 4 `config.json` that change the text
model's arithmetic, each honoured or refused by name.

Two files are read: the text-only `Gemma4ForCausalLM` (`model_type`
gemma4_text, the fields at the top level) and `Gemma4ForConditionalGeneration`
(`model_type` gemma4: the text model's fields under `text_config`, its
weights under `model.language_model.`; the vision and audio towers are never
read). Absent fields take transformers' `Gemma4TextConfig` defaults, so a
file means here what it means there: `global_head_dim` 512 for full-attention
layers unless a `per_layer_config` ({"3": {"head_dim": 512}}, the spelling
later transformers versions write) says otherwise; RoPE per layer type
(sliding: default, theta 10^4; full: proportional, theta 10^6, a quarter of
the frequencies rotating). What the app does not implement (MoE blocks, keys
equal to values, bidirectional attention, another activation, biases) is
refused by name when set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from iron.lm.config import (
    ConfigError,
    is_int,
    is_number,
    positive_ints,
    read_config,
    require,
    required_fields,
    token_ids,
    token_ids_value,
)

__all__ = ["FULL", "SLIDING", "ConfigError", "GemmaConfig", "Rope", "inv_frequencies"]

SLIDING, FULL = "sliding_attention", "full_attention"
#: decoder layers a config may have (each is steps of one graph)
MAX_LAYERS = 1024
#: the defaults of `Gemma4TextConfig`
DEFAULT_GLOBAL_HEAD_DIM = 512
DEFAULT_SLIDING_PATTERN = 6  # 5 sliding layers, then a full one
#: a per_layer_config entry may override only these
_OVERRIDES = ("head_dim", "num_key_value_heads")
#: top-level fields of a gemma4 (multimodal) config.json that are not the text model's
_TEXT_CONFIG = "text_config"


@dataclass(frozen=True)
class Rope:
    """One layer type's RoPE: theta, and for the proportional type the
    share of frequencies that rotate (`partial_rotary_factor`; the rest are
    0, their dimensions pass unrotated) and a `factor` dividing them."""

    theta: float
    partial_rotary_factor: float | None = None
    factor: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        if self.partial_rotary_factor is None:
            return {"rope_type": "default", "rope_theta": self.theta}
        out = {
            "rope_type": "proportional",
            "rope_theta": self.theta,
            "partial_rotary_factor": self.partial_rotary_factor,
        }
        if self.factor != 1.0:
            out["factor"] = self.factor
        return out


DEFAULT_ROPE = {
    SLIDING: Rope(10_000.0),
    FULL: Rope(1_000_000.0, 0.25),
}


@dataclass(frozen=True)
class GemmaConfig:
    """The text model's dimensions and numerics. `layer_types` holds one of
    SLIDING / FULL per layer; `head_dim` is the sliding layers' head width,
    `global_head_dim` the full layers'; `num_kv_shared_layers` last layers
    read the KV of the last earlier layer of their type;
    `hidden_size_per_layer_input` 0 turns per-layer inputs off;
    `multimodal`: read from a Gemma4ForConditionalGeneration directory."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    global_head_dim: int
    intermediate_size: int
    vocab_size: int
    layer_types: tuple[str, ...]
    sliding_window: int = 512
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    hidden_size_per_layer_input: int = 256
    vocab_size_per_layer_input: int = 262_144
    final_logit_softcapping: float | None = None
    rope: dict[str, Rope] = field(default_factory=lambda: dict(DEFAULT_ROPE))
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 131_072
    bos_token_id: int | None = 2
    eos_token_ids: tuple[int, ...] = (1,)
    pad_token_id: int | None = 0
    multimodal: bool = False

    def __post_init__(self) -> None:
        positive_ints(
            self,
            (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "global_head_dim",
                "intermediate_size",
                "vocab_size",
                "sliding_window",
                "max_position_embeddings",
            ),
        )
        require(
            "num_hidden_layers",
            self.num_hidden_layers,
            self.num_hidden_layers <= MAX_LAYERS,
            f"at most {MAX_LAYERS}",
        )
        require(
            "num_attention_heads",
            self.num_attention_heads,
            self.num_attention_heads % self.num_key_value_heads == 0,
            f"must be a multiple of num_key_value_heads ({self.num_key_value_heads})",
        )
        for name in ("head_dim", "global_head_dim"):
            value = getattr(self, name)
            require(name, value, value % 2 == 0, "must be even (RoPE pairs)")
        for name in ("hidden_size_per_layer_input", "vocab_size_per_layer_input"):
            value = getattr(self, name)
            require(name, value, is_int(value) and value >= 0, "must be an integer >= 0")
        if self.hidden_size_per_layer_input:
            require(
                "vocab_size_per_layer_input",
                self.vocab_size_per_layer_input,
                0 < self.vocab_size_per_layer_input <= self.vocab_size,
                f"from 1 to vocab_size ({self.vocab_size}): per-layer inputs are looked up by "
                "token id",
            )
        require(
            "layer_types",
            list(self.layer_types),
            len(self.layer_types) == self.num_hidden_layers
            and all(t in (SLIDING, FULL) for t in self.layer_types),
            f"one of {SLIDING!r} or {FULL!r} per layer ({self.num_hidden_layers})",
        )
        require(
            "layer_types",
            list(self.layer_types),
            self.layer_types[-1] == FULL,
            f"the last layer must be {FULL!r} (transformers forces it)",
        )
        shared = self.num_kv_shared_layers
        require(
            "num_kv_shared_layers",
            shared,
            is_int(shared) and 0 <= shared < self.num_hidden_layers,
            f"an integer from 0 to num_hidden_layers - 1 ({self.num_hidden_layers - 1}): a "
            "shared layer reads the KV of an earlier layer that computes its own",
        )
        first = self.first_kv_shared_layer
        producing = set(self.layer_types[:first])
        for i in range(first, self.num_hidden_layers):
            require(
                "num_kv_shared_layers",
                shared,
                self.layer_types[i] in producing,
                f"layer {i} ({self.layer_types[i]}) shares KV, but no earlier layer of its type "
                "computes any",
            )
        for name in ("use_double_wide_mlp", "tie_word_embeddings", "multimodal"):
            value = getattr(self, name)
            require(name, value, isinstance(value, bool), "must be true or false")
        cap = self.final_logit_softcapping
        require(
            "final_logit_softcapping",
            cap,
            cap is None or (is_number(cap) and cap > 0),
            "must be null or a positive number",
        )
        require(
            "rms_norm_eps",
            self.rms_norm_eps,
            is_number(self.rms_norm_eps) and self.rms_norm_eps > 0,
            "must be a positive number",
        )
        token_ids("bos_token_id", self.bos_token_id, self.vocab_size)
        token_ids("eos_token_id", list(self.eos_token_ids), self.vocab_size)
        token_ids("pad_token_id", self.pad_token_id, self.vocab_size)

    # ---- per layer ----

    @property
    def first_kv_shared_layer(self) -> int:
        return self.num_hidden_layers - self.num_kv_shared_layers

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    def is_kv_shared(self, layer: int) -> bool:
        return layer >= self.first_kv_shared_layer

    def layer_head_dim(self, layer: int) -> int:
        return self.head_dim if self.is_sliding(layer) else self.global_head_dim

    def kv_source(self, layer: int) -> int:
        """The layer whose keys and values `layer` attends over: itself, or
        for a KV-shared layer the last earlier non-shared layer of its type
        (transformers' `kv_sharing_modes`)."""
        if not self.is_kv_shared(layer):
            return layer
        kind = self.layer_types[layer]
        return max(i for i in range(self.first_kv_shared_layer) if self.layer_types[i] == kind)

    def intermediate(self, layer: int) -> int:
        """The layer's MLP width: doubled on KV-shared layers with use_double_wide_mlp."""
        wide = self.use_double_wide_mlp and self.is_kv_shared(layer)
        return self.intermediate_size * (2 if wide else 1)

    @property
    def per_layer(self) -> int:
        return self.hidden_size_per_layer_input

    # ---- files ----

    @classmethod
    def from_file(cls, path: str | Path) -> GemmaConfig:
        """Read `path` (a config.json, or a directory holding one)."""
        return read_config(path, cls.from_dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmaConfig:
        """Build from the parsed JSON of a Gemma 4 config.json."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
        model_type = data.get("model_type")
        require(
            "model_type",
            model_type,
            model_type in ("gemma4_text", "gemma4"),
            "must be 'gemma4_text' (Gemma4ForCausalLM) or 'gemma4' "
            "(Gemma4ForConditionalGeneration, whose text_config is read)",
        )
        multimodal = model_type == "gemma4"
        if multimodal:
            text = data.get(_TEXT_CONFIG)
            require(_TEXT_CONFIG, text, isinstance(text, dict), "must be an object")
            tied = data.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
            require(
                "tie_word_embeddings",
                tied,
                tied is True,
                "must be true in a gemma4 file: only the language model's weights are read, "
                "and the head is its embedding",
            )
            try:
                return _text_config(text, multimodal=True)
            except ConfigError as error:
                raise ConfigError(f"{_TEXT_CONFIG}.{error}") from None
        return _text_config(data, multimodal=False)

    def to_dict(self) -> dict[str, Any]:
        """The Gemma4ForCausalLM config.json this config reads back from."""
        return {
            "architectures": ["Gemma4ForCausalLM"],
            "model_type": "gemma4_text",
            "hidden_activation": "gelu_pytorch_tanh",
            "attention_bias": False,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "global_head_dim": self.global_head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "layer_types": list(self.layer_types),
            "sliding_window": self.sliding_window,
            "num_kv_shared_layers": self.num_kv_shared_layers,
            "use_double_wide_mlp": self.use_double_wide_mlp,
            "hidden_size_per_layer_input": self.hidden_size_per_layer_input,
            "vocab_size_per_layer_input": self.vocab_size_per_layer_input,
            "final_logit_softcapping": self.final_logit_softcapping,
            "rope_parameters": {kind: rope.to_dict() for kind, rope in self.rope.items()},
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": token_ids_value(self.eos_token_ids),
            "pad_token_id": self.pad_token_id,
            "enable_moe_block": False,
            "attention_k_eq_v": False,
            "dtype": "bfloat16",
        }


def _text_config(data: dict[str, Any], *, multimodal: bool) -> GemmaConfig:
    _refuse_unsupported(data)
    required_fields(
        data, ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    )
    layers = data["num_hidden_layers"]
    require("num_hidden_layers", layers, is_int(layers) and 0 < layers <= MAX_LAYERS,
            f"must be an integer from 1 to {MAX_LAYERS}")  # fmt: skip
    layer_types = data.get("layer_types")
    if layer_types is None:  # transformers' default pattern
        layer_types = [
            SLIDING if (i + 1) % DEFAULT_SLIDING_PATTERN else FULL for i in range(layers)
        ]
    require("layer_types", layer_types, isinstance(layer_types, list), "must be a list")
    heads = data["num_attention_heads"]
    kv_heads = data.get("num_key_value_heads", 4)
    head_dim = data.get("head_dim", 256)
    global_head_dim = _global_head_dim(data, layer_types, head_dim, kv_heads)
    cap = data.get("final_logit_softcapping")
    bos = token_ids("bos_token_id", data.get("bos_token_id", 2))
    pad = token_ids("pad_token_id", data.get("pad_token_id", 0))
    return GemmaConfig(
        hidden_size=data["hidden_size"],
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        global_head_dim=global_head_dim,
        intermediate_size=data["intermediate_size"],
        vocab_size=data.get("vocab_size", 262_144),
        layer_types=tuple(layer_types),
        sliding_window=data.get("sliding_window", 512),
        num_kv_shared_layers=data.get("num_kv_shared_layers", 0),
        use_double_wide_mlp=data.get("use_double_wide_mlp", False),
        hidden_size_per_layer_input=data.get("hidden_size_per_layer_input", 256),
        vocab_size_per_layer_input=data.get("vocab_size_per_layer_input", 262_144),
        final_logit_softcapping=None if cap is None else cap,
        rope=_rope(data.get("rope_parameters")),
        rms_norm_eps=data.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=data.get("tie_word_embeddings", True),
        max_position_embeddings=data.get("max_position_embeddings", 131_072),
        bos_token_id=bos[0] if bos else None,
        eos_token_ids=token_ids("eos_token_id", data.get("eos_token_id", 1)),
        pad_token_id=pad[0] if pad else None,
        multimodal=multimodal,
    )


def _refuse_unsupported(data: dict[str, Any]) -> None:
    act = data.get("hidden_activation", "gelu_pytorch_tanh")
    require("hidden_activation", act, act == "gelu_pytorch_tanh",
            "must be 'gelu_pytorch_tanh' (the MLP's GELU-tanh)")  # fmt: skip
    refused = {
        "enable_moe_block": "the MoE block is not implemented",
        "attention_k_eq_v": "keys equal to values (no v_proj) are not implemented",
        "attention_bias": "biases are not implemented",
    }
    for name, why in refused.items():
        value = data.get(name, False)
        require(name, value, value is False or value is None, f"must be false ({why})")
    bidirectional = data.get("use_bidirectional_attention")
    require("use_bidirectional_attention", bidirectional, bidirectional is None,
            "must be null (bidirectional attention is not implemented: the app is causal)")  # fmt: skip


def _global_head_dim(data: dict[str, Any], layer_types: list, head_dim, kv_heads) -> int:
    """The full-attention layers' head width: `global_head_dim` (default 512)
    or the head_dim overrides of `per_layer_config`, which must give every
    full layer one width and leave the sliding layers theirs."""
    overrides = data.get("per_layer_config")
    legacy = data.get("global_head_dim")
    if overrides is None:
        value = DEFAULT_GLOBAL_HEAD_DIM if legacy is None else legacy
        require("global_head_dim", value, is_int(value) and value > 0,
                "must be a positive integer")  # fmt: skip
        return value
    require("per_layer_config", overrides, isinstance(overrides, dict), "must be an object")
    dims = {kind: set() for kind in (SLIDING, FULL)}
    for key, entry in overrides.items():
        where = f"per_layer_config.{key}"
        require(where, key, str(key).isdigit() and int(key) < len(layer_types),
                f"keys are layer indices from 0 to {len(layer_types) - 1}")  # fmt: skip
        require(where, entry, isinstance(entry, dict), "must be an object")
        for name, value in entry.items():
            require(f"{where}.{name}", value, name in _OVERRIDES,
                    f"only {' and '.join(_OVERRIDES)} may be overridden per layer here")  # fmt: skip
        kv = entry.get("num_key_value_heads", kv_heads)
        require(f"{where}.num_key_value_heads", kv, kv == kv_heads,
                f"must equal num_key_value_heads ({kv_heads}): one KV head count for every layer")  # fmt: skip
    for i, kind in enumerate(layer_types):
        entry = overrides.get(str(i), overrides.get(i, {})) if isinstance(overrides, dict) else {}
        if kind in dims:
            dims[kind].add(entry.get("head_dim", head_dim))
    require("per_layer_config", overrides, dims[SLIDING] <= {head_dim},
            f"sliding layers keep head_dim ({head_dim})")  # fmt: skip
    full = dims[FULL] or {DEFAULT_GLOBAL_HEAD_DIM if legacy is None else legacy}
    require("per_layer_config", overrides, len(full) == 1,
            f"gives the full-attention layers head dims {sorted(full)}: one width for all")  # fmt: skip
    (value,) = full
    require("global_head_dim", legacy, legacy is None or legacy == value,
            f"disagrees with per_layer_config's full-attention head_dim {value}")  # fmt: skip
    require("per_layer_config", overrides, is_int(value) and value > 0,
            "head_dim overrides must be positive integers")  # fmt: skip
    return value


def _rope(parameters: Any) -> dict[str, Rope]:
    if parameters is None:
        return dict(DEFAULT_ROPE)
    require("rope_parameters", parameters, isinstance(parameters, dict), "must be an object")
    unknown = sorted(set(parameters) - {SLIDING, FULL})
    require("rope_parameters", parameters, not unknown,
            f"keys are layer types ({SLIDING!r}, {FULL!r}); got {unknown}")  # fmt: skip
    out = dict(DEFAULT_ROPE)
    for kind, entry in parameters.items():
        where = f"rope_parameters.{kind}"
        require(where, entry, isinstance(entry, dict), "must be an object")
        rope_type = entry.get("rope_type", "default")
        theta = entry.get("rope_theta")
        require(f"{where}.rope_theta", theta, is_number(theta) and theta > 1,
                "must be a number above 1")  # fmt: skip
        if rope_type == "default":
            out[kind] = Rope(float(theta))
        elif rope_type == "proportional":
            partial = entry.get("partial_rotary_factor", 1.0)
            factor = entry.get("factor", 1.0)
            require(f"{where}.partial_rotary_factor", partial,
                    is_number(partial) and 0 <= partial <= 1, "must be a number in [0, 1]")  # fmt: skip
            require(f"{where}.factor", factor, is_number(factor) and factor > 0,
                    "must be a positive number")  # fmt: skip
            out[kind] = Rope(float(theta), float(partial), float(factor))
        else:
            require(f"{where}.rope_type", rope_type, False,
                    "must be 'default' or 'proportional' (other RoPE types are not implemented)")  # fmt: skip
    return out


def inv_frequencies(rope: Rope, head_dim: int):
    """The (head_dim // 2,) float32 inverse frequencies of a layer type, as
    transformers computes them: default theta^(-2i/d); proportional the
    first int(partial * d // 2) the same, the rest 0, all divided by factor."""
    half = head_dim // 2
    angles = (
        half
        if rope.partial_rotary_factor is None
        else int(rope.partial_rotary_factor * head_dim // 2)
    )
    exponent = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = np.float32(1) / (np.float32(rope.theta) ** exponent)
    inv = np.concatenate([inv, np.zeros(half - angles, np.float32)])
    if rope.partial_rotary_factor is not None:
        inv = inv / np.float32(rope.factor)
    return inv.astype(np.float32)
