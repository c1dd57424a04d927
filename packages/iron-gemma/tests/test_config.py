"""The config reader: every field that changes the arithmetic honoured or
refused by name, in both spellings transformers writes."""

import json

import pytest

from iron.gemma import ConfigError, GemmaConfig, Rope
from iron.gemma.config import FULL, SLIDING
from iron.lm.testing import edited

S, F = SLIDING, FULL
E2B_TYPES = ([S] * 4 + [F]) * 7

# google/gemma-4-e2b's text config in the spelling of transformers' first
# Gemma 4 release: the full layers' width as global_head_dim
E2B_TEXT = {
    "model_type": "gemma4_text",
    "hidden_size": 1536,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "global_head_dim": 512,
    "intermediate_size": 6144,
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144,
    "hidden_size_per_layer_input": 256,
    "layer_types": E2B_TYPES,
    "sliding_window": 512,
    "num_kv_shared_layers": 20,
    "use_double_wide_mlp": True,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 1000000.0,
        },
    },
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "enable_moe_block": False,
    "attention_k_eq_v": False,
}


def text(**changes):
    return edited(E2B_TEXT, **changes)


def test_e2b_text_config():
    config = GemmaConfig.from_dict(E2B_TEXT)
    assert (config.head_dim, config.global_head_dim, config.num_kv_shared_layers) == (256, 512, 20)
    assert config.layer_types == tuple(E2B_TYPES)
    assert config.rope == {S: Rope(10000.0), F: Rope(1e6, 0.25)}
    # the last 20 layers share: a sliding one reads layer 13's KV, a full one layer 14's
    assert config.kv_source(15) == 13 and config.kv_source(19) == 14 and config.kv_source(14) == 14
    assert config.intermediate(14) == 6144 and config.intermediate(15) == 12288
    assert config.layer_head_dim(3) == 256 and config.layer_head_dim(4) == 512


def test_per_layer_config_spelling_reads_the_same():
    overrides = {str(i): {"head_dim": 512} for i, kind in enumerate(E2B_TYPES) if kind == F}
    later = text(global_head_dim=None, per_layer_config=overrides)
    assert GemmaConfig.from_dict(later) == GemmaConfig.from_dict(E2B_TEXT)


def test_defaults_are_transformers():
    minimal = {"model_type": "gemma4_text", "hidden_size": 256, "num_hidden_layers": 6,
               "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 512}  # fmt: skip
    config = GemmaConfig.from_dict(minimal)
    assert config.layer_types == (S, S, S, S, S, F)
    assert (config.head_dim, config.global_head_dim, config.sliding_window) == (256, 512, 512)
    assert config.per_layer == 256 and config.final_logit_softcapping is None
    assert config.rope[F] == Rope(1e6, 0.25)


def test_conditional_generation_reads_text_config():
    outer = {"model_type": "gemma4", "text_config": E2B_TEXT, "vision_config": {"hidden_size": 1},
             "audio_config": {"hidden_size": 1}}  # fmt: skip
    config = GemmaConfig.from_dict(outer)
    assert config.multimodal
    assert GemmaConfig.from_dict(E2B_TEXT) == GemmaConfig(
        **{**config.__dict__, "multimodal": False}
    )
    with pytest.raises(ConfigError, match=r"text_config.hidden_activation='gelu'"):
        GemmaConfig.from_dict({**outer, "text_config": text(hidden_activation="gelu")})


def test_round_trip(tmp_path):
    config = GemmaConfig.from_dict(E2B_TEXT)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    assert GemmaConfig.from_file(tmp_path) == config


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"enable_moe_block": True}, r"enable_moe_block=True: must be false \(the MoE block"),
        ({"attention_k_eq_v": True}, r"attention_k_eq_v=True: must be false \(keys equal"),
        ({"use_bidirectional_attention": "all"}, r"use_bidirectional_attention='all'"),
        ({"attention_bias": True}, r"attention_bias=True"),
        ({"hidden_activation": "gelu"}, r"hidden_activation='gelu'"),
        ({"model_type": "gemma3_text"}, r"model_type='gemma3_text'"),
        ({"layer_types": [S] * 35}, r"layer_types=.*the last layer must be 'full_attention'"),
        ({"layer_types": [S] * 34 + ["chunked"]}, r"layer_types=.*one of"),
        ({"num_kv_shared_layers": 35}, r"num_kv_shared_layers=35"),
        ({"num_kv_shared_layers": 31}, r"layer 4 .* no earlier layer of its type"),
        ({"final_logit_softcapping": -1}, r"final_logit_softcapping=-1"),
        (
            {"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e6}}},
            r"rope_parameters.full_attention.rope_type='yarn'",
        ),
        (
            {"rope_parameters": {"chunked": {"rope_type": "default", "rope_theta": 1e4}}},
            r"rope_parameters=.*keys are layer types",
        ),
        (
            {"per_layer_config": {"4": {"head_dim": 512, "sliding_window": 3}}},
            r"per_layer_config.4.sliding_window=3: only head_dim",
        ),
        (
            {"per_layer_config": {"4": {"head_dim": 512}, "9": {"head_dim": 256}}},
            r"one width for all",
        ),
        ({"per_layer_config": {"0": {"head_dim": 128}}}, r"sliding layers keep head_dim"),
        ({"per_layer_config": {"4": {"head_dim": 256}}}, r"global_head_dim=512: disagrees"),
        ({"per_layer_config": {"4": {"num_key_value_heads": 2}}}, r"num_key_value_heads=2"),
        ({"vocab_size_per_layer_input": 300000}, r"vocab_size_per_layer_input=300000"),
        (
            {"num_key_value_heads": 3},
            r"num_attention_heads=8: must be a multiple of num_key_value_heads",
        ),
        ({"hidden_size": None}, r"missing required field\(s\) hidden_size"),
        ({"tie_word_embeddings": "yes"}, r"tie_word_embeddings='yes'"),
        ({"eos_token_id": 262144}, r"eos_token_id=.*outside the vocabulary"),
    ],
)
def test_refusals_name_the_field(changes, message):
    with pytest.raises(ConfigError, match=message):
        GemmaConfig.from_dict(text(**changes))


def test_conditional_generation_needs_tied_head():
    outer = {"model_type": "gemma4", "tie_word_embeddings": False, "text_config": E2B_TEXT}
    with pytest.raises(ConfigError, match=r"tie_word_embeddings=False: must be true in a gemma4"):
        GemmaConfig.from_dict(outer)


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        GemmaConfig.from_file(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(text(enable_moe_block=True)))
    with pytest.raises(ConfigError, match=rf"{tmp_path}/config.json: enable_moe_block"):
        GemmaConfig.from_file(tmp_path)
