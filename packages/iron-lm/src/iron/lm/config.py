"""What a model directory's JSON files say, checked field by field.

An app's own config class reads config.json (its dimensions are its own);
the helpers here are the shared rules: `require` names the field, the value
and the rule; `token_ids` reads a token id or a list of them; and
`GenerationConfig` reads generation_config.json (the end-of-sequence ids an
Instruct checkpoint stops at, and its sampling defaults). Every token id is
checked against the vocabulary before anything is loaded, naming the file
and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iron.core.files import read_json

GENERATION_FILE = "generation_config.json"


class ConfigError(ValueError):
    """A model file this package cannot run: the message names the field,
    the value and the rule (and the file, when read from one)."""


def require(field: str, value: Any, ok: bool, rule: str) -> None:
    """Raise `ConfigError("field=value: rule")` unless `ok`."""
    if not ok:
        raise ConfigError(f"{field}={value!r}: {rule}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (JSON true is not 1 here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def token_ids(field: str, value: Any, vocab_size: int | None = None) -> tuple[int, ...]:
    """A config's token id field (absent, one id, or a list of ids) as a
    tuple; each a non-negative integer inside the vocabulary when
    `vocab_size` is given."""
    ids = () if value is None else tuple(value) if isinstance(value, list) else (value,)
    for token in ids:
        require(field, value, is_int(token) and token >= 0, "must be a non-negative integer")
        if vocab_size is not None:
            require(
                field,
                value,
                token < vocab_size,
                f"lies outside the vocabulary [0, {vocab_size}) of vocab_size",
            )
    return ids


def positive_ints(config: Any, names: Sequence[str]) -> None:
    """Require each field `names` of `config` to be a positive integer."""
    for name in names:
        value = getattr(config, name)
        require(name, value, is_int(value) and value > 0, "must be a positive integer")


def required_fields(data: dict[str, Any], names: Sequence[str]) -> None:
    """Require the parsed config.json `data` to hold every field `names`."""
    missing = [name for name in names if data.get(name) is None]
    if missing:
        raise ConfigError(f"missing required field(s) {', '.join(missing)}")


def token_ids_value(ids: Sequence[int]) -> int | list[int]:
    """Token ids as config.json spells them: one id alone, else a list."""
    return list(ids) if len(ids) != 1 else ids[0]


def read_config(path: str | Path, from_dict: Callable[[Any], Any]):
    """`from_dict` of the JSON at `path` (a config.json, or a directory
    holding one), the file named in any `ConfigError`."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = read_json(path, ConfigError)  # a FIFO or a device is refused unopened
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (a model directory needs config.json)") from None
    return in_file(path, lambda: from_dict(data))


def in_file(path: Path, read):
    """`read()` with the file named in any `ConfigError` it raises."""
    try:
        return read()
    except ConfigError as error:
        if str(error).startswith(str(path)):
            raise
        raise ConfigError(f"{path}: {error}") from None


@dataclass(frozen=True)
class GenerationConfig:
    """generation_config.json: the ids generation stops at and the sampling
    defaults the checkpoint's authors chose (None where the file is silent).
    An absent file is an empty config."""

    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    @classmethod
    def from_dir(cls, directory: str | Path, vocab_size: int | None = None) -> GenerationConfig:
        """Read `directory`/generation_config.json, each token id checked
        against `vocab_size` when given."""
        path = Path(directory) / GENERATION_FILE
        if not path.exists() and not path.is_symlink():
            return cls()
        data = read_json(path, ConfigError)
        return in_file(path, lambda: cls.from_dict(data, vocab_size))

    @classmethod
    def from_dict(cls, data: dict[str, Any], vocab_size: int | None = None) -> GenerationConfig:
        bos = token_ids("bos_token_id", data.get("bos_token_id"), vocab_size)
        require("bos_token_id", data.get("bos_token_id"), len(bos) <= 1, "must be one token id")
        do_sample, temperature = data.get("do_sample"), data.get("temperature")
        top_k, top_p = data.get("top_k"), data.get("top_p")
        require(
            "do_sample",
            do_sample,
            do_sample is None or isinstance(do_sample, bool),
            "must be true or false",
        )
        require(
            "temperature",
            temperature,
            temperature is None or (is_number(temperature) and temperature >= 0),
            "must be a number >= 0",
        )
        require(
            "top_k",
            top_k,
            top_k is None or (is_int(top_k) and top_k >= 0),
            "must be an integer >= 0",
        )
        require(
            "top_p",
            top_p,
            top_p is None or (is_number(top_p) and 0 < top_p <= 1),
            "must be a number in (0, 1]",
        )
        return cls(
            bos_token_id=bos[0] if bos else None,
            eos_token_ids=token_ids("eos_token_id", data.get("eos_token_id"), vocab_size),
            do_sample=do_sample,
            temperature=None if temperature is None else float(temperature),
            top_k=top_k or None,  # 0 means no limit, as None does here
            top_p=None if top_p is None else float(top_p),
        )
