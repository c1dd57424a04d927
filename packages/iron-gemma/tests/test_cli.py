"""The iron-gemma command line: iron-lm's app CLI over the Gemma model."""

import re

import numpy as np
import pytest
from gemma_cli import run

from iron.gemma import GemmaConfig, Model, Oracle, OracleModel, Tokenizer
from iron.gemma.cli import APP
from iron.gemma.synthetic import synthetic_config
from iron.lm.cli import printable


def test_make_synthetic_writes_a_gemma4_directory(tmp_path, capsys):
    code, _, _ = run(capsys, "make-synthetic", tmp_path / "m", "--preset", "tiny", "--layers", 3)
    assert code == 0
    config = GemmaConfig.from_file(tmp_path / "m")
    assert config == synthetic_config("tiny", 3)
    assert config.layer_types == ("sliding_attention", "sliding_attention", "full_attention")
    assert {p.name for p in (tmp_path / "m").iterdir()} >= {"chat_template.jinja", "tokenizer.json"}
    code, _, err = run(capsys, "make-synthetic", tmp_path / "n", "--preset", "e4b")
    assert code == 2 and "e4b" in err


def test_generate_streams_the_oracles_greedy_continuation(tiny_dir, capsys):
    text = "Iron alone is soft."
    ids = Tokenizer.from_pretrained(tiny_dir).prompt(text)
    oracle = OracleModel(Oracle.from_pretrained(tiny_dir))
    greedy = [int(np.argmax(oracle.prefill(ids)))]
    for _ in range(4):
        greedy.append(int(np.argmax(oracle.decode(greedy[-1]))))
    code, out, err = run(
        capsys, "generate", "--model", tiny_dir, "--prompt", text, "--num-tokens", 5,
        "--temperature", 0, "--backend", "cpu",
    )  # fmt: skip
    assert code == 0
    assert out == text + printable(Tokenizer.from_pretrained(tiny_dir).decode(greedy)) + "\n"
    assert "time to first token" in err


def test_chat_template_comes_from_the_tokenizer_files(tiny_dir):
    tokenizer = Tokenizer.from_pretrained(tiny_dir)
    ids = tokenizer.chat_prompt([{"role": "user", "content": "Hello"}])
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text == "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"


def test_chat_feeds_the_template_to_the_model(tiny_dir, capsys, monkeypatch):
    lines = iter(["Hello", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    fed = []
    prefill = Model.prefill
    monkeypatch.setattr(
        Model, "prefill", lambda self, ids: fed.append(list(ids)) or prefill(self, ids)
    )
    code, _, _ = run(capsys, "chat", "--model", tiny_dir, "--num-tokens", 3, "--seed", 1,
                     "--backend", "cpu")  # fmt: skip
    assert code == 0
    expected = Tokenizer.from_pretrained(tiny_dir).chat_prompt(
        [{"role": "user", "content": "Hello"}]
    )
    assert fed == [expected]


@pytest.mark.parametrize("weights", ["bf16", pytest.param("bfp16", marks=pytest.mark.slow)])
def test_check_accuracy_reports_each_weight_format(tiny_dir, capsys, weights):
    code, out, _ = run(capsys, "check-accuracy", "--model", tiny_dir, "--steps", 4,
                       "--weights", weights, "--backend", "cpu")  # fmt: skip
    assert code == 0 and "accuracy over 4 teacher-forced steps: PASS" in out
    code, out, _ = run(capsys, "check-accuracy", "--model", tiny_dir, "--steps", 4,
                       "--weights", weights, "--backend", "cpu", "--max-kl", 0)  # fmt: skip
    assert code == 1 and "FAIL" in out


def test_check_determinism_passes(tiny_dir, capsys):
    code, out, _ = run(capsys, "check-determinism", "--model", tiny_dir, "--rounds", 2,
                       "--backend", "cpu")  # fmt: skip
    assert code == 0 and "PASS, 0/2 runs differ bitwise" in out


def test_bad_input_exits_2_naming_the_rule(tiny_dir, capsys):
    code, _, err = run(capsys, "generate", "--model", tiny_dir, "--prompt", "x",
                       "--max-seq-len", 700)  # fmt: skip
    assert code == 2 and "Model: max_seq_len=700: a multiple of 128" in err
    code, _, err = run(capsys, "generate", "--model", tiny_dir, "--prompt", "x",
                       "--weights", "q4")  # fmt: skip
    assert code == 2 and "--weights" in err


@pytest.mark.slow
def test_demo_on_sim_with_the_cpu_figure_beside_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path))
    code, out, _ = run(capsys, "demo", "--num-tokens", "6")
    assert code == 0
    assert "a tiny synthetic Gemma 4 (5 layers" in out
    assert "functional simulator on this CPU" in out
    assert re.search(r"^backend +sim: NPU designs simulated on this CPU.* +cpu", out, re.M)
    assert re.search(r"device steps +(\d+) of \1 steps ran designs", out)
    assert "accuracy over 40 teacher-forced steps: PASS" in out
    assert (APP.demo_dir() / "config.json").is_file()


def test_model_flag_reaches_the_model(tiny_dir):
    model = Model.from_pretrained(tiny_dir, backend="cpu", weight_format="bfp16", progress=False)
    assert model.weight_format.value == "bfp16"
