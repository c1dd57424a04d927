"""The README's graph function runs as written, with a real operator family,
and gives the bits its operators' references give when called by hand."""

from pathlib import Path

import numpy as np

from iron.core.testing.readme import readme_blocks

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs(capsys):
    block = next(b.code for b in readme_blocks(README) if "@graph(backend" in b.code)
    ns: dict = {}
    exec(compile(block, str(README), "exec"), ns)
    assert "block: 1 version(s)" in capsys.readouterr().out

    x, w = np.ones((4, 256), ns["bf16"]), ns["w"]
    (h,) = ns["RMSNorm"](size=1024, tile_size=256, weighted=True).call_reference(x, w)
    (s,) = ns["SiLU"](size=1024).call_reference(h.reshape(1024))
    (want,) = ns["ElementwiseMul"](size=1024).call_reference(s, h.reshape(1024))
    assert ns["y"].tobytes() == want.tobytes()
