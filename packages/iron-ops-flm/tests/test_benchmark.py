"""The benchmarks run, their numbers are the bytes worked out by hand, and
the README holds their current tables."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"

#: the benchmark scripts run: `nox -s bench` (the slow one: `nox -s slow`)
pytestmark = pytest.mark.bench


def load(name="traffic"):
    spec = importlib.util.spec_from_file_location(f"flm_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_mode(capsys):
    assert load().main(["--quick"]) == 0
    out = capsys.readouterr().out
    # E2B gateup at M=2048: 2048 x 1536 x 6144 on npu2, tile_n 64, 8 units:
    # A re-read once per 512 columns (12 x 6 MiB), packed B 1536*6144*9/8 bytes
    # read once (10.1 MiB) against once per unit (81.0), C 24 MiB
    assert (
        "| E2B gateup M2048 | 2048x1536x6144 | resident x1 | 72.0 | 10.1 | 81.0 | 24.0 | "
        "87.5% | 40.0% |" in out
    )
    assert (
        "| E4B down M2048 | 2048x10240x2560 | streamed | 200.0 | 225.0 | 225.0 | 10.0 | "
        "0.0% | 0.0% |" in out
    )
    assert "simulator check (512x1536x1024)" in out and "equal to the patterns' sums" in out


def test_readme_holds_the_current_table(capsys):
    module = load()
    module.main([])
    table = capsys.readouterr().out.strip()
    readme = module.README.read_text()
    assert f"<!-- bench:traffic -->\n{table}\n<!-- /bench:traffic -->" in readme


def test_designs_table_is_measured_and_current(capsys):
    module = load("designs")
    module.main([])
    table = capsys.readouterr().out.strip()
    # npu2, 256 x 512 x 1024 (tile_n 128, resident): 32 cores; A once (256*512*2),
    # B its packed size once (512*1024/8 blocks of 9 bytes), C once (256*1024*2)
    assert "| npu2 | M=256,K=512,N=1024 | ok | 32 |" in table
    assert "| 262144 | 589824 | 589824 | 524288 | within tolerance |" in table
    # capacity 1024 at M = 512: A's first 512 rows read (512*512*2), C's 1024 written
    # (rows 512.. as the cores' zeros, 1024*1024*2)
    assert "| npu2 | K=512,N=1024,max_M=1024,M=512 | ok | 32 |" in table
    assert "| 524288 | 589824 | 589824 | 2097152 | within tolerance |" in table
    # npu1 has no block floats: the bfp16 cases are refused by that rule
    assert table.count("refused: FLMGemm: b_format='bfp16'") == 4
    assert table.count("refused: DequantBFP: device=npu1") == 2
    # DequantBFP, 1024 x 128: q once (5 * 128 * 1024 / 8), B once (1024 * 128 / 8 * 9)
    assert "| npu2 | K=1024,N=128 | ok | 2 |" in table
    assert "| 81920 | 81920 | 147456 | 147456 | byte for byte |" in table
    assert "violation" not in table and "OUTSIDE" not in table and "DIFFERS" not in table
    readme = module.README.read_text()
    assert f"<!-- bench:designs -->\n{table}\n<!-- /bench:designs -->" in readme


def test_gemma4_benchmark_runs_at_small_widths(capsys):
    assert load("gemma4").main(["--quick"]) == 0
    out = capsys.readouterr().out
    for row in ("| LMHead |", "| PrefillSlidingAttention |", "| DecodeLayer swa_skip |"):
        assert row in out
    # every layer type reads its weights once: DDR a few percent above them
    traffic = [line for line in out.splitlines() if line.startswith(("| global", "| swa"))]
    assert len(traffic) == 4
    for line in traffic:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == cells[2] and 1.0 < float(cells[-1]) < 1.1


@pytest.mark.slow
def test_readme_holds_the_current_gemma4_traffic(capsys):
    """The DDR bytes are counted, not timed: the README's table is this run's."""
    module = load("gemma4")
    table = module.markdown_table(module.TRAFFIC_HEADER, module.traffic_rows(quick=False))
    assert (
        f"<!-- bench:gemma4-traffic -->\n{table}\n<!-- /bench:gemma4-traffic -->"
        in module.README.read_text()
    )
