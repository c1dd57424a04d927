import dataclasses

import ml_dtypes
import numpy as np
import pytest

from iron.llama import Checkpoint, CheckpointError, LlamaWeights, write_safetensors
from iron.llama.synthetic import synthetic_config, synthetic_tensors

CONFIG = synthetic_config("tiny")  # hidden 256, 4 heads of 64, 2 kv heads, ffn 512, vocab 512


def checkpoint_of(tmp_path, tensors) -> Checkpoint:
    write_safetensors(tmp_path / "model.safetensors", tensors)
    return Checkpoint.open(tmp_path)


def tiny_tensors(config=CONFIG) -> dict:
    return dict(synthetic_tensors(config, seed=0))


def test_loads_views_as_shipped(tmp_path):
    checkpoint = checkpoint_of(tmp_path, tiny_tensors())
    weights = LlamaWeights.load(checkpoint, CONFIG)
    assert len(weights.layers) == 2
    layer = weights.layers[1]
    assert (
        layer.q.shape == (256, 256) and layer.k.shape == (128, 256) and layer.v.shape == (128, 256)
    )
    assert (
        layer.o.shape == (256, 256)
        and layer.gate.shape == (512, 256)
        and layer.down.shape == (256, 512)
    )
    assert weights.embedding.shape == (512, 256) and weights.norm.shape == (256,)
    assert weights.head is weights.embedding  # tied: no lm_head.weight
    # zero-copy [out, in] views of the file, not transposed copies
    assert np.shares_memory(layer.k, checkpoint["model.layers.1.self_attn.k_proj.weight"])
    assert layer.down.flags.c_contiguous and layer.down.dtype == ml_dtypes.bfloat16


def test_untied_model_uses_lm_head(tmp_path):
    config = dataclasses.replace(CONFIG, tie_word_embeddings=False)
    tensors = tiny_tensors(config)
    assert "lm_head.weight" in tensors
    weights = LlamaWeights.load(checkpoint_of(tmp_path, tensors), config)
    assert weights.head is not weights.embedding and weights.head.shape == (512, 256)


def load_error(tmp_path, tensors, config=CONFIG) -> str:
    with pytest.raises(CheckpointError) as error:
        LlamaWeights.load(checkpoint_of(tmp_path, tensors), config)
    return str(error.value)


def test_missing_tensor(tmp_path):
    tensors = tiny_tensors()
    del tensors["model.layers.1.mlp.up_proj.weight"]
    assert (
        "missing tensor 'model.layers.1.mlp.up_proj.weight' (expected shape (512, 256))"
        in load_error(tmp_path, tensors)
    )


def test_unexpected_tensor(tmp_path):
    tensors = tiny_tensors()
    tensors["lm_head.weight"] = np.zeros((512, 256), ml_dtypes.bfloat16)
    tensors["model.rotary_emb.inv_freq"] = np.zeros(8, np.float32)
    message = load_error(tmp_path, tensors)
    assert (
        "unexpected tensor 'lm_head.weight' of shape (512, 256) (the config ties the head to the embedding)"
        in message
    )
    assert "unexpected tensor 'model.rotary_emb.inv_freq' of shape (8,)" in message


def test_wrong_shape_names_both_shapes(tmp_path):
    tensors = tiny_tensors()
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((256, 256), ml_dtypes.bfloat16)
    message = load_error(tmp_path, tensors)
    assert (
        "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (256, 256), the config needs (128, 256)"
        in message
    )


def test_layer_gap(tmp_path):
    config = dataclasses.replace(CONFIG, num_hidden_layers=3)
    tensors = {name: t for name, t in tiny_tensors(config).items() if ".layers.1." not in name}
    message = load_error(tmp_path, tensors, config)
    assert "layer gap: no tensors for layer(s) [1] although layers up to 2 exist" in message
    assert "missing tensor 'model.layers.1.self_attn.q_proj.weight'" in message


def test_layers_beyond_the_config(tmp_path):
    config = dataclasses.replace(CONFIG, num_hidden_layers=1)
    message = load_error(tmp_path, tiny_tensors(), config)
    assert "layer(s) [1] beyond num_hidden_layers=1" in message
    assert "unexpected tensor 'model.layers.1.mlp.gate_proj.weight'" in message


def test_non_float_weights_refused(tmp_path):
    tensors = tiny_tensors()
    tensors["model.norm.weight"] = np.ones(256, np.int32)
    tensors["model.layers.0.mlp.up_proj.weight"] = np.ones((512, 256), ml_dtypes.float8_e4m3fn)
    message = load_error(tmp_path, tensors)
    assert "'model.norm.weight' has dtype int32, weights must be F16, BF16, F32 or F64" in message
    assert "'model.layers.0.mlp.up_proj.weight' has dtype float8_e4m3fn" in message


def test_many_problems_are_counted_not_all_listed(tmp_path):
    config = dataclasses.replace(CONFIG, hidden_size=32, head_dim=8)
    message = load_error(tmp_path, tiny_tensors(), config)
    assert message.startswith("checkpoint does not match the config (20 problem(s)): ")
    assert "... 8 more" in message
