import hashlib
import json
from importlib import metadata

import ml_dtypes
import numpy as np
import pytest

from iron.llama import (
    Checkpoint,
    LlamaConfig,
    LlamaWeights,
    Oracle,
    ensure_synthetic,
    make_synthetic,
    rope_inv_freq,
)
from iron.llama.cli import main
from iron.llama.synthetic import synthetic_config

FILES = ("config.json", "tokenizer.json", "model.safetensors")


def digests(directory):
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in FILES}


def test_same_seed_same_bytes(tiny_dir, tmp_path):
    again = make_synthetic(tmp_path / "again", seed=0)
    assert digests(again) == digests(tiny_dir)
    other = digests(make_synthetic(tmp_path / "other", seed=1))
    assert other["model.safetensors"] != digests(tiny_dir)["model.safetensors"]
    assert other["tokenizer.json"] == digests(tiny_dir)["tokenizer.json"]
    assert not list(tmp_path.rglob("*.partial"))


def test_tiny_preset_shape(tiny_dir):
    raw = json.loads((tiny_dir / "config.json").read_text())
    assert raw["rope_scaling"] == {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = LlamaConfig.from_file(tiny_dir)
    assert config == synthetic_config("tiny")
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.head_dim,
        config.intermediate_size,
    ) == (256, 2, 64, 512)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)  # GQA
    # head_dim 64 still meets all three llama3 bands: kept, smoothed, divided by 32
    scaled = rope_inv_freq(64, config.rope_theta, config.rope_scaling)
    plain = rope_inv_freq(64, config.rope_theta, None)
    assert (scaled == plain).sum() == 15 and np.isclose(scaled, plain / 32).sum() == 14
    assert config.tie_word_embeddings and config.max_position_embeddings > 8192
    tokenizer = json.loads((tiny_dir / "tokenizer.json").read_text())
    assert config.vocab_size == len(tokenizer["model"]["vocab"]) == 512
    assert tokenizer["model"]["type"] == "BPE" and tokenizer["pre_tokenizer"]["type"] == "ByteLevel"


def test_weights_have_the_documented_scales(tiny_dir):
    config = LlamaConfig.from_file(tiny_dir)
    weights = LlamaWeights.load(Checkpoint.open(tiny_dir), config)
    assert weights.embedding.dtype == ml_dtypes.bfloat16
    std = lambda a: float(np.std(a.astype(np.float64)))  # noqa: E731
    assert std(weights.layers[0].q) == pytest.approx(1 / 16, rel=0.05)  # N(0, 1/in), in = 256
    assert std(weights.layers[1].down) == pytest.approx(4 / np.sqrt(512), rel=0.05)
    assert std(weights.embedding) == pytest.approx(2 / 16, rel=0.05)
    assert float(np.mean(weights.norm.astype(np.float64))) == pytest.approx(1.0, abs=0.05)


def test_logits_are_not_degenerate(tiny_dir):
    logits = Oracle.from_pretrained(tiny_dir).logits([0, 5, 77, 300, 12, 401, 9, 9])
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(axis=-1)
    assert np.all(logits.std(axis=-1) > 1.0)
    assert np.all(entropy < 0.9 * np.log(512)) and np.all(
        entropy > 1.0
    )  # neither uniform nor one-hot
    assert len(set(logits.argmax(axis=-1))) > 3


def test_tensors_do_not_depend_on_the_layer_count(tiny_dir, tmp_path):
    one = Checkpoint.open(make_synthetic(tmp_path, layers=1))
    two = Checkpoint.open(tiny_dir)
    assert sum(".layers." in name for name in one) == 9
    for name in one:
        assert one[name].tobytes() == two[name].tobytes(), name


def test_1b_shaped_config_has_llama_32_1b_dimensions():
    config = synthetic_config("1b-shaped")
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.intermediate_size,
        config.vocab_size,
    ) == (2048, 16, 8192, 128256)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (32, 8, 64)
    assert synthetic_config("1b-shaped", layers=2).num_hidden_layers == 2


@pytest.mark.slow
def test_1b_shaped_checkpoint_loads(tmp_path):
    directory = make_synthetic(tmp_path, preset="1b-shaped", layers=1)
    config = LlamaConfig.from_file(directory)
    weights = LlamaWeights.load(Checkpoint.open(directory), config)
    assert weights.embedding.shape == (128256, 2048) and weights.layers[0].gate.shape == (
        8192,
        2048,
    )
    parameters = 128256 * 2048 + 60_821_504 + 2048  # embedding + one layer + final norm
    assert (directory / "model.safetensors").stat().st_size > 2 * parameters


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "7b"}, r"preset='7b' must be one of \['1b-shaped', 'tiny'\]"),
        ({"layers": 0}, "layers=0 must be a positive integer"),
        ({"seed": -1}, "seed=-1 must be a non-negative integer"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_synthetic(tmp_path / "m", **kwargs)
    assert not (tmp_path / "m" / "config.json").exists()


def test_cli_make_synthetic(tmp_path, capsys):
    assert main(["make-synthetic", str(tmp_path / "m"), "--layers", "1", "--seed", "3"]) == 0
    assert "synthetic tiny model (random weights, seed 3)" in capsys.readouterr().out
    assert digests(tmp_path / "m") == digests(make_synthetic(tmp_path / "direct", layers=1, seed=3))


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["make-synthetic", str(tmp_path), "--layers", "0"])
    assert exit_.value.code == 2
    assert (
        "iron-llama make-synthetic: error: make_synthetic: layers=0 must be a positive integer"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["make-synthetic", str(tmp_path), "--preset", "huge"])
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_console_script_is_declared():
    (script,) = metadata.entry_points(group="console_scripts", name="iron-llama")
    assert script.value == "iron.llama.cli:main"


def test_ensure_synthetic_writes_only_what_is_missing_or_wrong(tmp_path):
    directory = tmp_path / "m"
    assert ensure_synthetic(directory, layers=1)  # missing: written
    written = digests(directory)
    assert not ensure_synthetic(directory, layers=1)  # complete: kept
    assert digests(directory) == written
    assert ensure_synthetic(directory, layers=1, seed=1)  # another recipe: rewritten
    assert digests(directory)["model.safetensors"] != written["model.safetensors"]
    assert ensure_synthetic(directory, layers=1)
    assert digests(directory) == written
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-2])  # truncated
    assert ensure_synthetic(directory, layers=1) and digests(directory) == written
    (directory / "tokenizer.json").unlink()
    assert ensure_synthetic(directory, layers=1) and digests(directory) == written
