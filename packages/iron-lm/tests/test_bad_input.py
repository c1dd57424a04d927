"""Bad input to iron-lm's entry points, as a new user or a hostile one
gives it: special files where the model's files belong, token ids outside
the vocabulary, bad IRON_* values, Ctrl-C. Each is one line and exit 2 (130
for Ctrl-C), naming the file, the field or the variable."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import bigram
import numpy as np
import pytest
from bigram_cli import run

from iron.core.testing import undescribed_arguments
from iron.lm import (
    ChatTemplateError,
    Checkpoint,
    CheckpointError,
    ConfigError,
    GenerationConfig,
    SafetensorsFile,
    Tokenizer,
    write_safetensors,
)

BIGRAM = Path(bigram.__file__)


@contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging the suite) when the block blocks."""

    def expired(*_):
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def copy_model(bigram_dir: Path, tmp_path: Path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(bigram_dir, model)
    return model


# ---- special files are refused before they are opened (issue 28 item 2) ----


@pytest.mark.parametrize(
    "name",
    ["config.json", "tokenizer.json", "model.safetensors", "tokenizer_config.json",
     "generation_config.json"],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_model_file_that_is_a_fifo_or_a_device_exits_2_naming_it(
    bigram_dir, tmp_path, capsys, name, kind
):
    model = copy_model(bigram_dir, tmp_path)
    (model / name).unlink()
    if kind == "fifo":
        os.mkfifo(model / name)
    else:
        (model / name).symlink_to(kind)
    with deadline(20):
        code, _, err = run(capsys, "generate", "-m", model, "-p", "Iron", "-n", 2,
                           "--backend", "reference")  # fmt: skip
    assert code == 2, err
    assert f"{model / name}: is a" in err and "not a regular file" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_shard_that_is_a_fifo_is_refused(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", {"a": np.ones(2, np.float32)})
    os.mkfifo(tmp_path / "b.safetensors")
    index = {"weight_map": {"a": "a.safetensors", "b": "b.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with deadline(20), pytest.raises(CheckpointError, match=r"b\.safetensors: is a FIFO"):
        Checkpoint.open(tmp_path)


def test_the_check_is_made_on_the_open_file_too(tmp_path, monkeypatch):
    """A file swapped for a FIFO between the check and the open is refused:
    the open does not block and the descriptor is checked again."""
    import iron.core.files as files

    path = tmp_path / "config.json"
    os.mkfifo(path)
    regular = os.stat(tmp_path)  # stat says "regular" the first time only
    calls = []

    def stat(p, *args, **kwargs):
        calls.append(p)
        return os.stat_result((0o100644, *regular[1:])) if len(calls) == 1 else os.stat(p)

    monkeypatch.setattr(files.os, "stat", stat)
    with deadline(20), pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        files.read_json(path)


def test_writing_safetensors_over_a_fifo_is_refused_and_leaves_it(tmp_path):
    os.mkfifo(tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match="exists and is not a regular file"):
        write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)})
    assert (tmp_path / "m.safetensors").is_fifo()


# ---- ids outside the vocabulary are refused before loading (item 7) ----


@pytest.mark.parametrize(
    "name, field, value",
    [("config.json", "bos_token_id", 384), ("config.json", "eos_token_id", [1, 999]),
     ("generation_config.json", "eos_token_id", 384),
     ("generation_config.json", "bos_token_id", -1)],
)  # fmt: skip
def test_a_token_id_outside_the_vocabulary_is_refused_before_loading(
    bigram_dir, tmp_path, capsys, monkeypatch, name, field, value
):
    model = copy_model(bigram_dir, tmp_path)
    data = json.loads((model / name).read_text())
    (model / name).write_text(json.dumps({**data, field: value}))

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was opened")

    monkeypatch.setattr(Checkpoint, "open", never)
    code, _, err = run(capsys, "generate", "-m", model, "-p", "Iron", "--backend", "reference")
    assert code == 2 and f"{model / name}: {field}=" in err
    assert ("outside the vocabulary [0, 384)" if value != -1 else "non-negative") in err


def test_the_tokenizer_refuses_a_bos_outside_the_vocabulary_naming_the_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text(
        bigram._texts(bigram.synthetic_config())["tokenizer.json"]
    )
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 384, "bos_token_id": 400}))
    with pytest.raises(ConfigError, match=r"config\.json: bos_token_id=400: lies outside"):
        Tokenizer.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "field, value, rule",
    [("temperature", "0.7", "a number >= 0"), ("top_p", 1.5, "in (0, 1]"),
     ("top_k", 2.5, "an integer >= 0"), ("do_sample", "yes", "true or false")],
)  # fmt: skip
def test_generation_config_values_of_the_wrong_type_are_named(tmp_path, field, value, rule):
    (tmp_path / "generation_config.json").write_text(json.dumps({field: value}))
    with pytest.raises(ConfigError) as error:
        GenerationConfig.from_dir(tmp_path)
    assert f"generation_config.json: {field}={value!r}: must be" in str(error.value)
    assert rule in str(error.value)


def test_a_json_key_given_twice_is_refused(tmp_path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 1, "eos_token_id": 2}')
    with pytest.raises(ConfigError, match="key 'eos_token_id' appears twice"):
        GenerationConfig.from_dir(tmp_path)


def test_a_tensor_named_twice_in_a_header_is_refused(tmp_path):
    entry = '{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    header = f'{{"w": {entry}, "w": {entry}}}'.encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    with pytest.raises(CheckpointError, match="key 'w' appears twice in one object"):
        SafetensorsFile(path)


# ---- IRON_* values (item 5) ----


@pytest.mark.parametrize(
    "variable, value, rule",
    [("IRON_BACKEND", "bogus", "IRON_BACKEND='bogus': not a registered backend"),
     ("IRON_DEVICE", "npu9", "IRON_DEVICE='npu9': not a registered device"),
     ("IRON_POISON", "yes", "IRON_POISON='yes': a flag is 0 or 1")],
)  # fmt: skip
@pytest.mark.parametrize(
    "command", ["generate", "demo", "check-accuracy", "serve", "make-synthetic"]
)
def test_a_bad_iron_variable_is_one_line_and_exit_2_for_every_command(
    bigram_dir, tmp_path, capsys, monkeypatch, variable, value, rule, command
):
    monkeypatch.setenv(variable, value)
    arguments = {
        "generate": ["-m", bigram_dir, "-p", "Iron"],
        "demo": [],
        "check-accuracy": ["-m", bigram_dir],
        "serve": ["-m", bigram_dir, "--port", 0],
        "make-synthetic": [tmp_path / "m"],
    }[command]
    code, out, err = run(capsys, command, *arguments)
    assert code == 2 and err.startswith(f"iron-bigram {command}: error: {rule}")
    assert err.count("\n") == 1 and out == "" and not (tmp_path / "m").exists()


# ---- Ctrl-C (item 4) ----


def test_ctrl_c_during_generate_exits_130_with_one_line(bigram_dir, capsys, monkeypatch):
    def interrupted(self, token, pos):
        raise KeyboardInterrupt

    monkeypatch.setattr(bigram.Model, "run_decode", interrupted)
    code, _, err = run(capsys, "generate", "-m", bigram_dir, "-p", "Iron", "-n", 5,
                       "--backend", "reference")  # fmt: skip
    assert code == 130 and err == "iron-bigram generate: interrupted\n"


def interrupt(argv, wait_for: str, stream: str, stdin=subprocess.DEVNULL):
    """Run the app in a process of its own, send SIGINT once `wait_for`
    shows on its `stream` ("stdout" or "stderr"), and return (status, all
    of its stderr)."""
    process = subprocess.Popen(
        [sys.executable, str(BIGRAM), *map(str, argv)],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        watched, seen = getattr(process, stream), ""
        while wait_for not in seen:
            char = watched.read(1)
            assert char, f"the process ended before {wait_for!r} showed: {seen!r}"
            seen += char
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        return process.returncode, (seen if stream == "stderr" else "") + err
    finally:
        process.kill()
        process.wait()


def test_ctrl_c_ends_chat_and_a_busy_generate_quietly(bigram_dir):
    status, err = interrupt(["chat", "-m", bigram_dir, "--backend", "reference"],
                            "/exit (or Ctrl-D) ends it\n", "stderr", stdin=subprocess.PIPE)  # fmt: skip
    assert status == 130 and err.endswith("ends it\niron-bigram chat: interrupted\n")
    status, err = interrupt(["generate", "-m", bigram_dir, "-p", "Iron", "-n", 200, "--temp", 0,
                             "--seconds-per-token", 0.2, "--backend", "reference"],
                            "Iron", "stdout")  # fmt: skip
    assert status == 130 and err == "iron-bigram generate: interrupted\n"


# ---- JSON of the wrong type (issue 28 item 8) ----


@pytest.mark.parametrize(
    "change, rule",
    [({"vocab_size": "384"}, "vocab_size='384': must be a positive integer"),
     ({"vocab_size": 384.0}, "vocab_size=384.0: must be a positive integer"),
     ({"bos_token_id": "1"}, "bos_token_id='1': must be a non-negative integer"),
     ({"bos_token_id": 1.0}, "bos_token_id=1.0: must be a non-negative integer"),
     ({"text_config": "big"}, "text_config='big': must be an object")],
)  # fmt: skip
def test_the_tokenizer_refuses_config_values_of_the_wrong_type(bigram_dir, tmp_path, change, rule):
    model = copy_model(bigram_dir, tmp_path)
    data = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**data, **change}))
    with pytest.raises(ConfigError, match=re.escape(f"{model / 'config.json'}: {rule}")):
        Tokenizer.from_pretrained(model)


@pytest.mark.parametrize(
    "text, rule",
    [('{"chat_template": 3}', "must be a string, got int"),
     ('{"chat_template": "{{ x }}", "bos_token": 1}', "bos_token=1: must be a string or an obj"),
     ('{"chat_template": "a", "chat_template": "b"}', "key 'chat_template' appears twice")],
)  # fmt: skip
def test_tokenizer_config_values_of_the_wrong_type_or_given_twice_are_named(
    bigram_dir, tmp_path, text, rule
):
    model = copy_model(bigram_dir, tmp_path)
    (model / "tokenizer_config.json").write_text(text)
    with pytest.raises(ChatTemplateError, match=re.escape(rule)) as error:
        Tokenizer.from_pretrained(model)
    assert str(model / "tokenizer_config.json") in str(error.value)


# ---- every option described, one escaper (issue 31 item 4) ----


def test_every_option_and_argument_of_the_app_cli_is_described():
    assert undescribed_arguments(bigram.APP.parser()) == []


@pytest.mark.parametrize(
    "variable, value, rule",
    [("IRON_CACHE_HOME", "relative", "IRON_CACHE_HOME='relative': must be an absolute path"),
     ("IRON_PLUGINS", "typo", "IRON_PLUGINS='typo': no installed plugin is named typo")],
)  # fmt: skip
def test_every_iron_variable_is_checked_before_any_work(bigram_dir, capsys, monkeypatch,
                                                         variable, value, rule):  # fmt: skip
    monkeypatch.setenv(variable, value)
    code, out, err = run(capsys, "generate", "-m", bigram_dir, "-p", "Iron")
    assert code == 2 and err.startswith(f"iron-bigram generate: error: {rule}") and out == ""


def test_a_file_name_reaches_the_terminal_escaped(bigram_dir, tmp_path, capsys):
    model = tmp_path / "evil\x1b]0;owned\x07"
    shutil.copytree(bigram_dir, model)
    (model / "config.json").write_text("{")
    code, _, err = run(capsys, "generate", "-m", model, "-p", "Iron")
    assert code == 2 and "\x1b" not in err and "evil\\x1b]0;owned\\x07" in err
