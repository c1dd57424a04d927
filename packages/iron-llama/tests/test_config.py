import json

import pytest

from iron.llama import ConfigError, Llama3RopeScaling, LlamaConfig
from iron.lm.testing import edited

# Llama 3.2 1B's config.json as released (transformers 4.x spelling)
LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
SCALING = Llama3RopeScaling(32.0, 1.0, 4.0, 8192)


def with_(**changes):
    return edited(LLAMA_32_1B, **changes)


def test_llama_32_1b_release_spelling():
    config = LlamaConfig.from_dict(LLAMA_32_1B)
    assert config == LlamaConfig(
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling=SCALING,
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        bos_token_id=128000,
        eos_token_ids=(128001,),
    )
    assert config.group_size == 4


def test_transformers_5_rope_parameters_spelling():
    parameters = {**LLAMA_32_1B["rope_scaling"], "rope_theta": 500000.0}
    data = with_(rope_theta=None, rope_scaling=None, rope_parameters=parameters)
    assert LlamaConfig.from_dict(data) == LlamaConfig.from_dict(LLAMA_32_1B)


def test_older_type_key_and_instruct_eos_list():
    scaling = dict(LLAMA_32_1B["rope_scaling"])
    scaling["type"] = scaling.pop("rope_type")
    config = LlamaConfig.from_dict(
        with_(rope_scaling=scaling, eos_token_id=[128001, 128008, 128009])
    )
    assert config.rope_scaling == SCALING
    assert config.eos_token_ids == (128001, 128008, 128009)


def test_head_dim_derived_and_hf_defaults():
    data = {
        "hidden_size": 96,
        "num_hidden_layers": 1,
        "num_attention_heads": 6,
        "intermediate_size": 10,
        "vocab_size": 7,
    }
    config = LlamaConfig.from_dict(data)
    assert config.head_dim == 16
    assert config.num_key_value_heads == 6  # absent -> multi-head attention, as in transformers
    assert (config.rms_norm_eps, config.rope_theta, config.rope_scaling) == (1e-6, 10000.0, None)
    assert (config.tie_word_embeddings, config.bos_token_id, config.eos_token_ids) == (
        False,
        None,
        (),
    )
    assert LlamaConfig.from_dict(with_(rope_scaling={"rope_type": "default"})).rope_scaling is None


def test_round_trip_through_to_dict():
    config = LlamaConfig.from_dict(with_(eos_token_id=[1, 2]))
    assert LlamaConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "rope_scaling.rope_type='yarn': must be 'llama3'",
        ),
        (
            {"rope_scaling": {**LLAMA_32_1B["rope_scaling"], "rope_type": "dynamic"}},
            "rope_type='dynamic'",
        ),
        ({"attention_bias": True}, "attention_bias=True: must be false"),
        ({"mlp_bias": True}, "mlp_bias=True: must be false"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu': must be 'silu'"),
        ({"model_type": "mistral"}, "model_type='mistral': must be 'llama'"),
        ({"pretraining_tp": 2}, "pretraining_tp=2: must be 1"),
        (
            {"num_key_value_heads": 5},
            "num_attention_heads=32: must be a multiple of num_key_value_heads (5)",
        ),
        ({"head_dim": 63}, "head_dim=63: must be even"),
        (
            {"head_dim": None, "hidden_size": 2050},
            "hidden_size=2050: must be a multiple of num_attention_heads (32)",
        ),
        ({"vocab_size": 0}, "vocab_size=0: must be a positive integer"),
        ({"hidden_size": 20.5}, "hidden_size=20.5: must be a positive integer"),
        ({"rms_norm_eps": -1.0}, "rms_norm_eps=-1.0: must be a positive number"),
        ({"intermediate_size": None}, "missing required field(s) intermediate_size"),
        ({"bos_token_id": -3}, "bos_token_id=-3: must be a non-negative integer"),
        (
            {"rope_scaling": {**LLAMA_32_1B["rope_scaling"], "high_freq_factor": 1.0}},
            "rope_scaling.high_freq_factor=1.0: must exceed low_freq_factor (1.0)",
        ),
        (
            {"rope_scaling": {**LLAMA_32_1B["rope_scaling"], "factor": None}},
            "rope_scaling.factor=None: must be a positive number",
        ),
        (
            {"rope_parameters": {**LLAMA_32_1B["rope_scaling"], "rope_theta": 10000.0}},
            "rope_parameters.rope_theta=10000.0: disagrees with rope_theta=500000.0",
        ),
        (
            {
                "rope_parameters": {
                    **LLAMA_32_1B["rope_scaling"],
                    "factor": 8.0,
                    "rope_theta": 500000.0,
                }
            },
            "rope_scaling=",
        ),
        (
            {"rope_scaling": None, "rope_parameters": {"rope_type": "longrope"}},
            "rope_parameters.rope_type='longrope'",
        ),
    ],
)
def test_refusals_name_field_value_and_rule(changes, message):
    with pytest.raises(ConfigError) as error:
        LlamaConfig.from_dict(with_(**changes))
    assert message in str(error.value)


def test_from_file_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(with_(hidden_act="relu")))
    with pytest.raises(ConfigError, match=r"config\.json: hidden_act='relu'"):
        LlamaConfig.from_file(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        LlamaConfig.from_file(tmp_path / "config.json")
    with pytest.raises(ConfigError, match="no such file"):
        LlamaConfig.from_file(tmp_path / "missing")
