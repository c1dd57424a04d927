"""`Model`: a Llama checkpoint running as one IRON graph function.

    model = Model.from_pretrained("llama-3.2-1b")       # read, compile, upload
    logits = model.prefill(model.tokenizer.prompt("The capital of France is"))
    logits = model.decode(int(logits.argmax()))          # one more position

Prefill starts a sequence at position 0 (whatever came before is
forgotten); decode appends one token. Prompts run in buckets of 64, 128 or
256 rows, then whole multiples of 256, padded with zero rows: the smallest
the operators' tiling allows (GEMM takes whole blocks of 4 cores x tile_m
rows, tile_m a multiple of 16 on npu2, so 64 rows at the least; MHA whole
64-row blocks per pipeline). `from_pretrained` compiles the decode version
and the 256- and 128-row buckets before anything runs, so the arena is sized
once in the common case (every bucket up to 256 rows fits it); any other
bucket compiles when a prompt first needs it (logged: a 64-row one fits the
arena, a longer one grows it, keeping weights and caches). Compiling costs
load time (seconds per version at 16 layers, mostly memory planning), so
the rarely needed 64-row bucket is not compiled ahead.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from iron.core import bf16, registry, settings
from iron.dispatch.graph import PIECE_BYTES
from iron.dispatch.selection import get_backend
from iron.llama.checkpoint import Checkpoint
from iron.llama.checks import logits_broken
from iron.llama.config import LlamaConfig
from iron.llama.graph import graph_weights, llama_graph
from iron.llama.metrics import Metrics, resident_bytes
from iron.llama.sampling import Sampler
from iron.llama.tokenizer import Tokenizer
from iron.llama.weights import LlamaWeights
from iron.ops.eltwise import angle_table

log = logging.getLogger("iron.llama")

#: prompt rows come in whole buckets: GEMM's M is 4 cores x 64-row tiles...
PREFILL_BUCKET = 256
#: ...or, for a short prompt, 4 cores x 16- or 32-row tiles (MHA: 1 or 2 pipelines)
SMALL_BUCKETS = (64, 128)
#: prompt buckets compiled ahead: the largest first, so it sizes the arena
AHEAD_BUCKETS = (PREFILL_BUCKET, 128)
#: the cache length when none is asked for (IRON's runner uses the same)
DEFAULT_MAX_SEQ_LEN = 2048
#: DecodeAttention's Softmax holds a whole row of scores, one per cache position
MAX_CACHE = 8192
#: embedding rows gathered between releases of the mapping's pages (each row
#: can fault in a 2 MiB folio)
_GATHER_ROWS = 8


class NonFiniteLogits(ValueError):
    """The model computed NaN or Inf logits: a broken model, not bad input."""


def default_max_seq_len(config: LlamaConfig) -> int:
    """2048 positions, or fewer when the model's context is shorter."""
    fitting = config.max_position_embeddings // PREFILL_BUCKET * PREFILL_BUCKET
    return min(DEFAULT_MAX_SEQ_LEN, fitting) or PREFILL_BUCKET


def choose_backend(backend: str) -> str | None:
    """The backend a model runs on: `backend` as given, except "auto", which
    is the NPU where one is present and else `cpu` (host kernels on every
    core: the fastest host run); ``IRON_BACKEND``, when set, decides instead
    (None: iron-dispatch reads it)."""
    if backend != "auto":
        return backend
    if settings.current().backend != "auto":
        return None
    npu = "npu" in registry.backends() and get_backend("npu").available()[0]
    return "npu" if npu else "cpu"


def check_fits(prompt_tokens: int, new_tokens: int, max_seq_len: int) -> None:
    """Refuse a generation whose prompt and new tokens exceed the cache."""
    if prompt_tokens + new_tokens > max_seq_len:
        raise ValueError(
            f"the prompt of {prompt_tokens} tokens and {new_tokens} new tokens need "
            f"{prompt_tokens + new_tokens} positions; max_seq_len is {max_seq_len} tokens "
            "(shorten the prompt, ask for fewer tokens or raise max_seq_len)"
        )


def _bar(progress: bool | None, **kwargs) -> tqdm:
    # progress None: a bar only on a terminal (tqdm's disable=None)
    return tqdm(disable=None if progress is None else not progress, file=sys.stderr, **kwargs)


class Model:
    """Llama on IRON: the `CausalLM` protocol (`prefill`, `decode`, `reset`)
    plus `generate` and `metrics`. Logits come back as float32 (vocab,)
    from the graph's bf16.

    `backend`: a registered backend ("reference", "cpu", "sim", "npu", a
    plugin's) or "auto" (`choose_backend`: npu where present, else cpu;
    ``IRON_BACKEND`` overrides it); `max_seq_len`: positions the KV caches
    hold, a multiple of 256 up to 8192 and the model's context (default:
    2048 or the context); `device`: an iron-core `Device` or its name
    (default npu2: MHA, the prefill attention, runs on npu2 only); `release`:
    hands a checkpoint view's pages back to the kernel (`Checkpoint.release`),
    called on every uploaded piece and on the embedding after each token
    gather (one row faults in whole page-cache folios of the mapping, up to
    2 MiB each: a 128-token prompt would otherwise keep 200 MB resident);
    `copy(target, view)`: writes an uploaded piece into the arena
    (`Checkpoint.copyto` reads it from the file, never faulting in the
    mapping; default `np.copyto`); `check_intact(view)`: raises if the file
    under the embedding was truncated since it was mapped
    (`Checkpoint.check_intact`), checked before every gather because a read
    past a file's end kills the process (SIGBUS) instead of raising."""

    def __init__(
        self,
        config: LlamaConfig,
        weights: LlamaWeights,
        tokenizer: Tokenizer | None = None,
        *,
        backend: str = "auto",
        max_seq_len: int | None = None,
        device=None,
        release: Callable[[np.ndarray], object] | None = None,
        check_intact: Callable[[np.ndarray], object] | None = None,
        copy: Callable[[np.ndarray, np.ndarray], object] | None = None,
    ):
        max_seq_len = default_max_seq_len(config) if max_seq_len is None else max_seq_len
        limit = min(MAX_CACHE, config.max_position_embeddings)
        if (
            isinstance(max_seq_len, bool)
            or not isinstance(max_seq_len, int)
            or max_seq_len < PREFILL_BUCKET
            or max_seq_len % PREFILL_BUCKET
            or max_seq_len > limit
        ):
            raise ValueError(
                f"Model: max_seq_len={max_seq_len!r}: a multiple of {PREFILL_BUCKET} (the prompt "
                f"bucket) from {PREFILL_BUCKET} to {limit} (the smaller of the decode "
                f"attention's {MAX_CACHE} and the model's max_position_embeddings)"
            )
        self.config, self.weights, self.tokenizer = config, weights, tokenizer
        self.release, self.check_intact, self.copy = release, check_intact, copy
        self.max_seq_len = max_seq_len
        self.forward = llama_graph(
            config,
            weights,
            max_seq_len,
            backend=choose_backend(backend),
            device=device,
        )
        scaling = config.rope_scaling and dataclasses.asdict(config.rope_scaling)
        positions = np.arange(max_seq_len)
        table = angle_table(positions, config.head_dim, config.rope_theta, scaling)
        self.angles = table.astype(bf16)  # rounded once; rows are sliced per call
        self.position: int | None = None  # tokens in the cache; None: no sequence
        #: where the weights came from, named when the logits go non-finite
        self.source: str = "the weights given"
        self._load_seconds: float | None = None
        self._ttft: float | None = None
        self._decode_seconds: list[float] = []

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        backend: str = "auto",
        max_seq_len: int | None = None,
        device=None,
        progress: bool | None = None,
    ) -> Model:
        """Read config.json, the safetensors and tokenizer.json of `path`,
        compile the decode version and the first prompt bucket, and upload
        the weights, handing each 64 MiB piece's pages back to the kernel.
        `progress`: bars for compile and upload (None: only on a terminal)."""
        started = time.perf_counter()
        config = LlamaConfig.from_file(path)
        checkpoint = Checkpoint.open(path)
        weights = LlamaWeights.load(checkpoint, config)
        model = cls(
            config,
            weights,
            Tokenizer.from_pretrained(path),
            backend=backend,
            max_seq_len=max_seq_len,
            device=device,
            release=checkpoint.release,
            check_intact=checkpoint.check_intact,
            copy=checkpoint.copyto,
        )
        model.source = f"the checkpoint in {path}"
        model.compile(progress)
        model.load(progress=progress)
        model._load_seconds = time.perf_counter() - started
        return model

    # ---- building ----

    def compile(self, progress: bool | None = None) -> None:
        """Compile the decode version and the prompt buckets of `AHEAD_BUCKETS`."""
        versions = [("decode", 1), *((f"prefill {rows}", rows) for rows in AHEAD_BUCKETS)]
        with _bar(progress, total=len(versions), desc="compiling", unit="version") as bar:
            for label, rows in versions:
                bar.set_postfix_str(label)
                self._version(rows)
                bar.update()

    def _version(self, rows: int) -> None:
        hidden, head_dim = self.config.hidden_size, self.config.head_dim
        self.forward.compile(x=((rows, hidden), bf16), angles=((rows, head_dim), bf16))

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
        `release`) after each. Returns the bytes uploaded."""
        release = release or self.release
        total = sum(a.nbytes for a in graph_weights(self.config, self.weights).values())
        bar = _bar(
            progress, total=total, desc="uploading", unit="B", unit_scale=True, unit_divisor=1024
        )

        def uploaded(piece: np.ndarray) -> None:
            if release is not None:
                release(piece)
            bar.update(piece.nbytes)

        with bar:
            return self.forward.load(
                release=uploaded, piece_bytes=piece_bytes, copy=self.copy, threads=threads
            )

    # ---- running ----

    def prefill_rows(self, tokens: int) -> int:
        """The rows of the prompt bucket that holds `tokens` tokens."""
        small = next((rows for rows in SMALL_BUCKETS if tokens <= rows), None)
        return small or -(-tokens // PREFILL_BUCKET) * PREFILL_BUCKET

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        """Start a sequence with `token_ids` at positions 0..n-1; return the
        float32 logits (vocab,) after the last of them."""
        ids = self._check_ids("prefill", token_ids)
        if len(ids) > self.max_seq_len:
            raise ValueError(
                f"Model.prefill: the prompt of {len(ids)} tokens does not fit "
                f"max_seq_len={self.max_seq_len} tokens"
            )
        self.position = None
        started = time.perf_counter()
        rows = self.prefill_rows(len(ids))
        x = np.zeros((rows, self.config.hidden_size), bf16)
        x[: len(ids)] = self._embed(ids)
        if not self._compiled(rows):
            log.info("prefill of %d tokens: compiling the %d-row version", len(ids), rows)
        logits = self.forward(x, self.angles[:rows], pos=0, last=len(ids) - 1)
        logits = logits.astype(np.float32)
        self._ttft, self._decode_seconds = time.perf_counter() - started, []
        self.position = len(ids)
        return logits

    def decode(self, token_id: int) -> np.ndarray:
        """Append `token_id` at the next position; return the float32 logits
        (vocab,) after it."""
        if self.position is None:
            raise RuntimeError("Model.decode: no sequence to extend; call prefill first")
        pos = self.position
        if pos >= self.max_seq_len:
            raise ValueError(
                f"Model.decode: the sequence already holds {pos} tokens, all of "
                f"max_seq_len={self.max_seq_len}"
            )
        ids = self._check_ids("decode", [token_id])
        started = time.perf_counter()
        logits = self.forward(self._embed(ids), self.angles[pos : pos + 1], pos=pos, last=0)
        logits = logits.astype(np.float32)
        self._decode_seconds.append(time.perf_counter() - started)
        self.position = pos + 1
        return logits

    def reset(self) -> None:
        """Forget the sequence. Nothing needs clearing: a prefill overwrites
        every cache row it reads, and a decode writes its row before reading."""
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
        a token of `stop_tokens` (default: the config's EOS ids). Refuses, before
        any work, a prompt that does not fit max_seq_len with the new tokens."""
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
            raise ValueError(f"Model.generate: num_tokens={num_tokens!r} must be at least 1")
        try:
            check_fits(len(token_ids), num_tokens, self.max_seq_len)
        except ValueError as error:
            raise ValueError(f"Model.generate: {error}") from None
        stop = set(self.config.eos_token_ids if stop_tokens is None else stop_tokens)
        logits = self.prefill(token_ids)
        drawn: list[int] = []
        while True:
            self._check_finite(logits, len(token_ids) + len(drawn))
            drawn.append(sampler(logits))
            if on_token is not None:
                on_token(drawn[-1])
            if len(drawn) == num_tokens or drawn[-1] in stop:
                return drawn
            logits = self.decode(drawn[-1])

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

    def _embed(self, ids: list[int]) -> np.ndarray:
        """The embedding rows of `ids`: a host gather from the checkpoint, its
        pages handed back every few rows so they never pile up."""
        embedding = self.weights.embedding
        if self.check_intact is not None:  # a gather past a truncated file's end is SIGBUS
            self.check_intact(embedding)
        rows = np.empty((len(ids), embedding.shape[1]), embedding.dtype)
        for start in range(0, len(ids), _GATHER_ROWS):
            rows[start : start + _GATHER_ROWS] = embedding[ids[start : start + _GATHER_ROWS]]
            if self.release is not None:
                self.release(embedding)
        return rows

    def _check_finite(self, logits: np.ndarray, position: int) -> None:
        # a sampler given NaN logits draws some token anyway (argmax of NaN is
        # 0): stop with the probable cause instead of streaming nonsense
        if logits_broken(logits):
            raise NonFiniteLogits(
                f"Model.generate: the logits after {position} tokens hold NaN or Inf; the likely "
                f"cause is {self.source}: weights with NaN or Inf values (iron-llama "
                "check-accuracy compares it with the float32 oracle)"
            )

    def _compiled(self, rows: int) -> bool:
        return any(signature[0][1][0] == rows for signature in self.forward.versions)

    def _check_ids(self, method: str, token_ids: Sequence[int]) -> list[int]:
        ids = np.asarray(token_ids)
        vocab = self.config.vocab_size
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"Model.{method}: token ids must be a non-empty 1-D sequence of ints, got {token_ids!r}"
            )
        if ids.min() < 0 or ids.max() >= vocab:
            raise ValueError(
                f"Model.{method}: token ids must lie in [0, {vocab}), got min {ids.min()} max {ids.max()}"
            )
        return ids.tolist()
