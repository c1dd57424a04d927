"""The traffic benchmark runs, its numbers are the bytes worked out by hand,
and the README holds its current table."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "traffic.py"


def load():
    spec = importlib.util.spec_from_file_location("flm_traffic", SCRIPT)
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
    assert "model check (512x1536x1024)" in out and "equal to the program's count" in out


def test_readme_holds_the_current_table(capsys):
    module = load()
    module.main([])
    table = capsys.readouterr().out.strip()
    readme = module.README.read_text()
    assert f"<!-- bench:traffic -->\n{table}\n<!-- /bench:traffic -->" in readme
