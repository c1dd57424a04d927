"""`LlamaConfig`: the fields of a Hugging Face Llama `config.json` that the forward uses.

Both RoPE spellings are read: `rope_theta` + `rope_scaling` (the Llama 3.2
release files; older files say `type` where newer ones say `rope_type`) and
the single `rope_parameters` dict that transformers 5 writes (holding
`rope_theta` too). Settings this implementation does not compute (another
RoPE type, biases, an activation other than SiLU...) are refused by name
rather than silently ignored. Absent optional fields take transformers'
`LlamaConfig` defaults, so a file means here what it means there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iron.lm.config import (
    ConfigError,
    positive_ints,
    read_config,
    required_fields,
    token_ids,
    token_ids_value,
)
from iron.lm.config import is_number as _is_number
from iron.lm.config import require as _require

__all__ = ["ConfigError", "Llama3RopeScaling", "LlamaConfig"]


@dataclass(frozen=True)
class Llama3RopeScaling:
    """llama3 frequency scaling (transformers `_compute_llama3_parameters`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


#: decoder layers a config may have
MAX_LAYERS = 4096
#: bf16 weight bytes a config may imply
MAX_WEIGHT_BYTES = 2**44


@dataclass(frozen=True)
class LlamaConfig:
    """Model dimensions and numerics. `head_dim` is always set (derived as
    hidden_size // num_attention_heads when the file has none); `eos_token_ids`
    is a tuple because instruct checkpoints list several."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Llama3RopeScaling | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        positive_ints(
            self,
            (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "max_position_embeddings",
            ),
        )
        _require(
            "num_attention_heads",
            self.num_attention_heads,
            self.num_attention_heads % self.num_key_value_heads == 0,
            f"must be a multiple of num_key_value_heads ({self.num_key_value_heads}): "
            "grouped-query attention gives each kv head a whole group of query heads",
        )
        _require("head_dim", self.head_dim, self.head_dim % 2 == 0, "must be even (RoPE pairs)")
        # O(1) bounds before anything walks the layers or sizes a tensor
        _require(
            "num_hidden_layers",
            self.num_hidden_layers,
            self.num_hidden_layers <= MAX_LAYERS,
            f"at most {MAX_LAYERS} (each layer is recorded as steps of one graph; "
            "the deepest Llama has 126)",
        )
        _require(
            "vocab_size",
            self.vocab_size,
            self.vocab_size < 2**31,
            "below 2**31 (token ids are int32)",
        )
        weight_bytes = 2 * self.parameter_count
        _require(
            "hidden_size",
            self.hidden_size,
            weight_bytes <= MAX_WEIGHT_BYTES,
            f"with these dimensions the bf16 weights take {weight_bytes} bytes, more than "
            f"{MAX_WEIGHT_BYTES} (16 TiB, the largest file ext4 holds)",
        )
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            _require(name, value, _is_number(value) and value > 0, "must be a positive number")
        # inside the vocabulary: an id past it is caught here, naming the
        # field, not by the first prefill after the weights are loaded
        token_ids("bos_token_id", self.bos_token_id, self.vocab_size)
        token_ids("eos_token_id", list(self.eos_token_ids), self.vocab_size)

    @property
    def parameter_count(self) -> int:
        """The weights' element count, from the dimensions alone."""
        hidden, ffn = self.hidden_size, self.intermediate_size
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        per_layer = 2 * hidden + 2 * q_out * hidden + 2 * kv_out * hidden + 3 * ffn * hidden
        heads = 1 if self.tie_word_embeddings else 2
        return heads * self.vocab_size * hidden + hidden + self.num_hidden_layers * per_layer

    @property
    def group_size(self) -> int:
        """Query heads per kv head: query head h reads kv head h // group_size."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_file(cls, path: str | Path) -> LlamaConfig:
        """Read `path` (a config.json, or a directory holding one)."""
        return read_config(path, cls.from_dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LlamaConfig:
        """Build from the parsed JSON of a HF Llama config.json."""
        if not isinstance(data, dict):
            raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
        _refuse_unsupported(data)
        required_fields(
            data,
            (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "vocab_size",
            ),
        )
        heads = data["num_attention_heads"]
        head_dim = data.get("head_dim")
        if head_dim is None:
            hidden = data["hidden_size"]
            _require(
                "hidden_size",
                hidden,
                isinstance(hidden, int)
                and isinstance(heads, int)
                and heads > 0
                and hidden % heads == 0,
                f"must be a multiple of num_attention_heads ({heads}) when head_dim is absent",
            )
            head_dim = hidden // heads
        rope_theta, rope_scaling = _parse_rope(data)
        tied = data.get("tie_word_embeddings", False)
        _require("tie_word_embeddings", tied, isinstance(tied, bool), "must be true or false")
        bos = token_ids("bos_token_id", data.get("bos_token_id"))
        _require("bos_token_id", data.get("bos_token_id"), len(bos) <= 1, "must be one token id")
        return cls(
            hidden_size=data["hidden_size"],
            num_hidden_layers=data["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=data.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=data["intermediate_size"],
            vocab_size=data["vocab_size"],
            rms_norm_eps=data.get("rms_norm_eps", 1e-6),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=tied,
            max_position_embeddings=data.get("max_position_embeddings", 2048),
            bos_token_id=bos[0] if bos else None,
            eos_token_ids=token_ids("eos_token_id", data.get("eos_token_id")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The config.json this config reads back from (Llama 3.2 release spelling)."""
        scaling = self.rope_scaling
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None
            if scaling is None
            else {"rope_type": "llama3", **scaling.__dict__},
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": token_ids_value(self.eos_token_ids),
            "torch_dtype": "bfloat16",
        }


def _refuse_unsupported(data: dict[str, Any]) -> None:
    model_type = data.get("model_type", "llama")
    _require("model_type", model_type, model_type == "llama", "must be 'llama'")
    act = data.get("hidden_act", "silu")
    _require("hidden_act", act, act == "silu", "must be 'silu' (the MLP is SwiGLU)")
    for name in ("attention_bias", "mlp_bias"):
        _require(
            name, data.get(name, False), not data.get(name, False), "must be false (no biases)"
        )
    tp = data.get("pretraining_tp", 1)
    _require("pretraining_tp", tp, tp == 1, "must be 1 (sliced projections are not supported)")


def _parse_rope(data: dict[str, Any]) -> tuple[float, Llama3RopeScaling | None]:
    """(rope_theta, scaling) from either spelling; refuses a disagreement between them."""
    parameters = data.get("rope_parameters")
    scaling = data.get("rope_scaling")
    theta = data.get("rope_theta")
    if parameters is not None:
        field = "rope_parameters"
        _require(field, parameters, isinstance(parameters, dict), "must be an object")
        if "rope_theta" in parameters:
            inner = parameters["rope_theta"]
            _require(
                "rope_parameters.rope_theta",
                inner,
                theta is None or inner == theta,
                f"disagrees with rope_theta={theta!r}",
            )
            theta = inner
        if isinstance(scaling, dict) and _rope_type(scaling) != "default":
            _require(
                "rope_scaling",
                scaling,
                _llama3_fields(scaling) == _llama3_fields(parameters),
                "disagrees with rope_parameters",
            )
        scaling = parameters
    else:
        field = "rope_scaling"
    theta = 10000.0 if theta is None else theta
    if scaling is None:
        return theta, None
    _require(field, scaling, isinstance(scaling, dict), "must be an object")
    rope_type = _rope_type(scaling)
    if rope_type == "default":
        return theta, None
    _require(
        f"{field}.rope_type",
        rope_type,
        rope_type == "llama3",
        "must be 'llama3' or 'default' (other RoPE scalings are not implemented)",
    )
    fields = _llama3_fields(scaling)
    for name, value in fields.items():
        _require(
            f"{field}.{name}",
            value,
            _is_number(value) and value > 0,
            "must be a positive number (llama3 scaling needs it)",
        )
    _require(
        f"{field}.high_freq_factor",
        fields["high_freq_factor"],
        fields["high_freq_factor"] > fields["low_freq_factor"],
        f"must exceed low_freq_factor ({fields['low_freq_factor']}): the smoothing divides by the gap",
    )
    fields["original_max_position_embeddings"] = int(fields["original_max_position_embeddings"])
    return theta, Llama3RopeScaling(**fields)


def _rope_type(scaling: dict[str, Any]) -> str:
    return scaling.get("rope_type", scaling.get("type", "default"))


def _llama3_fields(scaling: dict[str, Any]) -> dict[str, Any]:
    names = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return {name: scaling.get(name) for name in names}
