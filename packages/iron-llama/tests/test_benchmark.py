import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "decode.py"

#: the benchmark scripts run: `nox -s bench` (the slow one: `nox -s slow`)
pytestmark = pytest.mark.bench


def test_decode_benchmark_quick_run_reports_every_figure(tmp_path):
    """Two interleaved rounds: every figure a median, every round's pairs."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--model-dir", str(tmp_path / "tiny"),
         "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [
        line.split("|")[1].strip() for line in result.stdout.splitlines() if line.startswith("| ")
    ]
    assert rows == [
        "measure",
        "load (read, compile, upload)",
        "time to first token (16-token prompt)",
        "decode (4 steps)",
        "peak RSS (VmHWM)",
        "steady RSS (VmRSS)",
    ]
    for backend in ("cpu", "reference"):
        mean, agree = re.search(
            rf"{backend}: KL\(oracle \|\| graph\) mean ([\d.e+-]+).*agrees at (\d+)/5",
            result.stdout,
        ).groups()
        assert 0 < float(mean) < 0.02 and int(agree) >= 4
    assert "one run, medians of 2 interleaved rounds:" in result.stdout
    share = r"\((\d+)% of the limit; (\d+)%-(\d+)% over 8 pairs\)"
    speeds = re.search(
        rf"decode \(4 steps\) \| ([\d.]+) tokens/s {share} \| ([\d.]+) tokens/s {share} "
        r"\| ([\d.]+) tokens/s \|",
        result.stdout,
    )
    assert speeds and all(float(speeds.group(i)) > 0 for i in (1, 5, 9))
    for low, median, high in ((3, 2, 4), (7, 6, 8)):  # each side's pairs: range holds the median
        assert int(speeds.group(low)) <= int(speeds.group(median)) <= int(speeds.group(high))
    assert re.search(r"a 2-thread read stream moves [\d.]+ GB/s here", result.stdout)
    assert re.search(
        r"Weights read per second while decoding: cpu [\d.]+ (GB|MB|kB|B)/s\.", result.stdout
    )
    # the tiny model's figures in units that show them, not "0.00 GB" or "at least 0 ms"
    weights, unit = re.search(
        r"a token reads ([\d.]+) (GB|MB|kB|B) of weights", result.stdout
    ).groups()
    floor = re.search(r"a first token takes at least ([\d.,e+-]+) ms", result.stdout)[1]
    assert float(weights) > 0 and unit != "GB" and float(floor.replace(",", "")) > 0


def test_decode_benchmark_refuses_an_interpreter_without_transformers(tmp_path):
    missing = tmp_path / "no-python"
    no_torch = tmp_path / "no-torch"
    no_torch.write_text(
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
    )
    no_torch.chmod(0o755)
    for python, says in ((missing, "cannot run it"), (no_torch, "No module named 'torch'")):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--quick", "--model-dir", str(tmp_path / "tiny"),
             "--transformers", str(python)],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 2 and f"--transformers {python}" in result.stderr
        assert says in result.stderr
        assert not (tmp_path / "tiny").exists()  # refused before any side ran


def test_decode_benchmark_refuses_llama_cpp_without_its_converter_or_module(tmp_path):
    converter = tmp_path / "convert_hf_to_gguf.py"
    converter.write_text("")
    for extra, says in (
        ([], "--llama-cpp needs --gguf-converter"),
        (["--gguf-converter", str(tmp_path / "absent.py")], "--llama-cpp needs --gguf-converter"),
        (["--gguf-converter", str(converter)], "cannot import llama_cpp, gguf"),
    ):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--quick", "--model-dir", str(tmp_path / "tiny"),
             "--llama-cpp", sys.executable, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        if "cannot import" in says and result.returncode == 0:
            pytest.skip("this interpreter has llama_cpp and gguf")
        assert result.returncode == 2 and says in result.stderr
        assert not (tmp_path / "tiny").exists()


def test_the_table_gives_the_cpu_side_as_ratios_to_llama_cpp():
    spec = importlib.util.spec_from_file_location("decode_benchmark", SCRIPT)
    decode = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(decode)
    side = {"load": 1.0, "peak": None, "steady": None, "rounds": 3}
    figures = {
        "cpu": {**side, "ttft": 0.6, "decode": 0.04, "paired": [0.5, 0.6, 0.7]},
        "reference": {**side, "ttft": 0.9, "decode": 0.1, "paired": [0.2]},
        decode.LLAMA_SIDE: {**side, "ttft": 0.3, "decode": 0.05},
    }
    text = decode.table(figures, {}, [2e10], int(1e9), "label", 128, 32)
    assert "one run, medians of 3 interleaved rounds:" in text
    assert (
        "| measure | IRON graph, cpu backend | IRON graph, reference backend | llama.cpp bf16 |"
        in text
    )
    assert "decode 1.25x its speed (25.00 against 20.00 tokens/s)" in text
    assert "time to first token 2.00x its time (600 ms against 300 ms)" in text
    assert "cpu 25.00 GB/s, llama.cpp bf16 20.00 GB/s." in text


def test_decode_benchmark_runs_transformers_beside_the_graph(tmp_path):
    """`--transformers PYTHON`: transformers on the same checkpoint and fed
    tokens; its float32 side is the oracle's own numerics, so its KL is
    float32 round-off. Runs where torch and transformers are installed."""
    pytest.importorskip("torch", reason="the transformers sides need torch (not a dependency)")
    pytest.importorskip("transformers", reason="the transformers sides need transformers")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--model-dir", str(tmp_path / "tiny"),
         "--transformers", sys.executable],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("| measure"))
    assert header.endswith("| transformers bf16 | transformers float32 |")
    kl = {
        dtype: float(mean)
        for dtype, mean in re.findall(
            r"KL\(oracle \|\| transformers (\w+)\) mean ([\d.e+-]+).*agrees at [45]/5",
            result.stdout,
        )
    }
    assert kl.keys() == {"bf16", "float32"}
    assert kl["float32"] < 1e-6 < kl["bf16"] < 0.02


@pytest.mark.slow
def test_sim_decode_benchmark_measures_the_ratio_and_where_a_token_goes(tmp_path):
    script = SCRIPT.parent / "sim_decode.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick", "--model-dir", str(tmp_path / "tiny")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    ratio = re.search(
        r"sim / reference: ([\d.]+)x \(medians of 2 interleaved rounds", result.stdout
    )
    assert ratio and float(ratio[1]) > 1  # the simulator runs every design: slower than numpy
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:-1]
        for line in result.stdout.splitlines()
        if line.startswith("| ")
    }
    # a replay hands each GEMV design's kernel calls to the batch form at once: one
    # compute per GEMV a token, 7 projections in each of the 2 layers and the head
    matvec = rows["kernel model `_matvec_rows` (batched: computes)"]
    assert int(matvec[2].strip().replace(",", "")) == 15
    shares = [float(r[0].strip()[:-1]) for r in rows.values() if r[0].strip().endswith("%")]
    assert 95 < sum(shares) < 105


def test_compile_cache_benchmark_quick_run_counts_nothing_built_on_a_hit():
    script = Path(__file__).parents[1] / "benchmarks" / "compile_cache.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    rows = {
        cells[0]: cells[1:]
        for line in result.stdout.splitlines()
        if line.startswith("| ") and (cells := [c.strip() for c in line.strip("|").split("|")])
    }
    for plan in ("full ELF", "xclbin"):
        cold, hit = rows[f"{plan}, cold"], rows[f"{plan}, cache hit"]
        assert int(cold[2]) > 0 and int(cold[3]) == 3  # designs built, one program set a version
        assert hit[2:4] == ["0", "0"] and "(3 of 3 hit)" in hit[5]
