import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "host.py"


@pytest.mark.bench
def test_host_benchmark_runs_and_reports_every_figure(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "200"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[1].strip() for line in result.stdout.splitlines()[2:]]
    assert rows[:3] == ["graph", "record + plan", "scratch planning"]
    assert "compile, warm (cache hit)" in rows and "one-step call, sim" in rows
    assert any(r.endswith("-step call, sim fused") for r in rows)
    assert "305 steps" in result.stdout
