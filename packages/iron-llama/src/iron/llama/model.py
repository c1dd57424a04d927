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

import numpy as np

from iron.core import bf16
from iron.dispatch import GraphFunction
from iron.llama.config import LlamaConfig
from iron.llama.graph import graph_weights, llama_graph
from iron.llama.weights import LlamaWeights
from iron.lm import Checkpoint, GraphModel, check_fits, choose_backend
from iron.lm.generation import NonFiniteLogits
from iron.ops.eltwise import angle_table

__all__ = [
    "AHEAD_BUCKETS",
    "Model",
    "NonFiniteLogits",
    "check_fits",
    "choose_backend",
    "default_max_seq_len",
]

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


def default_max_seq_len(config: LlamaConfig) -> int:
    """2048 positions, or fewer when the model's context is shorter."""
    fitting = config.max_position_embeddings // PREFILL_BUCKET * PREFILL_BUCKET
    return min(DEFAULT_MAX_SEQ_LEN, fitting) or PREFILL_BUCKET


class Model(GraphModel):
    """Llama on IRON: iron-lm's `GraphModel` (`prefill`, `decode`, `reset`,
    `generate`, `metrics`, `from_pretrained`) over `llama_graph`. Logits
    come back as float32 (vocab,) from the graph's bf16.

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

    config_class = LlamaConfig

    def __init__(self, config: LlamaConfig, weights: LlamaWeights, tokenizer=None, **options):
        super().__init__(config, weights, tokenizer, **options)
        scaling = config.rope_scaling and dataclasses.asdict(config.rope_scaling)
        positions = np.arange(self.max_seq_len)
        table = angle_table(positions, config.head_dim, config.rope_theta, scaling)
        self.angles = table.astype(bf16)  # rounded once; rows are sliced per call

    @classmethod
    def default_max_seq_len(cls, config: LlamaConfig) -> int:
        return default_max_seq_len(config)

    @classmethod
    def check_max_seq_len(cls, config: LlamaConfig, max_seq_len: int) -> None:
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

    @classmethod
    def load_weights(cls, checkpoint: Checkpoint, config: LlamaConfig) -> LlamaWeights:
        return LlamaWeights.load(checkpoint, config)

    def build_graph(self, backend: str | None, device) -> GraphFunction:
        return llama_graph(
            self.config, self.weights, self.max_seq_len, backend=backend, device=device
        )

    def graph_weights(self) -> dict[str, np.ndarray]:
        return graph_weights(self.config, self.weights)

    def ahead_versions(self) -> list[tuple[str, dict]]:
        """The decode version and the prompt buckets of `AHEAD_BUCKETS`."""
        return [
            (label, self._specs(rows))
            for label, rows in [("decode", 1), *((f"prefill {r}", r) for r in AHEAD_BUCKETS)]
        ]

    def _specs(self, rows: int) -> dict:
        hidden, head_dim = self.config.hidden_size, self.config.head_dim
        return {"x": ((rows, hidden), bf16), "angles": ((rows, head_dim), bf16)}

    # ---- running ----

    def prefill_rows(self, tokens: int) -> int:
        """The rows of the prompt bucket that holds `tokens` tokens."""
        small = next((rows for rows in SMALL_BUCKETS if tokens <= rows), None)
        return small or -(-tokens // PREFILL_BUCKET) * PREFILL_BUCKET

    def run_prefill(self, ids: list[int]) -> np.ndarray:
        rows = self.prefill_rows(len(ids))
        x = np.zeros((rows, self.config.hidden_size), bf16)
        x[: len(ids)] = self.gather_rows(self.weights.embedding, ids)
        if not self._compiled(rows):
            log.info("prefill of %d tokens: compiling the %d-row version", len(ids), rows)
        return self.forward(x, self.angles[:rows], pos=0, last=len(ids) - 1)

    def run_decode(self, token: int, pos: int) -> np.ndarray:
        x = self.gather_rows(self.weights.embedding, [token])
        return self.forward(x, self.angles[pos : pos + 1], pos=pos, last=0)

    def _compiled(self, rows: int) -> bool:
        return any(signature[0][1][0] == rows for signature in self.forward.versions)
