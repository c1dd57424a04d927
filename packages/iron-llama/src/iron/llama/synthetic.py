"""Synthetic Llama checkpoints: a real HF-layout model directory with random weights.

`make_synthetic(dir)` writes config.json (llama3 RoPE scaling, grouped-query
attention, tied embeddings), model.safetensors (bf16, random from the seed)
and tokenizer.json (a byte-level BPE trained with `tokenizers` on the text
bundled in this package). Same arguments, same bytes. The weights carry no
knowledge: generated text is fluent only at the byte level.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import ml_dtypes
import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from iron.llama.checkpoint import Checkpoint, LazyTensor, write_safetensors
from iron.llama.config import Llama3RopeScaling, LlamaConfig
from iron.llama.weights import LlamaWeights

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; writes stay private and atomic
    fcntl = None

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
TOKENIZER_VOCAB = 512
PRESETS: dict[str, dict[str, int]] = {
    # the smallest shapes the IRON graph takes: MHA's heads are 64 wide
    "tiny": dict(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        vocab_size=TOKENIZER_VOCAB,
    ),
    # Llama 3.2 1B's dimensions
    "1b-shaped": dict(
        hidden_size=2048,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
    ),
}
_CHUNK_ELEMENTS = 1 << 24  # random numbers drawn (and held in float32) at once: 64 MiB


def corpus() -> str:
    """The text bundled with the package (tokenizer training data, demo prompts)."""
    return resources.files("iron.llama").joinpath("data/corpus.txt").read_text(encoding="utf-8")


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB) -> tokenizers.Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens (ids 0 and 1 are BOS and
    EOS) trained on `corpus()`; its encode adds BOS, like Llama 3's."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus().splitlines(keepends=True), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"train_tokenizer: the corpus yields {tokenizer.get_vocab_size()} tokens, "
            f"not the {vocab_size} asked for"
        )
    return tokenizer


def synthetic_config(preset: str = "tiny", layers: int | None = None) -> LlamaConfig:
    """The LlamaConfig of a preset, with `layers` decoder layers when given."""
    if preset not in PRESETS:
        raise ValueError(f"make_synthetic: preset={preset!r} must be one of {sorted(PRESETS)}")
    if layers is not None and (
        isinstance(layers, bool) or not isinstance(layers, int) or layers < 1
    ):
        raise ValueError(f"make_synthetic: layers={layers!r} must be a positive integer")
    dims = dict(PRESETS[preset])
    if layers is not None:
        dims["num_hidden_layers"] = layers
    return LlamaConfig(
        **dims,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling=Llama3RopeScaling(32.0, 1.0, 4.0, 8192),
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        bos_token_id=0,
        eos_token_ids=(1,),
    )


def synthetic_tensors(config: LlamaConfig, seed: int = 0) -> dict[str, LazyTensor]:
    """Random bf16 tensors for every name `config` implies, each drawn from its
    own generator (seeded by `seed` and the name), so a tensor does not depend
    on which others are written. Scales: matrices N(0, 1/in) keep activations
    near unit size; the embedding N(0, 4/hidden) gives tied-head logits a
    spread of about 2; o and down are 4x larger so each layer's output
    outweighs the token's own embedding in the residual (else the tied head
    mostly predicts the input token back); norm weights N(1, 0.1) so a
    dropped norm weight shows."""
    tensors = {}
    for name, shape in LlamaWeights.expected_shapes(config).items():
        if len(shape) == 1:
            mean, std = 1.0, 0.1
        elif name == "model.embed_tokens.weight":
            mean, std = 0.0, 2.0 / np.sqrt(shape[1])
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            mean, std = 0.0, 4.0 / np.sqrt(shape[1])
        else:
            mean, std = 0.0, 1.0 / np.sqrt(shape[1])
        tensors[name] = LazyTensor(
            np.dtype(ml_dtypes.bfloat16), shape, _normal(name, shape, mean, std, seed)
        )
    return tensors


def _normal(
    name: str, shape: tuple[int, ...], mean: float, std: float, seed: int
) -> Callable[[], Iterator[np.ndarray]]:
    def chunks() -> Iterator[np.ndarray]:
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        total = int(np.prod(shape))
        for start in range(0, total, _CHUNK_ELEMENTS):
            draw = rng.standard_normal(min(_CHUNK_ELEMENTS, total - start), dtype=np.float32)
            yield (draw * np.float32(std) + np.float32(mean)).astype(ml_dtypes.bfloat16)

    return chunks


def make_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write config.json, tokenizer.json and model.safetensors of a synthetic
    `preset` model ("tiny" or "1b-shaped") into `directory` and return it.
    `progress(name)` is called after each tensor is written.

    The files are written into a private folder beside `directory` and
    renamed into place whole, under a lock (`.NAME.lock` beside it), so an
    interrupted or failed run leaves `directory` as it was and two writers
    never share a file. An existing `directory` is replaced only when it
    holds nothing but those three files (a model this wrote); anything else
    is refused, naming what is there."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"make_synthetic: seed={seed!r} must be a non-negative integer")
    config = synthetic_config(preset, layers)
    directory = Path(directory)
    with _locked(directory):
        _write_synthetic(directory, config, preset, layers, seed, progress)
    return directory


_FILES = ("config.json", "tokenizer.json", "model.safetensors")


def _write_synthetic(directory, config, preset, layers, seed, progress) -> None:
    if directory.exists():
        if not directory.is_dir():
            raise ValueError(f"make_synthetic: {directory} is a file, not a directory")
        foreign = sorted(p.name for p in directory.iterdir() if p.name not in _FILES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ValueError(
                f"make_synthetic: {directory} holds files it did not write ({shown}); "
                "give a new or empty directory, or one holding only a synthetic model"
            )
        if _holds_a_real_model(directory):
            raise ValueError(
                f"make_synthetic: {directory / 'model.safetensors'} is not a synthetic model "
                "(no iron.synthetic metadata); it is left alone: give another directory"
            )
    work = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        _write_text(work / "tokenizer.json", train_tokenizer().to_str(pretty=True))
        write_safetensors(
            work / "model.safetensors",
            synthetic_tensors(config, seed),
            metadata=_metadata(preset, layers, seed),
            progress=progress,
        )
        _write_text(work / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
        if directory.exists():
            # two renames: the old model is whole until the new one is in place
            aside = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.replace(directory, aside / directory.name)
            os.replace(work, directory)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(work, directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _holds_a_real_model(directory: Path) -> bool:
    """Whether `directory` holds a readable checkpoint that this module did
    not write (an unreadable one is no model to keep)."""
    try:
        with Checkpoint.open(directory) as checkpoint:
            return any("iron.synthetic" not in f.metadata for f in checkpoint.files)
    except (ValueError, OSError):
        return False


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold `.NAME.lock` beside `directory` (one writer at a time; a second
    waits), and clear what a killed writer left there (its private folders)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "a+b") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        for kind in ("tmp", "old"):
            for stale in directory.parent.glob(f".{directory.name}.{kind}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _metadata(preset: str, layers: int | None, seed: int) -> dict[str, str]:
    recipe = {"preset": preset, "layers": layers, "seed": seed}
    return {"format": "pt", "iron.synthetic": json.dumps(recipe, sort_keys=True)}


def ensure_synthetic(
    directory: str | Path,
    preset: str = "tiny",
    layers: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> bool:
    """Make sure `directory` holds the synthetic model of these arguments,
    writing it (`make_synthetic`) when it is missing, incomplete, corrupt or
    another recipe. Returns whether it was written."""
    directory = Path(directory)
    config = synthetic_config(preset, layers)
    with _locked(directory):  # a second first run waits, then finds the model written
        try:
            # opening validates every header entry against the file's size
            with Checkpoint.open(directory) as checkpoint:
                complete = (
                    LlamaConfig.from_file(directory) == config
                    and (directory / "tokenizer.json").is_file()
                    and len(checkpoint.files) == 1
                    and checkpoint.files[0].metadata == _metadata(preset, layers, seed)
                    and set(checkpoint) == set(LlamaWeights.expected_shapes(config))
                )
        except (ValueError, OSError):
            complete = False
        if not complete:
            _write_synthetic(directory, config, preset, layers, seed, progress)
    return not complete


def _write_text(path: Path, text: str) -> None:
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
