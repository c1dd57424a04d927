"""Chat templates: the Jinja template a model ships (tokenizer_config.json's
`chat_template`, or `chat_template.jinja` beside it), rendered the way
transformers' `apply_chat_template` renders it, so a prompt built here is
the prompt the model was trained on.

The environment is transformers': a sandbox (a template cannot reach
Python), `trim_blocks` and `lstrip_blocks` on, the `loopcontrols`
extension, `tojson` that keeps non-ASCII text, `raise_exception(message)`
and `strftime_now(format)` as globals, and the `{% generation %}` block
(which marks the assistant's text for training masks) rendered as its
body. The variables are `messages`, `add_generation_prompt`, `tools` and
`documents` (None), the tokenizer's special tokens by name (`bos_token`,
`eos_token`, ...) and any extra ones the caller gives (`date_string`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import jinja2
import jinja2.ext
import jinja2.sandbox
from jinja2 import nodes

from iron.core.files import read_text

#: the file newer checkpoints keep their template in, beside tokenizer_config.json
TEMPLATE_FILE = "chat_template.jinja"
ROLES = ("system", "user", "assistant", "tool")


class ChatTemplateError(ValueError):
    """A template that cannot be compiled, or refuses the conversation
    (its own `raise_exception`), named with the file it came from."""


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: its body, as transformers renders it."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str):
    raise jinja2.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _environment() -> jinja2.Environment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env


class ChatTemplate:
    """One model's chat template. `render(messages)` is the prompt text (its
    special tokens spelled out: encode it without adding any)."""

    def __init__(
        self, source: str, special_tokens: Mapping[str, str] | None = None, origin: str = "template"
    ):
        self.source, self.origin = source, origin
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(
                f"{origin}: the chat template does not compile: {error.message} "
                f"(template line {error.lineno})"
            ) from None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The template over `messages` ({"role", "content"} each; a content
        given as text parts is joined into one string first), with the
        assistant's header after them when `add_generation_prompt`."""
        check_messages(messages)
        try:
            return self._template.render(
                messages=_plain_text(messages),
                add_generation_prompt=add_generation_prompt,
                tools=None,
                documents=None,
                **self.special_tokens,
                **extra,
            )
        except jinja2.TemplateError as error:
            raise ChatTemplateError(f"{self.origin}: the chat template refused: {error}") from None

    @classmethod
    def from_config(
        cls, directory: Path, config: Mapping[str, Any], config_path: Path
    ) -> ChatTemplate | None:
        """The template of a tokenizer directory: `chat_template.jinja` when
        present, else tokenizer_config.json's `chat_template` (a string, or a
        list of named templates of which "default" is taken); None without one."""
        special = special_tokens(config, config_path)
        jinja = directory / TEMPLATE_FILE
        if jinja.exists():
            return cls(read_text(jinja, ChatTemplateError), special, str(jinja))
        source = config.get("chat_template")
        origin = f"{config_path} (chat_template)"
        if source is None:
            return None
        if isinstance(source, list):
            named = {t.get("name"): t.get("template") for t in source if isinstance(t, Mapping)}
            source = named.get("default")
            if source is None:
                raise ChatTemplateError(
                    f"{origin}: a list of templates needs one named 'default' "
                    f"(names: {sorted(str(n) for n in named)})"
                )
        if not isinstance(source, str):
            raise ChatTemplateError(f"{origin}: must be a string, got {type(source).__name__}")
        return cls(source, special, origin)


def special_tokens(config: Mapping[str, Any], path: Path) -> dict[str, str]:
    """tokenizer_config.json's special tokens by name (`bos_token`, ...): a
    string, or an object whose `content` is one (how transformers writes an
    AddedToken). The `add_*_token` switches beside them are not tokens."""
    found = {}
    for key, value in config.items():
        if not key.endswith("_token") or key.startswith("add_") or value is None:
            continue
        if isinstance(value, Mapping):
            value = value.get("content")
        if not isinstance(value, str):
            raise ChatTemplateError(
                f"{path}: {key}={value!r}: must be a string or an object with a string content"
            )
        found[key] = value
    return found


def check_messages(messages: object) -> None:
    """Refuse what no template can render: the conversation must be a list
    of objects with a known `role` and a `content` that is text (or a list
    of {"type": "text", "text": ...} parts, as OpenAI's API allows)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChatTemplateError("messages: must be a non-empty list of {role, content} objects")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(
                f"messages[{i}]: must be an object, got {type(message).__name__}"
            )
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ChatTemplateError(f"messages[{i}].role={role!r}: must be one of {list(ROLES)}")
        if isinstance(content, list):
            if not all(
                isinstance(part, Mapping)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
                for part in content
            ):
                raise ChatTemplateError(
                    f"messages[{i}].content: a list must hold only "
                    '{"type": "text", "text": ...} parts (this model reads text)'
                )
        elif not isinstance(content, str):
            raise ChatTemplateError(
                f"messages[{i}].content: must be text, got {type(content).__name__}"
            )


def _plain_text(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """`messages` with every content as one string, the form most templates expect."""
    return [
        {
            **m,
            "content": m["content"]
            if isinstance(m["content"], str)
            else "".join(part["text"] for part in m["content"]),
        }
        for m in messages
    ]
