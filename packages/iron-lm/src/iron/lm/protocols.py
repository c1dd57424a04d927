"""The contracts between iron-lm and a model app.

An app gives three things: a config (`ModelConfig`: what the shared code
reads of config.json), a model (`CausalLM`; an IRON graph one subclasses
`iron.lm.GraphModel`, which asks only for the graph, the weight names and
the per-call inputs) and an oracle (`Oracle`: float32 logits written from
the reference implementation's definitions, never from the operators).
Everything else (checks, generation, chat, the server, the CLI) is written
against these.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class CausalLM(Protocol):
    """A stateful next-token model: `prefill` starts a sequence, `decode` extends it."""

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        """Start a new sequence; return the logits (vocab,) after its last token."""
        ...

    def decode(self, token_id: int) -> np.ndarray:
        """Append one token; return the logits (vocab,) after it."""
        ...

    def reset(self) -> None:
        """Forget the current sequence."""
        ...


class ModelConfig(Protocol):
    """The fields of a model's config that the shared code reads. An app's
    config class reads config.json itself (`from_file`), refusing by name
    every field it does not implement, and checks `bos_token_id` and the
    end ids against `vocab_size`."""

    vocab_size: int
    max_position_embeddings: int
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """Read `path` (a config.json, or a directory holding one); errors
        are `iron.lm.ConfigError` naming the file, the field and the rule."""
        ...


class Oracle(Protocol):
    """Reference logits for a checkpoint, in float32, for every position."""

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Oracle:
        """Read config.json and the weights of the checkpoint directory `path`."""
        ...

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Float32 logits (len(token_ids), vocab_size): row i predicts token i + 1,
        computed with no cache from position 0."""
        ...


class OracleModel:
    """`CausalLM` over any `Oracle`: each step recomputes the whole sequence
    with `logits` (no cache, so it is exactly the oracle's definition). An
    app whose oracle keeps a KV cache gives its own, faster one."""

    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        self._ids: list[int] | None = None

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self._ids = [int(t) for t in token_ids]
        return self.oracle.logits(self._ids)[-1]

    def decode(self, token_id: int) -> np.ndarray:
        if self._ids is None:
            raise RuntimeError("OracleModel.decode: call prefill first")
        self._ids.append(int(token_id))
        return self.oracle.logits(self._ids)[-1]

    def reset(self) -> None:
        self._ids = None
