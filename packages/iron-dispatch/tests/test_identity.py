"""What keys the compile cache: source digests that notice edits, and every
part of a runlist that changes its image."""

import importlib
import os
import sys

import numpy as np
from dispatch_fakes import N, Shift

from iron.core import bf16, capture
from iron.dispatch import OperatorSequence, get_backend, run
from iron.dispatch.identity import Sources, key_text

MODULE = """
import attrs
from iron.core import Operator, Tolerance, same_shape_unary

@attrs.frozen
class Edited(Operator):
    size: int

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x):
        return x{suffix}

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
"""


def test_an_edited_operator_module_changes_its_code_identity(tmp_path, monkeypatch):
    path = tmp_path / "edited_operator.py"
    path.write_text(MODULE.format(suffix=""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "edited_operator", raising=False)
    cls = importlib.import_module("edited_operator").Edited
    sources = Sources()
    before = sources.code_identity(cls)
    assert sources.code_identity(cls) == before  # unchanged: the same digest
    path.write_text(MODULE.format(suffix=".copy()"))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a later edit
    assert sources.code_identity(cls) != before
    assert len(sources.project_digest()) == 64


def shift_twice(first, second):
    with capture("shift") as g:
        x = g.input("x", N)
        pos = g.scalar("pos")
        g(Shift(N), g(Shift(N), x, offset=first(pos)), offset=second(pos))
    return OperatorSequence.from_graph(g)


def test_the_key_holds_each_steps_bindings():
    a = shift_twice(lambda p: p, lambda p: p * 2)
    b = shift_twice(lambda p: p, lambda p: p * 3)
    parts = {"backend": "sim"}
    sources = Sources()
    assert key_text(a.runlist, a.layout, parts, sources) != key_text(
        b.runlist, b.layout, parts, sources
    )
    sim = get_backend("sim")
    images = [sim.compile(s.runlist, s.layout) for s in (a, b)]
    assert [str(e) for e in images[0].parameters] == ["pos", "2*pos"]
    assert [str(e) for e in images[1].parameters] == ["pos", "3*pos"]
    x = np.zeros(N, bf16)
    (y,) = run(b, {"x": x}, values={"pos": 1}, backend="sim").values()
    assert (y == 4).all()
