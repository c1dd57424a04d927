import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "cli_start.py"


@pytest.mark.bench
def test_cli_start_benchmark_times_each_command_against_the_import():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines()[2:5]]
    assert [r[0].strip() for r in rows] == [
        '`python -c "import iron.core"`',
        "`iron ops list`",
        "`iron doctor`",
    ]
    assert rows[0][2].strip() == "1.00x" and all(float(r[1]) > 0 for r in rows)
    assert all(r[3].strip() in ("met", "NOT met") for r in rows[1:])
    assert "Medians of 1 interleaved rounds" in result.stdout
