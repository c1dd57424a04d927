import subprocess
import sys
from pathlib import Path

import pytest

from iron.alloc import LiveRange, live_ranges
from iron.alloc.bench import load_instance, random_steps

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "planner.py"


def test_csv_intervals_are_half_open(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text("id,lower,upper,size\n0,0,2,10\n1,2,3,20\n")
    ranges, sizes = load_instance(path)
    # [0, 2) and [2, 3) do not share a step
    assert ranges == {"0": LiveRange(0, 1), "1": LiveRange(2, 2)}
    assert sizes == {"0": 10, "1": 20}


def test_random_graph_is_reproducible_and_mostly_poolable():
    steps, sizes = random_steps(400, seed=5)
    assert (steps, sizes) == random_steps(400, seed=5)
    assert steps != random_steps(400, seed=6)[0]
    ranges = live_ranges(steps)
    assert 350 <= len(ranges) < 400  # the final chain heads are host outputs
    assert any(sum(name in reads for reads, _ in steps) > 1 for name in ranges)  # fan-out


@pytest.mark.bench
def test_quick_benchmark_prints_the_expected_rows():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = max(k for k, line in enumerate(lines) if line.startswith("| instance |"))
    table = []
    for line in lines[header + 2 :]:
        if not line.startswith("| "):
            break
        table.append(line)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert [(r[0], r[2]) for r in rows] == [
        ("minimalloc_A", "1"),
        ("minimalloc_A", "64"),
        ("minimalloc_F", "1"),
        ("minimalloc_F", "64"),
        ("random_300_seed0", "1"),
        ("random_300_seed0", "64"),
    ]
    for r in rows:
        naive, greedy, default, best = (float(cell) for cell in r[3:7])
        assert 1.0 <= best <= default <= greedy <= naive
    assert "- default never worse than greedy: met" in result.stdout
    assert "- best never worse than greedy: met" in result.stdout


def test_readme_example_runs():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(example, "README example", "exec"), {})


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    (script,) = [
        ep for ep in entry_points(group="console_scripts") if ep.name == "iron-alloc-bench"
    ]
    assert script.load().__module__ == "iron.alloc.bench"
