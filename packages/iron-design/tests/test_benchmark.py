import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "simulate.py"


@pytest.mark.bench
def test_simulate_benchmark_runs_and_checks_its_answers():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()[2:]]
    assert [r[0].strip() for r in rows] == [
        "add_one, 1024-element objects",
        "add_one, 4096-element objects",
    ]
    assert [r[1].strip() for r in rows] == ["65,536", "1,048,576"]
    assert all(float(r[3]) > 0 for r in rows)
