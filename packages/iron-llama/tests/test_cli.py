import io
import logging
import re
import sys
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from cli_runner import run

import iron.core.terminal
from iron.core import hookimpl, registry
from iron.core.testing import undescribed_arguments
from iron.dispatch.backends.reference import ReferenceBackend
from iron.llama import Model, Oracle, OracleModel, Tokenizer
from iron.llama.cli import _parser, demo_dir, main, paragraphs, printable


def test_demo_end_to_end_in_a_fresh_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path))
    assert demo_dir() == tmp_path / "models" / "tiny"
    code, out, err = run(capsys, "demo", "--num-tokens", "12")
    assert code == 0
    assert f"writing the model into {demo_dir()}" in err
    assert "random (seed 0)" in out and "gibberish by design" in out
    assert "functional simulator on this CPU" in out and "not an NPU's" in out
    # the sim run's text, then the cpu run's and whether it drew the same tokens
    sim_text, cpu_text, agreement = [
        line for line in out.splitlines() if line.startswith(("Iron is the fourth", "cpu"))
    ][:3]
    assert sim_text.startswith("Iron is the fourth most common element")
    assert cpu_text.startswith("Iron is the fourth most common element")
    same = agreement == "cpu drew the same 12 tokens as sim."
    assert same == (sim_text == cpu_text) and (same or "part from sim's at token" in agreement)
    # a status line before every phase that may take seconds, in order
    phases = [line for line in err.splitlines() if line.startswith("iron-llama: ")]
    assert [p.split(":")[1].strip() for p in phases] == [
        "writing the model into " + str(demo_dir()).split(":")[0] + " (once) ...",
        "sim", "sim", "cpu", "cpu", "accuracy",
    ]  # fmt: skip
    assert re.search(
        r"^backend +sim: NPU designs simulated on this CPU \(not NPU speed\) +cpu", out, re.M
    )
    for row in (
        "backend",
        "device steps",
        "time to first token",
        "decode",
        "peak RSS",
        "steady RSS",
    ):
        assert row in out
    # the bar: on sim every step of the Llama graph runs its design
    assert re.search(r"device steps +(\d+) of \1 steps ran designs(  |\n)", out)
    assert "accuracy over 40 teacher-forced steps: PASS" in out and "top-1 mismatches" in out
    assert (demo_dir() / "config.json").is_file()

    code, again, err = run(capsys, "demo", "--num-tokens", "12")
    assert code == 0 and "writing the model" not in err
    # the same seed, the same text
    assert again.split("\n\n")[1] == out.split("\n\n")[1]

    weights = demo_dir() / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated: rebuilt, not served
    code, out, err = run(capsys, "demo", "--num-tokens", "4")
    assert code == 0 and f"writing the model into {demo_dir()}" in err


def test_demo_on_a_missing_npu_refuses_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path))
    from iron.dispatch.selection import get_backend

    if get_backend("npu").available()[0]:
        pytest.skip("this machine has an NPU: nothing to refuse")
    code, out, err = run(capsys, "demo", "--backend", "npu")
    assert code == 2 and out == "" and "backend 'npu' is not available here" in err
    assert not any(tmp_path.iterdir())  # no model written, nothing compiled


def test_logs_wait_until_the_streamed_text_ends(tiny_dir, monkeypatch):
    """stdout and stderr as one terminal: the prompt, its text and nothing
    else on one line; the 64-row compile a short prompt needs is logged after."""
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", screen)
    try:
        code = main(["-v", "generate", "-m", str(tiny_dir), "-p", "Iron", "-n", "6", "--temp", "0",
                     "--backend", "reference"])  # fmt: skip
    finally:
        logging.getLogger().handlers.clear()
    lines = screen.getvalue().splitlines()
    assert code == 0
    (streamed,) = [i for i, line in enumerate(lines) if line.startswith("Iron")]
    assert "iron." not in lines[streamed] and "compiling" not in lines[streamed]
    compiled = [i for i, line in enumerate(lines) if "compiling the 64-row version" in line]
    assert compiled and compiled[0] > streamed
    assert not any("{" in line for line in lines if line.startswith("iron."))  # no raw dicts


def test_generate_streams_the_prompt_and_its_continuation(tiny_dir, capsys):
    text = "Iron alone is soft."
    ids = Tokenizer.from_pretrained(tiny_dir).prompt(text)
    oracle = OracleModel(Oracle.from_pretrained(tiny_dir))
    logits = oracle.prefill(ids)
    greedy = [int(np.argmax(logits))]
    for _ in range(4):
        greedy.append(int(np.argmax(oracle.decode(greedy[-1]))))
    code, out, err = run(
        capsys, "generate", "--model", tiny_dir, "--prompt", text, "--num-tokens", 5,
        "--temperature", 0, "--backend", "reference",
    )  # fmt: skip
    assert code == 0
    continuation = Tokenizer.from_pretrained(tiny_dir).decode(greedy)
    assert out == text + printable(continuation) + "\n"
    assert "backend" in err and "reference" in err and "time to first token" in err


def test_generate_from_a_prompt_file_with_sampling(tiny_dir, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Carbon makes it hard.", encoding="utf-8")
    argv = ("generate", "--model", tiny_dir, "--prompt-file", prompt, "--seed", 3)
    code, first, _ = run(capsys, *argv, "--num-tokens", 6)
    assert code == 0 and first.startswith("Carbon makes it hard.")
    assert run(capsys, *argv, "--num-tokens", 6)[1] == first  # seeded: the same draws


def test_a_prompt_that_does_not_fit_fails_before_loading(tiny_dir, monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Model, "from_pretrained", never)
    text = paragraphs()[0]
    tokens = len(Tokenizer.from_pretrained(tiny_dir).prompt(text))
    code, _, err = run(
        capsys, "generate", "--model", tiny_dir, "--prompt", text, "--num-tokens", 200,
        "--max-seq-len", 256,
    )  # fmt: skip
    assert code == 2
    assert (
        f"iron-llama generate: error: the prompt of {tokens} tokens and 200 new tokens need "
        f"{tokens + 200} positions; max_seq_len is 256 tokens" in err
    )


def test_check_accuracy_passes_and_fails_an_impossible_bound(tiny_dir, capsys):
    code, out, _ = run(capsys, "check-accuracy", "--model", tiny_dir, "--steps", 10)
    assert code == 0
    # auto: the npu where present, else the host kernels
    assert "backend cpu" in out and "accuracy over 10 teacher-forced steps: PASS" in out
    code, out, _ = run(capsys, "check-accuracy", "--model", tiny_dir, "--steps", 10,
                       "--max-kl", 0)  # fmt: skip
    assert code == 1
    assert "FAIL" in out and "failed: max (step" in out and "> 0" in out


def test_check_determinism_passes_and_catches_a_perturbed_model(tiny_dir, monkeypatch, capsys):
    code, out, _ = run(capsys, "check-determinism", "--model", tiny_dir, "--rounds", 2)
    assert code == 0 and "PASS, 0/2 runs differ bitwise" in out

    decode = Model.decode
    calls = iter(range(10**6))

    def drifting(self, token_id):  # a state that leaks from one run into the next
        return decode(self, token_id) + np.float32(1e-3 * next(calls))

    monkeypatch.setattr(Model, "decode", drifting)
    code, out, _ = run(capsys, "check-determinism", "--model", tiny_dir, "--rounds", 2)
    assert code == 1 and "FAIL, 2/2 runs differ bitwise" in out
    assert "prompt 0 round 1: logits differ from round 0 at step 1" in out


def test_bad_input_exits_2_naming_the_rule(tiny_dir, tmp_path, capsys):
    code, _, err = run(capsys, "check-determinism", "--model", tiny_dir, "--max-seq-len", 300)
    assert code == 2 and "Model: max_seq_len=300: a multiple of 256" in err
    code, _, err = run(capsys, "generate", "--model", tmp_path, "--prompt", "x")
    assert code == 2 and "a model directory needs tokenizer.json" in err
    code, _, err = run(capsys, "generate", "--model", tiny_dir, "--prompt", "x", "--top-k", -1)
    assert code == 2 and "Sampler: top_k=-1 must be a positive integer" in err
    code, _, err = run(capsys, "generate", "--model", tiny_dir)
    assert code == 2 and "one of the arguments --prompt --prompt-file is required" in err


def test_control_characters_are_shown_not_sent_to_the_terminal():
    assert printable is iron.core.terminal.printable  # one escaper for every command
    assert printable("a\x1b[2Jb\n\tc\x00") == "a\\x1b[2Jb\n\tc\\x00"
    assert printable("\x7f\x9b31m é鉄") == "\\x7f\\x9b31m é鉄"


class ThirdParty(ReferenceBackend):
    name = "third-party"


class ThirdPartyPlugin:
    @staticmethod
    @hookimpl
    def iron_register_backends(register):
        register("third-party", "third_party_backend:ThirdParty")


def test_backend_accepts_any_registered_backend(tiny_dir, capsys, monkeypatch):
    code, _, err = run(capsys, "demo", "--backend", "third-party", "--num-tokens", "1")
    assert code == 2 and "invalid choice: 'third-party'" in err
    module = types.ModuleType("third_party_backend")
    module.ThirdParty = ThirdParty
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry.register_plugin(ThirdPartyPlugin, name="third-party-backend")
    try:
        code, _, err = run(
            capsys, "generate", "--model", tiny_dir, "--prompt", "Iron", "--num-tokens", 2,
            "--backend", "third-party",
        )  # fmt: skip
    finally:
        registry.unregister_plugin("third-party-backend")
    assert code == 0 and re.search(r"^backend +third-party$", err, flags=re.M)


def test_version_and_every_option_described(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("iron-npu-llama 0.1.0 (iron-npu-lm 0.1.0)")
    assert undescribed_arguments(_parser()) == []


def test_plan_draws_weights_kv_caches_and_transients(tiny_dir, tmp_path, capsys):
    code, out, _ = run(capsys, "plan", "-m", tiny_dir, "--svg", tmp_path / "plan.svg")
    assert code == 0 and "llama: 3 version(s)" in out
    svg = (tmp_path / "plan.svg").read_text()
    tips = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")][1:]
    kinds = {}
    for tip in tips:
        name, kind = re.match(r"(.*) \((weights|states|transients)\): steps", tip).groups()
        kinds.setdefault(kind, set()).add(name)
    caches = {f"{kv}.{i}" for kv in ("keys", "values") for i in range(2)}
    assert caches <= kinds["states"]
    assert len(kinds["weights"]) == 2 * 9 + 2  # 9 per layer, the final norm, the tied head
    assert len(kinds["transients"]) > 20
