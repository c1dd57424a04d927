"""Generation over any `CausalLM`: tokens drawn one at a time, and the text
they make, streamed to a callback.

`sample_tokens` is the loop (prefill, then draw and decode until a stop
token or the budget); `complete` turns it into text for a person or a
client: pieces as their tokens complete them, stop strings cut out of the
text (a piece that could be the start of one is held back until it is
known not to be), and why it ended ("stop" or "length", as OpenAI's API
says it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from iron.lm.checks import logits_broken
from iron.lm.protocols import CausalLM
from iron.lm.sampling import Sampler
from iron.lm.tokenizer import Tokenizer


class NonFiniteLogits(ValueError):
    """The model computed NaN or Inf logits: a broken model, not bad input."""


def check_fits(prompt_tokens: int, new_tokens: int, max_seq_len: int) -> None:
    """Refuse a generation whose prompt and new tokens exceed the cache."""
    if prompt_tokens + new_tokens > max_seq_len:
        raise ValueError(
            f"the prompt of {prompt_tokens} tokens and {new_tokens} new tokens need "
            f"{prompt_tokens + new_tokens} positions; max_seq_len is {max_seq_len} tokens "
            "(shorten the prompt, ask for fewer tokens or raise max_seq_len)"
        )


def sample_tokens(
    model: CausalLM,
    prompt: Sequence[int],
    num_tokens: int,
    sampler: Sampler,
    stop_tokens: Collection[int] = (),
    source: str = "the model",
) -> Iterator[int]:
    """Prefill `prompt`, then yield up to `num_tokens` drawn tokens, the
    last one a stop token if one was drawn. Logits holding NaN or Inf stop
    it with `NonFiniteLogits` naming `source` as the likely cause (a sampler
    given NaN would draw some token anyway)."""
    logits = model.prefill(prompt)
    for drawn in range(num_tokens):
        if logits_broken(logits):
            raise NonFiniteLogits(
                f"the logits after {len(prompt) + drawn} tokens hold NaN or Inf; the likely "
                f"cause is {source}: weights with NaN or Inf values (check-accuracy compares "
                "it with the float32 oracle)"
            )
        token = sampler(logits)
        yield token
        if token in stop_tokens or drawn + 1 == num_tokens:
            return
        logits = model.decode(token)


class StopStrings:
    """Cuts generated text at the first of `stops`: `push(piece)` returns the
    text that is safe to show (a tail that could begin a stop string is held
    back), `stopped` says whether one was found (the text before it was
    returned, the stop string itself never is), `flush()` the held text."""

    def __init__(self, stops: Sequence[str] = ()):
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty text, got {list(stops)!r}")
        self.stops = tuple(stops)
        self.stopped = False
        self._held = ""

    def push(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self._held + piece
        found = [(text.find(s), s) for s in self.stops if s in text]
        if found:
            self.stopped, self._held = True, ""
            return text[: min(found)[0]]
        keep = max((_overlap(text, s) for s in self.stops), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return "" if self.stopped else held


def _overlap(text: str, stop: str) -> int:
    """The longest tail of `text` that is a proper prefix of `stop`."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-size:]):
            return size
    return 0


@dataclass(frozen=True)
class Completion:
    """One finished generation: its tokens, its text (stop string cut
    out), and why it ended: "stop" (a stop token or string), "length" (the
    token budget) or "cancelled"."""

    tokens: tuple[int, ...]
    text: str
    finish_reason: str


def complete(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompt: Sequence[int],
    num_tokens: int,
    sampler: Sampler,
    *,
    stop_tokens: Collection[int] = (),
    stop_strings: Sequence[str] = (),
    on_text: Callable[[str], object] | None = None,
    cancelled: Callable[[], bool] | None = None,
    source: str = "the model",
) -> Completion:
    """Generate text: `sample_tokens`, its pieces decoded as they come and
    passed to `on_text` (never an empty one), stopping at `stop_strings`
    too; the text is the tokens' whole decode (a character the budget cut
    short included) up to a stop string. `cancelled()` is asked before every token (a client that went
    away stops the work)."""
    stream, stops = tokenizer.stream(), StopStrings(stop_strings)
    tokens: list[int] = []
    text: list[str] = []  # what was emitted
    decoded: list[str] = []  # what the stream gave, before stop strings
    reason = "length"

    def emit(piece: str) -> None:
        if piece:
            text.append(piece)
            if on_text is not None:
                on_text(piece)

    for token in sample_tokens(model, prompt, num_tokens, sampler, stop_tokens, source):
        if cancelled is not None and cancelled():
            reason = "cancelled"
            break
        tokens.append(token)
        if token in stop_tokens:
            reason = "stop"
            break
        piece = stream.push(token)
        decoded.append(piece)
        emit(stops.push(piece))
        if stops.stopped:
            reason = "stop"
            break
    if not stops.stopped:
        # bytes the stream still holds (a character the budget cut short)
        # come out as the full decode has them
        whole, shown = tokenizer.decode(tokens), "".join(decoded)
        emit(stops.push(whole[len(shown) :] if whole.startswith(shown) else ""))
    emit(stops.flush())
    return Completion(tuple(tokens), "".join(text), reason)
