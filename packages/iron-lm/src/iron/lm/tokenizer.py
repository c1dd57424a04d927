"""`Tokenizer`: a Hugging Face `tokenizer.json` (the `tokenizers` library),
with the chat template of the tokenizer_config.json beside it.

A prompt is BOS followed by the encoded text with no other special tokens
(`prompt(text)`); a chat prompt is the template's text encoded as it is
(the template spells out BOS and the turn markers, `chat_prompt(messages)`);
`stream()` decodes generated ids one at a time without splitting a
multi-byte character across two pieces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers.decoders import DecodeStream

from iron.core.files import read_json, read_text
from iron.lm.chat import ChatTemplate, ChatTemplateError
from iron.lm.config import ConfigError, in_file, is_int, require, token_ids

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
_UNSET: Any = object()


class TokenizerError(ValueError):
    """A tokenizer.json that cannot be read."""


class Tokenizer:
    """Text <-> token ids for one model; `bos_token_id` usually comes from
    config.json, `chat_template` from tokenizer_config.json."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        bos_token_id: int | None = None,
        chat_template: ChatTemplate | None = None,
    ):
        self.tokenizer = tokenizer
        self.bos_token_id = bos_token_id
        self.chat_template = chat_template

    @classmethod
    def from_pretrained(cls, path: str | Path, bos_token_id: int | None = _UNSET) -> Tokenizer:
        """Read `path`/tokenizer.json (or `path` itself when it is a file) and
        the tokenizer_config.json beside it; BOS, unless given, from the
        config.json beside it (checked against its vocabulary, naming the
        file and the field, before anything is loaded)."""
        path = Path(path)
        directory, file = (path, path / TOKENIZER_FILE) if path.is_dir() else (path.parent, path)
        if not file.exists():
            raise FileNotFoundError(
                f"{file}: no such file (a model directory needs {TOKENIZER_FILE})"
            )
        if bos_token_id is _UNSET:
            bos_token_id = _bos_from_config(directory / "config.json")
        try:
            tokenizer = tokenizers.Tokenizer.from_str(read_text(file, TokenizerError))
        except TokenizerError:
            raise
        except Exception as error:  # the library raises a bare Exception for any bad file
            raise TokenizerError(
                f"{file}: not a tokenizer.json the tokenizers library can read "
                f"({str(error).splitlines()[0] if str(error) else type(error).__name__})"
            ) from None
        template_config = directory / TOKENIZER_CONFIG
        template = None
        if template_config.exists() or (directory / "chat_template.jinja").exists():
            data = read_json(template_config, ChatTemplateError) if template_config.exists() else {}
            template = ChatTemplate.from_config(directory, data, template_config)
        return cls(tokenizer, bos_token_id, template)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(self, text: str) -> int | None:
        """The id of a token written out (a special token such as "<|eot_id|>")."""
        return self.tokenizer.token_to_id(text)

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

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> list[int]:
        """The token ids of the chat template over `messages`, ready for the
        assistant's reply (`ChatTemplate.render`)."""
        template = self.require_chat_template()
        return self.encode(template.render(messages, add_generation_prompt, **extra))

    def require_chat_template(self) -> ChatTemplate:
        """The chat template, or `ChatTemplateError` saying there is none."""
        if self.chat_template is None:
            raise ChatTemplateError(
                "this tokenizer has no chat template (tokenizer_config.json has no "
                "chat_template and there is no chat_template.jinja): chat needs an "
                "Instruct checkpoint's tokenizer files"
            )
        return self.chat_template

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def stream(self, skip_special_tokens: bool = True) -> TextStream:
        """A fresh incremental decoder for one generation."""
        return TextStream(self, skip_special_tokens)


def _bos_from_config(path: Path) -> int | None:
    """config.json's `bos_token_id`, inside its `vocab_size` (or its
    `text_config`'s, for a multimodal checkpoint); None without the file."""
    if not path.exists() and not path.is_symlink():
        return None
    data = read_json(path, ConfigError)

    def read() -> int | None:
        text = data.get("text_config", {})
        require("text_config", text, isinstance(text, dict), "must be an object")
        vocab = data.get("vocab_size", text.get("vocab_size"))
        ok = vocab is None or (is_int(vocab) and vocab > 0)
        require("vocab_size", vocab, ok, "must be a positive integer")
        bos = data.get("bos_token_id", text.get("bos_token_id"))
        ids = token_ids("bos_token_id", bos, vocab)
        if len(ids) > 1:
            raise ConfigError(f"bos_token_id={bos!r}: must be one token id")
        return ids[0] if ids else None

    return in_file(path, read)


class TextStream:
    """Incremental decode: `push(id)` returns the text that id completes ("" while
    a multi-byte character is still partial). The pieces add up to `decode(ids)`."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tokenizer = tokenizer.tokenizer
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)

    def push(self, token_id: int) -> str:
        return self._stream.step(self._tokenizer, int(token_id)) or ""
