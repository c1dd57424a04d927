"""Weight loading: Gemma4ForCausalLM names, the language model of a
Gemma4ForConditionalGeneration checkpoint (its towers never read), and
every mismatch named."""

import json

import numpy as np
import pytest

from iron.gemma import CheckpointError, GemmaConfig, GemmaWeights, Oracle
from iron.gemma.synthetic import synthetic_config, synthetic_tensors
from iron.lm import Checkpoint, write_safetensors


@pytest.fixture(scope="module")
def config():
    return synthetic_config("tiny", 3)


def dense(config):
    return {name: np.concatenate(list(t.chunks())).reshape(t.shape)
            for name, t in synthetic_tensors(config).items()}  # fmt: skip


def test_conditional_generation_reads_only_the_language_model(tmp_path, config):
    tensors = {f"model.language_model.{name[len('model.'):]}": array
               for name, array in dense(config).items()}  # fmt: skip
    tensors["model.vision_tower.patch.weight"] = np.zeros((4, 4), np.float32)
    tensors["model.audio_tower.conv.weight"] = np.zeros((4, 4), np.float32)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    outer = {"model_type": "gemma4", "text_config": {**config.to_dict(), "model_type": "gemma4_text"},
             "vision_config": {}, "audio_config": {}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(outer))
    read = GemmaConfig.from_file(tmp_path)
    checkpoint = GemmaWeights.open_checkpoint(tmp_path, read)
    assert not any("tower" in name for name in checkpoint)
    weights = GemmaWeights.load(checkpoint, read)
    assert set(weights.tensors) == set(GemmaWeights.expected_shapes(config))

    direct = tmp_path / "causal"
    direct.mkdir()
    write_safetensors(direct / "model.safetensors", dense(config))
    (direct / "config.json").write_text(json.dumps(config.to_dict()))
    ids = [2, 7, 9, 11]
    assert np.array_equal(Oracle.from_pretrained(tmp_path).logits(ids),
                          Oracle.from_pretrained(direct).logits(ids))  # fmt: skip


def test_mismatches_are_named(tmp_path, config):
    tensors = dense(config)
    del tensors["model.layers.1.self_attn.q_norm.weight"]
    tensors["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"][:8]
    tensors["model.extra.weight"] = np.zeros(3, np.float32)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    with Checkpoint.open(tmp_path) as checkpoint, pytest.raises(CheckpointError) as error:
        GemmaWeights.load(checkpoint, config)
    message = str(error.value)
    assert "missing tensor 'model.layers.1.self_attn.q_norm.weight'" in message
    assert (
        "'model.layers.0.mlp.up_proj.weight' has shape (8, 512), the config needs (512, 512)"
        in message
    )
    assert "unexpected tensor 'model.extra.weight'" in message


def test_shared_layers_key_value_tensors_are_ignored(tmp_path):
    config = synthetic_config("tiny")
    assert config.is_kv_shared(3)
    tensors = dense(config)
    tensors["model.layers.3.self_attn.k_proj.weight"] = np.zeros((128, 512), np.float32)
    write_safetensors(tmp_path / "model.safetensors", tensors)
    checkpoint = Checkpoint.open(tmp_path)
    names = set(GemmaWeights.load(checkpoint, config).tensors)
    assert "model.layers.3.self_attn.k_proj.weight" not in names
    assert "model.layers.2.self_attn.k_proj.weight" in names
