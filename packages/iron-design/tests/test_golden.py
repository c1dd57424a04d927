"""The MLIR of every design the project makes is pinned by a digest
(`data/mlir_digests.json`), so a change to the emitter moves exactly the
digests whose text it changes, and each move is explained where it is
made. Rewrite the file after an intended change with

    uv run python packages/iron-design/tests/test_golden.py

(with every family installed, as the workspace venv has them)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from every_design import catalog_designs, local_designs

from iron.design import to_mlir

DIGESTS = Path(__file__).parent / "data" / "mlir_digests.json"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pinned() -> dict[str, str]:
    return json.loads(DIGESTS.read_text())


def _compare(designs) -> None:
    known = pinned()
    moved, unpinned = [], []
    for key, design in designs:
        if key not in known:
            unpinned.append(key)
        elif digest(to_mlir(design)) != known[key]:
            moved.append(key)
    assert not unpinned, f"designs with no pinned digest: {unpinned}"
    assert not moved, f"the MLIR of these designs changed: {moved}"


def test_the_examples_and_test_designs_emit_their_pinned_mlir():
    _compare(local_designs())


@pytest.mark.slow
def test_every_catalog_design_emits_its_pinned_mlir():
    _compare(catalog_designs())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    table = {k: digest(to_mlir(d)) for k, d in [*local_designs(), *catalog_designs()]}
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(table)} digests written to {DIGESTS}")
