"""`GraphModel`: a causal language model running as one IRON graph function.

Everything here is the same for every model: reading a checkpoint
directory (config, weights, tokenizer, generation config), compiling the
versions a model wants ahead, uploading the weights in pieces whose pages
are handed back, the sequence position, token-id checks, timing (load,
time to first token, decode steps) and generation. An app subclasses it
and gives what is its own:

- `config_class`: its config (`iron.lm.ModelConfig`), read from config.json;
- `load_weights(checkpoint, config)`: the checkpoint's tensors, checked
  against the config (`open_checkpoint` picks which tensors: all by default);
- `build_graph(backend, device)` and `graph_weights()`: the graph function
  and every weight it reads, by name;
- `ahead_versions()`: the versions to compile before the first call;
- `run_prefill(ids)` and `run_decode(token, pos)`: the graph called for a
  prompt at position 0 and for one token at `pos` (host-side inputs such
  as embedding rows gathered with `gather_rows`);
- `default_max_seq_len(config)` and `check_max_seq_len(config, n)`: the
  positions its caches may hold.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tqdm import tqdm

from iron.dispatch import GraphFunction
from iron.dispatch.graph import PIECE_BYTES
from iron.lm.backends import choose_backend
from iron.lm.checkpoint import Checkpoint
from iron.lm.config import GenerationConfig
from iron.lm.generation import NonFiniteLogits, check_fits, sample_tokens
from iron.lm.metrics import Metrics, resident_bytes
from iron.lm.sampling import Sampler
from iron.lm.tokenizer import Tokenizer

#: embedding rows gathered between releases of the mapping's pages (each row
#: can fault in a 2 MiB folio)
GATHER_ROWS = 8


def progress_bar(progress: bool | None, **kwargs) -> tqdm:
    """A tqdm bar on stderr; `progress` None: only on a terminal."""
    return tqdm(disable=None if progress is None else not progress, file=sys.stderr, **kwargs)


@contextlib.contextmanager
def status_line(progress: bool | None, label: str):
    """A function ``status(text)`` that shows ``label: text`` and the time
    spent on one line of stderr (as `progress_bar` would show a bar), from
    its first call until the block ends; nothing if it is never called."""
    shown: list[tqdm] = []

    def status(text: str) -> None:
        if not shown:
            shown.append(progress_bar(progress, bar_format="{desc} ({elapsed})"))
        shown[0].set_description_str(f"{label}: {text}")

    try:
        yield status
    finally:
        if shown:
            shown[0].close()


def _extent(array: np.ndarray) -> tuple[int, int]:
    start = array.__array_interface__["data"][0]
    return start, start + array.nbytes


class GraphModel:
    """The `CausalLM` protocol (`prefill`, `decode`, `reset`) over an IRON
    graph function, plus `generate` and `metrics`. Logits come back as
    float32 (vocab,).

    `backend`: a registered backend or "auto" (`iron.lm.choose_backend`: the
    NPU where present, else cpu; ``IRON_BACKEND`` overrides it);
    `max_seq_len`: positions the caches hold (the app's rule); `device`: an
    iron-core `Device` or its name; `release(view)`: hands a checkpoint
    view's pages back to the kernel (`Checkpoint.release`), called on every
    uploaded piece and on gathered tables; `copy(target, view)`: writes an
    uploaded piece into the arena (`Checkpoint.copyto` reads it from the
    file; default `np.copyto`); `in_place(view)`: whether a weight may be
    read where it lies instead of copied (`Checkpoint.owns`: the mapping
    lives as long as the model), which a backend whose memory is the
    host's does (`iron.dispatch.residents.Residents.load`);
    `check_intact(view)`: raises if the file under a gathered table was
    truncated since it was mapped (a read past a file's end kills the
    process with SIGBUS instead of raising), and, called with None before
    every run while weights are read in place, if any file was."""

    config_class: ClassVar[type]

    def __init__(
        self,
        config,
        weights,
        tokenizer: Tokenizer | None = None,
        *,
        backend: str = "auto",
        max_seq_len: int | None = None,
        device=None,
        release: Callable[[np.ndarray], object] | None = None,
        check_intact: Callable[[np.ndarray], object] | None = None,
        copy: Callable[[np.ndarray, np.ndarray], object] | None = None,
        in_place: Callable[[np.ndarray], bool] | None = None,
    ):
        max_seq_len = self.default_max_seq_len(config) if max_seq_len is None else max_seq_len
        self.check_max_seq_len(config, max_seq_len)
        self.config, self.weights, self.tokenizer = config, weights, tokenizer
        self.release, self.check_intact, self.copy = release, check_intact, copy
        self.in_place = in_place
        #: (start, end) addresses of the weights the graph reads in place
        self._held: list[tuple[int, int]] = []
        self.max_seq_len = max_seq_len
        #: the ids generation stops at: config.json's, with generation_config.json's
        self.eos_token_ids: tuple[int, ...] = tuple(config.eos_token_ids)
        self.generation_config = GenerationConfig()
        self.forward: GraphFunction = self.build_graph(choose_backend(backend), device)
        self.position: int | None = None  # tokens in the cache; None: no sequence
        #: where the weights came from, named when the logits go non-finite
        self.source: str = "the weights given"
        self._load_seconds: float | None = None
        self._ttft: float | None = None
        self._decode_seconds: list[float] = []

    # ---- what an app gives ----

    @classmethod
    def default_max_seq_len(cls, config) -> int:
        """The positions the caches hold when none are asked for."""
        return config.max_position_embeddings

    @classmethod
    def check_max_seq_len(cls, config, max_seq_len: int) -> None:
        """Raise ValueError, naming the rule, for a cache length the graph cannot hold."""
        if (
            isinstance(max_seq_len, bool)
            or not isinstance(max_seq_len, int)
            or not (0 < max_seq_len <= config.max_position_embeddings)
        ):
            raise ValueError(
                f"{cls.__name__}: max_seq_len={max_seq_len!r}: from 1 to the model's "
                f"max_position_embeddings ({config.max_position_embeddings})"
            )

    @classmethod
    def open_checkpoint(cls, path: Path, config) -> Checkpoint:
        """The checkpoint's tensors this model reads (all, unless an app
        narrows them to a prefix)."""
        return Checkpoint.open(path)

    @classmethod
    def load_weights(cls, checkpoint: Checkpoint, config):
        """The model's weights from `checkpoint`, checked against `config`."""
        raise NotImplementedError

    def build_graph(self, backend: str | None, device) -> GraphFunction:
        """The graph function (`backend` None: ``IRON_BACKEND`` decides)."""
        raise NotImplementedError

    def graph_weights(self) -> dict[str, np.ndarray]:
        """Every weight the graph reads, by its name in the graph."""
        raise NotImplementedError

    def ahead_versions(self) -> list[tuple[str, dict[str, Any]]]:
        """(label, `forward.compile` keywords) of each version to compile
        before anything runs."""
        return []

    def run_prefill(self, ids: list[int]) -> np.ndarray:
        """The logits after the last of `ids`, fed from position 0."""
        raise NotImplementedError

    def run_decode(self, token: int, pos: int) -> np.ndarray:
        """The logits after `token`, fed at position `pos`."""
        raise NotImplementedError

    # ---- building ----

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        backend: str = "auto",
        max_seq_len: int | None = None,
        device=None,
        progress: bool | None = None,
        **options,
    ):
        """Read config.json, generation_config.json, the safetensors and
        tokenizer.json of `path`, compile the versions wanted ahead and
        upload the weights, handing each 64 MiB piece's pages back to the
        kernel. `progress`: bars for compile and upload (None: only on a
        terminal); `options`: the app's own, for its constructor (an
        `iron.lm.cli.ModelFlag` on the command line)."""
        started = time.perf_counter()
        path = Path(path)
        config = cls.config_class.from_file(path)
        generation = GenerationConfig.from_dir(path, config.vocab_size)
        tokenizer = Tokenizer.from_pretrained(path, bos_token_id=config.bos_token_id)
        checkpoint = cls.open_checkpoint(path, config)
        try:
            weights = cls.load_weights(checkpoint, config)
        except BaseException:
            checkpoint.close()
            raise
        model = cls(
            config,
            weights,
            tokenizer,
            backend=backend,
            max_seq_len=max_seq_len,
            device=device,
            release=checkpoint.release,
            check_intact=checkpoint.check_intact,
            copy=checkpoint.copyto,
            in_place=checkpoint.owns,
            **options,
        )
        model.generation_config = generation
        model.eos_token_ids = tuple(
            dict.fromkeys((*config.eos_token_ids, *generation.eos_token_ids))
        )
        model.source = f"the checkpoint in {path}"
        model.compile(progress)
        model.load(progress=progress)
        model._load_seconds = time.perf_counter() - started
        return model

    def compile(self, progress: bool | None = None) -> None:
        """Compile the versions of `ahead_versions`."""
        versions = self.ahead_versions()
        with progress_bar(progress, total=len(versions), desc="compiling", unit="version") as bar:
            for label, specs in versions:
                bar.set_postfix_str(label)
                self.forward.compile(**specs)
                bar.update()

    def load(
        self,
        release: Callable[[np.ndarray], object] | None = None,
        piece_bytes: int = PIECE_BYTES,
        progress: bool | None = None,
        threads: int | None = None,
    ) -> int:
        """Upload the weights into the arena in pieces of at most
        `piece_bytes`, `threads` at once (default: the graph's
        `UPLOAD_THREADS`), calling ``release(piece)`` (default: the model's
        `release`) after each; those `in_place` accepts are read where they
        lie instead, where the backend's memory is the host's. Then wait for
        the host kernels, on a status line. Returns the bytes uploaded or
        held in place."""
        release = release or self.release
        weights = self.graph_weights()
        total = sum(a.nbytes for a in weights.values())
        bar = progress_bar(
            progress, total=total, desc="uploading", unit="B", unit_scale=True, unit_divisor=1024
        )

        def uploaded(piece: np.ndarray) -> None:
            if release is not None:
                release(piece)
            bar.update(piece.nbytes)

        with bar:
            done = self.forward.load(
                release=uploaded, piece_bytes=piece_bytes, copy=self.copy, threads=threads,
                in_place=self.in_place, wait=False,
            )  # fmt: skip
            held = self.forward.held_in_place()
            bar.update(sum(weights[n].nbytes for n in held if n in weights))
        self._held = [_extent(weights[n]) for n in held if n in weights]
        with status_line(progress, "host kernels") as status:
            self.forward.ready(status)
        return done

    # ---- running ----

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        """Start a sequence with `token_ids` at positions 0..n-1; return the
        float32 logits (vocab,) after the last of them."""
        ids = self._check_ids("prefill", token_ids)
        if len(ids) > self.max_seq_len:
            raise ValueError(
                f"{type(self).__name__}.prefill: the prompt of {len(ids)} tokens does not fit "
                f"max_seq_len={self.max_seq_len} tokens"
            )
        self.position = None
        self._check_held()
        started = time.perf_counter()
        logits = np.asarray(self.run_prefill(ids)).astype(np.float32)
        self._ttft, self._decode_seconds = time.perf_counter() - started, []
        self.position = len(ids)
        return logits

    def decode(self, token_id: int) -> np.ndarray:
        """Append `token_id` at the next position; return the float32 logits
        (vocab,) after it."""
        name = type(self).__name__
        if self.position is None:
            raise RuntimeError(f"{name}.decode: no sequence to extend; call prefill first")
        pos = self.position
        if pos >= self.max_seq_len:
            raise ValueError(
                f"{name}.decode: the sequence already holds {pos} tokens, all of "
                f"max_seq_len={self.max_seq_len}"
            )
        (token,) = self._check_ids("decode", [token_id])
        self._check_held()
        started = time.perf_counter()
        logits = np.asarray(self.run_decode(token, pos)).astype(np.float32)
        self._decode_seconds.append(time.perf_counter() - started)
        self.position = pos + 1
        return logits

    def reset(self) -> None:
        """Forget the sequence (the next prefill starts from position 0)."""
        self.position = None

    def generate(
        self,
        token_ids: Sequence[int],
        num_tokens: int,
        sampler: Sampler,
        on_token: Callable[[int], object] | None = None,
        stop_tokens: Sequence[int] | None = None,
    ) -> list[int]:
        """Prefill `token_ids`, then draw up to `num_tokens` tokens with
        `sampler`, calling `on_token(id)` as each is drawn; stops early after
        a token of `stop_tokens` (default: `eos_token_ids`). Refuses, before
        any work, a prompt that does not fit max_seq_len with the new tokens."""
        name = type(self).__name__
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
            raise ValueError(f"{name}.generate: num_tokens={num_tokens!r} must be at least 1")
        try:
            check_fits(len(token_ids), num_tokens, self.max_seq_len)
        except ValueError as error:
            raise ValueError(f"{name}.generate: {error}") from None
        stop = set(self.eos_token_ids if stop_tokens is None else stop_tokens)
        drawn: list[int] = []
        try:
            for token in sample_tokens(self, token_ids, num_tokens, sampler, stop, self.source):
                drawn.append(token)
                if on_token is not None:
                    on_token(token)
        except NonFiniteLogits as error:
            raise NonFiniteLogits(f"{name}.generate: {error}") from None
        return drawn

    @property
    def metrics(self) -> Metrics:
        """Load time, the last prefill's time to first token, its decode
        steps' speed, and resident memory now."""
        peak, steady = resident_bytes()
        return Metrics(
            backend=self.forward.backend.name,
            designs=self.forward.design_summary(),
            load_seconds=self._load_seconds,
            ttft_seconds=self._ttft,
            decode_seconds=tuple(self._decode_seconds),
            peak_rss_bytes=peak,
            steady_rss_bytes=steady,
        )

    def gather_rows(self, table: np.ndarray, ids: Sequence[int]) -> np.ndarray:
        """The rows `ids` of a checkpoint table (an embedding): a host
        gather, the table's pages handed back every few rows so they never
        pile up, after checking its file was not truncated under it."""
        if self.check_intact is not None:  # a gather past a truncated file's end is SIGBUS
            self.check_intact(table)
        rows = np.empty((len(ids), *table.shape[1:]), table.dtype)
        release = self.release if _extent(table) not in self._held else None  # the graph reads it
        for start in range(0, len(ids), GATHER_ROWS):
            rows[start : start + GATHER_ROWS] = table[ids[start : start + GATHER_ROWS]]
            if release is not None:
                release(table)
        return rows

    def _check_held(self) -> None:
        """Weights read in place are read from their files on every run: a
        file truncated under them must raise here, not end the process."""
        if self._held and self.check_intact is not None:
            self.check_intact(None)

    def _check_ids(self, method: str, token_ids: Sequence[int]) -> list[int]:
        ids = np.asarray(token_ids)
        vocab = self.config.vocab_size
        name = type(self).__name__
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"{name}.{method}: token ids must be a non-empty 1-D sequence of ints, "
                f"got {token_ids!r}"
            )
        if ids.min() < 0 or ids.max() >= vocab:
            raise ValueError(
                f"{name}.{method}: token ids must lie in [0, {vocab}), got min {ids.min()} "
                f"max {ids.max()}"
            )
        return ids.tolist()
