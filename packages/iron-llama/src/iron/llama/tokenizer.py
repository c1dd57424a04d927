"""`Tokenizer`: a thin wrapper over a Hugging Face `tokenizer.json` (the `tokenizers` library).

A prompt is BOS followed by the encoded text with no other special tokens
(`prompt(text)`); `stream()` decodes generated ids one at a time without
splitting a multi-byte character across two pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tokenizers
from tokenizers.decoders import DecodeStream

from iron.llama.config import LlamaConfig


class TokenizerError(ValueError):
    """A tokenizer.json that cannot be read."""


class Tokenizer:
    """Text <-> token ids for one model; `bos_token_id` usually comes from config.json."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, bos_token_id: int | None = None):
        self.tokenizer = tokenizer
        self.bos_token_id = bos_token_id

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Tokenizer:
        """Read `path`/tokenizer.json (or `path` itself when it is a file); BOS
        from the config.json beside it."""
        path = Path(path)
        directory, file = (path, path / "tokenizer.json") if path.is_dir() else (path.parent, path)
        if not file.exists():
            raise FileNotFoundError(
                f"{file}: no such file (a model directory needs tokenizer.json)"
            )
        config = directory / "config.json"
        bos = LlamaConfig.from_file(config).bos_token_id if config.exists() else None
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(file))
        except Exception as error:  # the library raises a bare Exception for any bad file
            raise TokenizerError(
                f"{file}: not a tokenizer.json the tokenizers library can read "
                f"({str(error).splitlines()[0] if str(error) else type(error).__name__})"
            ) from None
        return cls(tokenizer, bos)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def prompt(self, text: str) -> list[int]:
        """[BOS] + encode(text): what the model is fed."""
        if self.bos_token_id is None:
            raise ValueError(
                "Tokenizer.prompt: no bos_token_id (config.json has none and none was given)"
            )
        return [self.bos_token_id, *self.encode(text)]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def stream(self, skip_special_tokens: bool = True) -> TextStream:
        """A fresh incremental decoder for one generation."""
        return TextStream(self, skip_special_tokens)


class TextStream:
    """Incremental decode: `push(id)` returns the text that id completes ("" while
    a multi-byte character is still partial). The pieces add up to `decode(ids)`."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tokenizer = tokenizer.tokenizer
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)

    def push(self, token_id: int) -> str:
        return self._stream.step(self._tokenizer, int(token_id)) or ""
