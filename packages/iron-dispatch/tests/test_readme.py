"""The README's graph function runs as written, with a real operator family,
and gives the bits its operators' references give when called by hand."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs(capsys):
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
        if "@graph" in b
    ]
    ns: dict = {}
    exec(compile(block, str(README), "exec"), ns)
    assert "block: 1 version(s)" in capsys.readouterr().out

    x, w = np.ones((4, 256), ns["bf16"]), ns["w"]
    (h,) = ns["RMSNorm"](size=1024, tile_size=256, weighted=True).call_reference(x, w)
    (s,) = ns["SiLU"](size=1024).call_reference(h.reshape(1024))
    (want,) = ns["ElementwiseMul"](size=1024).call_reference(s, h.reshape(1024))
    assert ns["y"].tobytes() == want.tobytes()
