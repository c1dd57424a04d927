"""The pieces iron-lm gives every app: the weight check, config.json
reading, the synthetic recipe."""

import json

import numpy as np
import pytest

from iron.lm import Checkpoint, CheckpointError, ConfigError, write_safetensors
from iron.lm.checkpoint import check_weights
from iron.lm.config import read_config, required_fields
from iron.lm.synthetic import SyntheticRecipe, normal_tensor


def _checkpoint(tmp_path, tensors):
    write_safetensors(tmp_path / "model.safetensors", tensors)
    return Checkpoint.open(tmp_path)


def test_check_weights_lists_every_problem_after_the_apps_own(tmp_path):
    tensors = {
        "a": np.zeros((2, 3), np.float32),
        "b": np.zeros((4,), np.int32),
        "extra": np.zeros((1,), np.float32),
        "skipped": np.zeros((1,), np.float32),
    }
    expected = {"a": (3, 2), "b": (4,), "c": (5,)}
    with _checkpoint(tmp_path, tensors) as checkpoint, pytest.raises(CheckpointError) as error:
        check_weights(checkpoint, expected, ["the app's own"], ignored=["skipped"])
    message = str(error.value)
    assert "(5 problem(s)): the app's own; missing tensor 'c'" in message
    assert "unexpected tensor 'extra'" in message and "'skipped'" not in message
    assert "tensor 'a' has shape (2, 3), the config needs (3, 2)" in message
    assert "tensor 'b' has dtype int32" in message


def test_check_weights_passes_a_matching_checkpoint(tmp_path):
    with _checkpoint(tmp_path, {"a": np.zeros((2, 3), np.float32)}) as checkpoint:
        check_weights(checkpoint, {"a": (2, 3)})


def test_read_config_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_config(tmp_path, dict)
    (tmp_path / "config.json").write_text(json.dumps({"x": 1}))
    assert read_config(tmp_path, dict) == {"x": 1}

    def needs_y(data):
        required_fields(data, ("x", "y"))

    with pytest.raises(ConfigError, match=r"config\.json: missing required field\(s\) y"):
        read_config(tmp_path / "config.json", needs_y)


class _Config(dict):
    def to_dict(self):
        return dict(self)


def _recipe(written):
    def tensors(config, seed):
        written.append(seed)
        return {"w": normal_tensor("w", (config["n"],), 0.0, 1.0, seed)}

    return SyntheticRecipe(
        presets=("tiny",),
        config=lambda preset, layers: _Config(n=layers or 4),
        read_config=lambda directory: _Config(read_config(directory, dict)),
        expected_shapes=lambda config: {"w": (config["n"],)},
        tensors=tensors,
        files={"notes.txt": lambda: "hello"},
    )


def test_recipe_ensure_writes_only_what_is_missing_or_another_recipe(tmp_path):
    written = []
    recipe = _recipe(written)
    assert recipe.ensure(tmp_path / "m", seed=1) is True
    assert (tmp_path / "m" / "notes.txt").read_text() == "hello"
    assert recipe.ensure(tmp_path / "m", seed=1) is False
    (tmp_path / "m" / "notes.txt").unlink()
    assert recipe.ensure(tmp_path / "m", seed=1) is True
    assert recipe.ensure(tmp_path / "m", layers=3, seed=1) is True
    assert written == [1, 1, 1]
    with pytest.raises(ValueError, match="seed=-1 must be a non-negative integer"):
        recipe.make(tmp_path / "m", seed=-1)
