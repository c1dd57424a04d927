"""`Model`: a Gemma 4 text checkpoint running as one IRON graph function.

    model = Model.from_pretrained("gemma-4-e2b", weight_format="bfp16")
    logits = model.prefill(model.tokenizer.prompt("The capital of France is"))
    logits = model.decode(int(logits.argmax()))

A prompt's first whole rounds of 128 tokens run as prefill chunks of up to
512 rows (the prefill attention's positions come in rounds of 128; the
chunk's rows past the round are zeros whose results are never read); the
rest of the prompt, fewer than 128 tokens, runs through the decode version
one token at a time. So a sliding layer's ring never holds a padding row:
a padded chunk would store its padding positions in ring slots that later
tokens still read.
"""

from __future__ import annotations

import math

import numpy as np

from iron.core import Device, bf16
from iron.dispatch import GraphFunction
from iron.gemma.config import GemmaConfig
from iron.gemma.graph import CHUNK, PER_LAYER_INPUT_SCALE, ROUND, GemmaGraph, gemma_graph
from iron.gemma.weights import GemmaWeights
from iron.lm import Checkpoint, GraphModel
from iron.ops.flm.weights import WeightFormat

__all__ = ["DEFAULT_MAX_SEQ_LEN", "Model"]

#: the cache length when none is asked for
DEFAULT_MAX_SEQ_LEN = 2048
#: the device the FLM family's Gemma kernels run on (aie2p only)
DEFAULT_DEVICE = "npu2"


class Model(GraphModel):
    """Gemma 4 text on IRON: iron-lm's `GraphModel` (`prefill`, `decode`,
    `reset`, `generate`, `metrics`, `from_pretrained`) over `gemma_graph`.
    Logits come back as float32 (vocab,) from the graph's bf16.

    `weight_format`: "bf16" (the checkpoint's values) or "bfp16" (packed
    once at load into the FLM family's bfp16ebs8); `max_seq_len`: positions
    the caches hold, a multiple of 128 from 512 up to the model's context
    (default 2048 or the context); `device`: an iron-core `Device` or its
    name (default npu2: the Gemma kernels are aie2p-only); `trace_size`:
    bytes of the trace buffer the device fills per call (the simulated
    device's records hold each step's DDR bytes); the rest is
    `GraphModel`'s."""

    config_class = GemmaConfig

    def __init__(self, config: GemmaConfig, weights: GemmaWeights, tokenizer=None, *,
                 weight_format: str = "bf16", trace_size: int = 0, **options):  # fmt: skip
        try:
            self.weight_format = WeightFormat(weight_format)
        except ValueError:
            raise ValueError(f"Model: weight_format={weight_format!r}: 'bf16' or 'bfp16'") from None
        self.plan: GemmaGraph | None = None
        self.trace_size = trace_size
        release, owns = options.get("release"), options.get("in_place")
        if release is not None and owns is not None:
            # most graph weights are packed copies, not the checkpoint's pages
            options["release"] = lambda view: release(view) if owns(view) else 0
        super().__init__(config, weights, tokenizer, **options)

    @classmethod
    def default_max_seq_len(cls, config: GemmaConfig) -> int:
        fitting = config.max_position_embeddings // ROUND * ROUND
        return max(CHUNK, min(DEFAULT_MAX_SEQ_LEN, fitting))

    @classmethod
    def check_max_seq_len(cls, config: GemmaConfig, max_seq_len: int) -> None:
        if (
            isinstance(max_seq_len, bool)
            or not isinstance(max_seq_len, int)
            or max_seq_len < CHUNK
            or max_seq_len % ROUND
            or max_seq_len > max(CHUNK, config.max_position_embeddings)
        ):
            raise ValueError(
                f"Model: max_seq_len={max_seq_len!r}: a multiple of {ROUND} (the prefill "
                f"attention's rounds) from {CHUNK} (a prefill chunk) to the model's "
                f"max_position_embeddings ({config.max_position_embeddings})"
            )

    @classmethod
    def open_checkpoint(cls, path, config: GemmaConfig) -> Checkpoint:
        return GemmaWeights.open_checkpoint(path, config)

    @classmethod
    def load_weights(cls, checkpoint: Checkpoint, config: GemmaConfig) -> GemmaWeights:
        return GemmaWeights.load(checkpoint, config)

    def build_graph(self, backend: str | None, device) -> GraphFunction:
        if device is None:
            device = DEFAULT_DEVICE
        device = device if isinstance(device, Device) else Device.from_name(device)
        self.plan = GemmaGraph.pack(
            self.config, self.weights, self.weight_format, device, self.max_seq_len
        )
        return gemma_graph(self.plan, backend=backend, trace_size=self.trace_size)

    def graph_weights(self) -> dict[str, np.ndarray]:
        return self.plan.weights

    def ahead_versions(self) -> list[tuple[str, dict]]:
        return [("decode", self._specs(1)), (f"prefill {CHUNK}", self._specs(CHUNK))]

    def _specs(self, rows: int) -> dict:
        c = self.config
        specs = {"x": ((rows, c.hidden_size), bf16)}
        if c.per_layer:
            specs["ple"] = ((c.num_hidden_layers, rows, c.per_layer), bf16)
        return specs

    # ---- running ----

    def _inputs(self, ids: list[int], rows: int) -> list[np.ndarray]:
        """The graph's inputs for `ids`, padded to `rows`."""
        c = self.config
        x = np.zeros((rows, c.hidden_size), bf16)
        scale = np.float32(math.sqrt(c.hidden_size))
        x[: len(ids)] = self.gather_rows(self.weights.embedding, ids).astype(np.float32) * scale
        inputs = [x]
        if c.per_layer:
            table = self.weights["model.embed_tokens_per_layer.weight"]
            too_big = [t for t in ids if t >= table.shape[0]]
            if too_big:
                raise ValueError(
                    f"Model: token id {too_big[0]} has no per-layer embedding "
                    f"(vocab_size_per_layer_input={table.shape[0]})"
                )
            token = self.gather_rows(table, ids).astype(np.float32)
            token *= np.float32(math.sqrt(c.per_layer) * PER_LAYER_INPUT_SCALE)
            ple = np.zeros((c.num_hidden_layers, rows, c.per_layer), bf16)
            ple[:, : len(ids)] = token.reshape(
                len(ids), c.num_hidden_layers, c.per_layer
            ).transpose(1, 0, 2)
            inputs.append(ple)
        return inputs

    def run_prefill(self, ids: list[int]) -> np.ndarray:
        whole = len(ids) // ROUND * ROUND
        logits = None
        for begin in range(0, whole, CHUNK):
            end = min(begin + CHUNK, whole)
            inputs = self._inputs(ids[begin:end], CHUNK)
            rows = self.plan.product_rows(end - begin)
            logits = self.forward(
                *inputs, begin=begin, end=end, last=end - 1 - begin, product_rows=rows
            )
        for pos in range(whole, len(ids)):
            logits = self.run_decode(ids[pos], pos)
        return logits

    def run_decode(self, token: int, pos: int) -> np.ndarray:
        # a decode computes one row: no projection reads product_rows
        inputs = self._inputs([token], 1)
        return self.forward(*inputs, begin=pos, end=pos + 1, last=0, product_rows=0)
