"""Byte ranges of named buffers: how a step names part of a buffer (one row
of a KV cache). A step's argument is a buffer name (`str`) or a `View`;
every layer reads the two types, and `View.parse` is the one place that
reads the ``"base[start:stop]"`` text a person may write."""

from __future__ import annotations

import re

import attrs

_TEXT = re.compile(r"(?P<base>[^\[\]]+)\[(?P<start>\d+):(?P<stop>\d+)\]")


@attrs.frozen
class View:
    """Bytes `start` up to (not including) `stop` of buffer `base`."""

    base: str
    start: int
    stop: int

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.base, str) or not self.base or "[" in self.base:
            raise ValueError(f"View: base must be a buffer name without '[', got {self.base!r}")
        ints = all(type(v) is int for v in (self.start, self.stop))
        if not ints or not 0 <= self.start < self.stop:
            raise ValueError(
                f"View {self.base}: start={self.start!r}, stop={self.stop!r}: byte offsets "
                "with 0 <= start < stop"
            )

    @property
    def nbytes(self) -> int:
        return self.stop - self.start

    def __str__(self) -> str:
        return f"{self.base}[{self.start}:{self.stop}]"

    @classmethod
    def parse(cls, text: str) -> str | View:
        """``"kv[32:48]"`` -> ``View("kv", 32, 48)``; a name without brackets
        is returned as it is; anything else with a bracket is refused."""
        if "[" not in text and "]" not in text:
            return text
        match = _TEXT.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is neither a buffer name nor a view 'base[start:stop]'")
        return cls(match["base"], int(match["start"]), int(match["stop"]))


def base_of(ref: str | View) -> str:
    """The buffer a step argument lives in: a view's base, or the name itself."""
    return ref.base if isinstance(ref, View) else ref
