"""Bad input to iron-llama's entry points: a broken checkpoint fails its
check (exit 1), bad arguments and unreadable files exit 2 naming the file
and the rule, and nothing half-written is left behind."""

import json
import re
import shutil

import numpy as np
import pytest
from cli_runner import run

from iron.llama import Model, Tokenizer, TokenizerError, make_synthetic
from iron.llama.checkpoint import Checkpoint, CheckpointError, LazyTensor, write_safetensors
from iron.llama.checks import AccuracyBounds, check_accuracy, kl_divergence
from iron.llama.config import ConfigError, LlamaConfig
from iron.llama.synthetic import ensure_synthetic

BF16_NAN, BF16_INF = b"\xc0\x7f", b"\x80\x7f"


def poisoned(tiny_dir, tmp_path, value: bytes, tensor="model.norm.weight"):
    """A copy of the tiny model with every element of `tensor` set to `value`."""
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    with Checkpoint.open(model) as checkpoint:
        info = checkpoint.info(tensor)
    with open(model / "model.safetensors", "r+b") as f:
        f.seek(info.begin)
        f.write(value * ((info.end - info.begin) // 2))
    return model


# ---- item 1: a broken model fails its accuracy check ----


@pytest.mark.parametrize("value", [BF16_NAN, BF16_INF], ids=["nan", "inf"])
def test_check_accuracy_fails_a_checkpoint_with_non_finite_weights(
    tiny_dir, tmp_path, capsys, value
):
    model = poisoned(tiny_dir, tmp_path, value)
    code, out, _ = run(capsys, "check-accuracy", "--model", model, "--steps", 2,
                       "--backend", "reference")  # fmt: skip
    assert code == 1
    assert "FAIL" in out and "PASS" not in out
    assert "the oracle's logits are not finite from step 0" in out


def test_kl_of_non_finite_logits_is_nan_not_zero():
    nan = np.full(4, np.nan, np.float32)
    assert np.isnan(kl_divergence(nan, nan))
    assert np.isnan(kl_divergence(np.zeros(4), np.array([0, 0, np.inf, 0])))


class Fixed:
    """A CausalLM that answers the same logits at every position."""

    def __init__(self, logits):
        self.logits = np.asarray(logits, np.float32)

    def reset(self):
        pass

    def prefill(self, ids):
        return self.logits

    def decode(self, token):
        return self.logits


def test_a_report_names_the_side_whose_logits_are_not_finite():
    good, bad = Fixed([1.0, 2.0, 3.0]), Fixed([np.nan, 2.0, 3.0])
    report = check_accuracy(good, bad, [0], steps=2)
    assert not report.passed
    assert report.failures == [
        "the model's logits are not finite from step 0: the model computed NaN or Inf"
    ]
    assert check_accuracy(bad, bad, [0], steps=2).nonfinite == (
        (0, "oracle"), (0, "model"), (1, "oracle"), (1, "model"),
    )  # fmt: skip


@pytest.mark.parametrize("bound", ["nan", "inf", "-0.1"])
def test_check_accuracy_refuses_a_bound_that_is_not_a_finite_number(tiny_dir, capsys, bound):
    code, _, err = run(capsys, "check-accuracy", "--model", tiny_dir, "--max-kl", bound)
    assert code == 2 and "AccuracyBounds: max_kl=" in err and "a finite number >= 0" in err


def test_accuracy_bounds_refuse_non_numbers():
    with pytest.raises(
        TypeError, match=re.escape("AccuracyBounds: mean_kl='0.1': a number of nats")
    ):
        AccuracyBounds(mean_kl="0.1")


def test_generate_names_the_checkpoint_when_logits_go_non_finite(tiny_dir, tmp_path, capsys):
    model = poisoned(tiny_dir, tmp_path, BF16_NAN)
    code, _, err = run(capsys, "generate", "--model", model, "--prompt", "Iron",
                       "--num-tokens", 2, "--backend", "reference")  # fmt: skip
    assert code == 1
    assert "logits after 2 tokens hold NaN or Inf" in err
    assert f"the likely cause is the checkpoint in {model}" in err


# ---- item 5: absurd sizes are refused in O(1) ----


def test_a_config_with_a_billion_layers_is_refused_at_once(tiny_dir, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 10**9}))
    code, _, err = run(capsys, "check-accuracy", "--model", model)
    assert code == 2 and "num_hidden_layers=1000000000: at most 4096" in err
    assert str(model / "config.json") in err


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"vocab_size": 2**40}, "vocab_size=1099511627776: below 2**31"),
        ({"hidden_size": 2**24, "intermediate_size": 2**24}, "more than 17592186044416"),
    ],
)
def test_a_config_whose_weights_no_file_could_hold_is_refused(change, rule):
    base = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 512, "vocab_size": 512}  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(rule)):
        LlamaConfig.from_dict({**base, **change})


def test_make_synthetic_with_a_billion_layers_exits_2_at_once(tmp_path, capsys):
    code, _, err = run(capsys, "make-synthetic", tmp_path / "m", "--layers", 10**9)
    assert code == 2 and "num_hidden_layers=1000000000: at most 4096" in err
    assert not (tmp_path / "m").exists()


def test_a_checkpoint_naming_a_huge_layer_number_is_refused_at_once(tmp_path):
    tensors = {"model.layers.1000000000000.input_layernorm.weight": np.ones(4, np.float32)}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    from iron.llama.synthetic import synthetic_config
    from iron.llama.weights import LlamaWeights

    with Checkpoint.open(tmp_path) as checkpoint, pytest.raises(CheckpointError) as error:
        LlamaWeights.load(checkpoint, synthetic_config("tiny"))
    assert "layer(s) [1000000000000] beyond num_hidden_layers=2" in str(error.value)


# ---- item 6: files that cannot be read are named ----


@pytest.mark.parametrize("content", ["not json at all", '{"version": "1.0"}', "[1, 2]"])
def test_a_corrupt_tokenizer_json_exits_2_naming_it(tiny_dir, tmp_path, capsys, content):
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    (model / "tokenizer.json").write_text(content)
    code, _, err = run(capsys, "generate", "--model", model, "--prompt", "x")
    assert code == 2 and "Traceback" not in err
    assert (
        f"{model / 'tokenizer.json'}: not a tokenizer.json the tokenizers library can read" in err
    )
    with pytest.raises(TokenizerError):
        Tokenizer.from_pretrained(model)


@pytest.mark.parametrize("target", ["config.json", "tokenizer.json", "absent"])
def test_model_must_be_a_directory(tiny_dir, capsys, target):
    path = tiny_dir / target
    code, _, err = run(capsys, "check-accuracy", "--model", path)
    assert code == 2 and f"--model {path}:" in err
    assert ("is a file" if target != "absent" else "no such directory") in err


def test_an_index_whose_weight_map_is_a_list_is_named(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ["a", "b"]}')
    with pytest.raises(CheckpointError, match=r"weight_map must be an object .* got list"):
        Checkpoint.open(tmp_path)


def test_an_unreadable_config_names_the_file(tmp_path):
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'config.json'}: not UTF-8 text"):
        LlamaConfig.from_file(tmp_path)


def test_error_messages_do_not_carry_control_sequences(tmp_path, capsys):
    model = tmp_path / "evil\x1b]0;owned\x07"
    model.mkdir()
    code, _, err = run(capsys, "check-accuracy", "--model", model)
    assert code == 2 and "\x1b" not in err and "\x07" not in err


# ---- item 9: nothing half-written ----


class Interrupted(KeyboardInterrupt):
    pass


def test_an_interrupted_make_synthetic_leaves_the_old_model_whole(tmp_path):
    model = make_synthetic(tmp_path / "model")
    before = {p.name: p.read_bytes() for p in model.iterdir()}

    def interrupt(name):
        raise Interrupted

    with pytest.raises(Interrupted):
        make_synthetic(model, seed=1, progress=interrupt)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]


def test_make_synthetic_replaces_a_synthetic_model_whole(tmp_path):
    model = make_synthetic(tmp_path / "model")
    make_synthetic(model, seed=1)
    with Checkpoint.open(model) as checkpoint:
        assert '"seed": 1' in checkpoint.files[0].metadata["iron.synthetic"]
    assert sorted(p.name for p in model.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json",
    ]  # fmt: skip


def test_make_synthetic_refuses_a_directory_holding_other_files(tmp_path, capsys):
    model = tmp_path / "real"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "generation_config.json").write_text("{}")
    code, _, err = run(capsys, "make-synthetic", model)
    assert code == 2 and "holds files it did not write (generation_config.json)" in err
    assert (model / "config.json").read_text() == "{}"


def test_make_synthetic_leaves_a_real_checkpoint_alone(tmp_path, capsys):
    model = tmp_path / "real"
    model.mkdir()
    write_safetensors(model / "model.safetensors", {"w": np.ones(4, np.float32)})
    before = (model / "model.safetensors").read_bytes()
    code, _, err = run(capsys, "make-synthetic", model)
    assert code == 2 and "is not a synthetic model (no iron.synthetic metadata)" in err
    assert (model / "model.safetensors").read_bytes() == before


def test_two_writers_of_one_file_never_share_a_partial_name(tmp_path):
    path = tmp_path / "model.safetensors"
    inner = {"b": np.full(8, 2, np.float32)}
    outer_chunks = lambda: [np.ones(4, np.float32), np.ones(4, np.float32)]  # noqa: E731

    def meanwhile(name):  # a second writer runs while the first one is mid-file
        write_safetensors(path, inner)

    write_safetensors(path, {"a": LazyTensor(np.dtype(np.float32), (8,), outer_chunks)},
                      progress=meanwhile)  # fmt: skip
    with Checkpoint.open(tmp_path) as checkpoint:
        assert list(checkpoint) == ["a"]  # the last rename wins, whole
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_ensure_synthetic_after_a_killed_writer_clears_its_leftovers(tmp_path):
    (tmp_path / ".tiny.tmp-abc").mkdir()
    (tmp_path / ".tiny.tmp-abc" / "model.safetensors").write_bytes(b"x" * 100)
    assert ensure_synthetic(tmp_path / "tiny") is True
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny.lock", "tiny"]


# ---- item 10: a checkpoint truncated under a running model ----


def test_a_checkpoint_truncated_under_a_running_model_raises_instead_of_sigbus(tiny_dir, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_dir, model_dir)
    model = Model.from_pretrained(model_dir, backend="reference", progress=False)
    logits = model.prefill(model.tokenizer.prompt("Iron"))
    with open(model_dir / "model.safetensors", "r+b") as f:
        f.truncate(4096)
    with pytest.raises(CheckpointError, match="truncated to 4096 bytes while mapped"):
        model.decode(int(np.argmax(logits)))


def test_the_oracle_checks_its_file_before_reading_it(tiny_dir, tmp_path):
    from iron.llama import Oracle

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_dir, model_dir)
    oracle = Oracle.from_pretrained(model_dir)
    oracle.logits([0, 5])
    with open(model_dir / "model.safetensors", "r+b") as f:
        f.truncate(4096)
    with pytest.raises(CheckpointError, match="truncated to 4096 bytes while mapped"):
        oracle.logits([0, 5])


@pytest.mark.parametrize(
    "content, rule", [(b"\xff\xfe bad", "not UTF-8 text"), (None, "cannot read")]
)
def test_a_prompt_file_that_cannot_be_read_is_named(tiny_dir, tmp_path, capsys, content, rule):
    path = tmp_path / "prompt.txt"
    if content is not None:
        path.write_bytes(content)
    code, _, err = run(capsys, "generate", "--model", tiny_dir, "--prompt-file", path)
    assert code == 2 and f"--prompt-file {path}: {rule}" in err


# ---- second round (issue 28): special files, ids outside the vocabulary, IRON_*, Ctrl-C ----


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_a_model_file_that_is_a_fifo_exits_2_naming_it(tiny_dir, tmp_path, capsys, name):
    import os

    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    (model / name).unlink()
    os.mkfifo(model / name)
    code, _, err = run(capsys, "generate", "--model", model, "--prompt", "Iron",
                       "--backend", "reference")  # fmt: skip
    assert code == 2 and f"{model / name}: is a FIFO, not a regular file" in err


def test_a_bos_outside_the_vocabulary_is_refused_before_loading(tiny_dir, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "bos_token_id": 512}))
    code, _, err = run(capsys, "check-accuracy", "--model", model)
    assert code == 2
    assert f"{model / 'config.json'}: bos_token_id=512: lies outside the vocabulary [0, 512)" in err
    with pytest.raises(ConfigError, match="bos_token_id=512: lies outside"):
        LlamaConfig.from_file(model)


def test_a_bad_iron_backend_is_one_line_and_exit_2(tiny_dir, capsys, monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "bogus")
    for argv in (["demo"], ["generate", "--model", tiny_dir, "--prompt", "Iron"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1
        assert "IRON_BACKEND='bogus': not a registered backend" in err
    with pytest.raises(ValueError, match="IRON_BACKEND='bogus'"):
        Model.from_pretrained(tiny_dir, progress=False)


def test_ctrl_c_during_generate_exits_130_with_one_line(tiny_dir, capsys, monkeypatch):
    def interrupted(self, token_id):
        raise KeyboardInterrupt

    monkeypatch.setattr(Model, "decode", interrupted)
    code, _, err = run(capsys, "generate", "--model", tiny_dir, "--prompt", "Iron",
                       "--backend", "reference")  # fmt: skip
    assert code == 130 and err == "iron-llama generate: interrupted\n"
