"""The app command line, run through the bigram test app: every command,
the llama.cpp flags, --json, chat with history and /reset."""

import io
import json
import re
import xml.etree.ElementTree as ET

import bigram
import numpy as np
from bigram_cli import run

from iron.core.testing.pictures import rasterize
from iron.lm import OracleModel, Tokenizer
from iron.lm.cli import printable


def oracle_greedy(model_dir, ids, count, stop=()):
    """The oracle's greedy continuation, written here from its logits."""
    oracle, drawn = OracleModel(bigram.Oracle.from_pretrained(model_dir)), []
    logits = oracle.prefill(ids)
    while len(drawn) < count:
        drawn.append(int(np.argmax(logits)))
        if drawn[-1] in stop:
            break
        logits = oracle.decode(drawn[-1])
    return drawn


def test_help_shows_the_llama_cpp_flags_and_every_default(capsys):
    code, out, _ = run(capsys, "generate", "--help")
    assert code == 0
    for flag in ("-m DIR, --model DIR", "-p TEXT, --prompt TEXT", "-n NUM_TOKENS, --num-tokens",
                 "-s SEED, --seed SEED", "--temp TEMPERATURE, --temperature", "--top-k TOP_K",
                 "--top-p TOP_P", "-c N, --ctx-len N, --max-seq-len N", "--stop TEXT"):  # fmt: skip
        assert flag in out, flag
    flat = " ".join(out.split())
    for default in ("(default: 40)", "(default: 0.7)", "(default: 50)", "(default: 1.0)",
                    "(default: auto)"):  # fmt: skip
        assert default in flat, default
    code, out, _ = run(capsys, "--help")
    for command in ("demo", "generate", "chat", "serve", "check-accuracy", "check-determinism",
                    "plan", "make-synthetic"):  # fmt: skip
        assert command in out
    code, out, _ = run(capsys, "serve", "--help")
    assert "(default: 127.0.0.1)" in " ".join(out.split()) and "(default: 8)" in out


def test_version_names_the_app_and_iron_lm(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == "iron-bigram (iron-npu-lm 0.1.0)\n"


def test_generate_streams_the_oracles_greedy_text(bigram_dir, capsys):
    text = "Iron alone is soft."
    tokenizer = Tokenizer.from_pretrained(bigram_dir)
    ids = tokenizer.prompt(text)
    expected = tokenizer.decode(oracle_greedy(bigram_dir, ids, 8, stop=(1, 4)))
    code, out, err = run(capsys, "generate", "-m", bigram_dir, "-p", text, "-n", 8, "--temp", 0,
                         "--backend", "reference")  # fmt: skip
    assert code == 0 and out == text + printable(expected) + "\n"
    assert re.search(r"^backend +reference$", err, re.M) and "time to first token" in err


def test_generate_stops_at_a_stop_string_and_leaves_it_out(bigram_dir, capsys):
    text = "Carbon makes it hard."
    tokenizer = Tokenizer.from_pretrained(bigram_dir)
    full = tokenizer.decode(oracle_greedy(bigram_dir, tokenizer.prompt(text), 30, stop=(1, 4)))
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip() and stop in full
    code, out, _ = run(capsys, "generate", "-m", bigram_dir, "-p", text, "-n", 30, "--temp", 0,
                       "--stop", stop, "--backend", "reference")  # fmt: skip
    assert code == 0 and out == text + printable(full[: full.index(stop)]) + "\n"


def test_sampling_flags_reach_the_sampler_and_a_seed_repeats_the_draws(bigram_dir, capsys):
    argv = ("generate", "-m", bigram_dir, "-p", "Iron", "-n", 12, "--temp", 1.5, "--top-k", 40,
            "--top-p", 0.9, "-s", 7, "--backend", "reference")  # fmt: skip
    code, first, _ = run(capsys, *argv)
    assert code == 0 and run(capsys, *argv)[1] == first
    code, _, err = run(capsys, *argv[:-2], "--top-p", 1.5)
    assert code == 2 and "Sampler: top_p=1.5 must be a number in (0, 1]" in err


def test_check_accuracy_and_determinism_as_json(bigram_dir, capsys):
    code, out, err = run(capsys, "check-accuracy", "-m", bigram_dir, "--steps", 6, "--json",
                         "--backend", "reference")  # fmt: skip
    report = json.loads(out)
    assert code == 0 and report["passed"] is True and report["check"] == "accuracy"
    # the wait says what it is, on stderr (stdout is the JSON alone)
    assert "accuracy: 6 teacher-forced steps against the float32 oracle ..." in err
    assert report["steps"] == len(report["kl"]) == 6 and report["backend"] == "reference"
    assert 0 < report["mean_kl"] < report["bounds"]["mean_kl"]
    code, out, _ = run(capsys, "check-accuracy", "-m", bigram_dir, "--steps", 6, "--json",
                       "--max-kl", 0, "--backend", "reference")  # fmt: skip
    assert code == 1 and json.loads(out)["failures"][0].startswith("max (step")
    code, out, _ = run(capsys, "check-determinism", "-m", bigram_dir, "--rounds", 2, "--json",
                       "--backend", "reference")  # fmt: skip
    report = json.loads(out)
    assert code == 0 and report == {
        "model": str(bigram_dir), "prompt_tokens": report["prompt_tokens"],
        "backend": "reference", "check": "determinism", "passed": True, "rounds": 2,
        "tokens": 4, "compared": 2, "differing": [],
    }  # fmt: skip


def test_chat_keeps_the_history_and_forgets_it_on_reset(bigram_dir, capsys, monkeypatch):
    prompts = []
    prefill = bigram.Model.prefill
    monkeypatch.setattr(
        bigram.Model, "prefill", lambda self, ids: prompts.append(list(ids)) or prefill(self, ids)
    )
    monkeypatch.setattr(
        "sys.stdin", io.StringIO("Hello there\nHow are you?\n/reset\nAgain\n/exit\n")
    )
    code, out, err = run(capsys, "chat", "-m", bigram_dir, "--temp", 0, "-n", 6,
                         "--system", "Be brief.", "--backend", "reference")  # fmt: skip
    assert code == 0 and "/reset forgets the conversation" in err and "forgotten" in err
    tokenizer = Tokenizer.from_pretrained(bigram_dir)
    system = {"role": "system", "content": "Be brief."}
    first = [system, {"role": "user", "content": "Hello there"}]
    reply = tokenizer.decode(oracle_greedy(bigram_dir, tokenizer.chat_prompt(first), 6, (1, 4)))
    second = [*first, {"role": "assistant", "content": reply},
              {"role": "user", "content": "How are you?"}]  # fmt: skip
    third = [system, {"role": "user", "content": "Again"}]
    assert prompts == [tokenizer.chat_prompt(m) for m in (first, second, third)]
    assert out.startswith("> " + printable(reply) + "\n> ")


def test_chat_ends_at_end_of_input(bigram_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, _ = run(capsys, "chat", "-m", bigram_dir, "--backend", "reference")
    assert code == 0 and out == "> \n"


def test_chat_without_a_template_is_refused_before_loading(bigram_dir, tmp_path, capsys):
    model = tmp_path / "base"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (model / name).write_bytes((bigram_dir / name).read_bytes())
    code, _, err = run(capsys, "chat", "-m", model)
    assert code == 2 and "has no chat template" in err and "Instruct checkpoint" in err


def test_make_synthetic_and_the_demo(tmp_path, monkeypatch, capsys):
    code, out, _ = run(capsys, "make-synthetic", tmp_path / "m", "-s", 3)
    assert code == 0 and "synthetic tiny model (random weights, seed 3)" in out
    assert (tmp_path / "m" / "tokenizer_config.json").is_file()
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = run(capsys, "demo", "-n", 6)
    assert code == 0 and f"writing the model into {bigram.APP.demo_dir()} (once)" in err
    assert "a tiny synthetic bigram model (hidden 64)" in out
    assert "accuracy over 40 teacher-forced steps: PASS" in out
    sim, cpu = (
        "sim: NPU designs simulated on this CPU (not NPU speed)",
        "cpu: host kernels on this CPU",
    )
    assert re.search(rf"^backend +{re.escape(sim)} +{re.escape(cpu)}$", out, re.M)
    code, again, err = run(capsys, "demo", "-n", 6)
    assert code == 0 and "writing" not in err and again.split("\n\n")[1] == out.split("\n\n")[1]


def test_a_closed_stdout_ends_the_command_quietly(tmp_path, monkeypatch, capsys):
    def closed(app, args):
        raise BrokenPipeError

    monkeypatch.setattr("iron.lm.cli._make_synthetic", closed)
    code, _, err = run(capsys, "make-synthetic", tmp_path / "m")
    assert code == 141 and err == ""


def test_plan_draws_the_graphs_arena(bigram_dir, tmp_path, monkeypatch, capsys):
    code, out, _ = run(capsys, "plan", "-m", bigram_dir, "--svg", tmp_path / "plan.svg")
    assert code == 0 and f"wrote {tmp_path / 'plan.svg'}" in out and "version(s), arena" in out
    svg = (tmp_path / "plan.svg").read_text()
    tips = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")]
    kinds = {
        re.search(r" \((weights|states \(caches\)|transients)\): steps", t)[1] for t in tips[1:]
    }
    assert kinds == {"weights"}  # the bigram graph reads its two weights and keeps no state
    pixels = rasterize(svg, width=400)
    assert len({tuple(p) for p in pixels.reshape(-1, 4)}) > 4  # drawn, not blank
    # without --model: the demo's synthetic model, written first
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = run(capsys, "plan", "--svg", tmp_path / "demo.svg")
    assert code == 0 and "writing the model into" in err and (tmp_path / "demo.svg").is_file()
    code, _, err = run(capsys, "plan", "-m", bigram_dir)
    assert code == 2 and "the following arguments are required: --svg" in err
