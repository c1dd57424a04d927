"""Writing synthetic model directories: the helpers every app's
`make_synthetic` is made of.

A synthetic model is a real Hugging Face directory (config.json,
model.safetensors, tokenizer.json, and whatever else the app writes) with
random weights: `normal_tensor` draws one tensor from its own generator
(seeded by the seed and the tensor's name, so a tensor does not depend on
which others are written), `train_tokenizer` trains a byte-level BPE on
the text bundled here, and `write_model_dir` writes it all into a private
folder beside the target and renames it into place under a lock, so an
interrupted run leaves the target as it was and two writers never share a
file. The same arguments write the same bytes. `SyntheticRecipe` puts them
together: an app gives its config of a preset, its tensors and its text
files, and gets `make` and `ensure`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import ml_dtypes
import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from iron.lm.checkpoint import Checkpoint, LazyTensor, write_safetensors

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; writes stay private and atomic
    fcntl = None

#: the key of the safetensors metadata that marks a model this module wrote
MARK = "iron.synthetic"
_CHUNK_ELEMENTS = 1 << 24  # random numbers drawn (and held in float32) at once: 64 MiB


def corpus() -> str:
    """The text bundled with the package (tokenizer training data, default
    prompts of the checks and the demos)."""
    return resources.files("iron.lm").joinpath("data/corpus.txt").read_text(encoding="utf-8")


def paragraphs() -> list[str]:
    """The bundled text's paragraphs after its title: the default prompts of
    the checks (plain English, so a real model sees ordinary text)."""
    return [p.strip() for p in corpus().split("\n\n") if p.strip()][1:]


def train_tokenizer(
    vocab_size: int, special_tokens: Sequence[str], bos: str | None = None
) -> tokenizers.Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens trained on `corpus()`,
    `special_tokens` first (ids 0, 1, ...); its encode adds `bos` when given,
    like Llama 3's."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus().splitlines(keepends=True), trainer)
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))]
        )
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"train_tokenizer: the corpus yields {tokenizer.get_vocab_size()} tokens, "
            f"not the {vocab_size} asked for"
        )
    return tokenizer


def normal_tensor(
    name: str,
    shape: tuple[int, ...],
    mean: float,
    std: float,
    seed: int,
    dtype=ml_dtypes.bfloat16,
) -> LazyTensor:
    """N(mean, std) of `shape`, drawn in float32 from a generator seeded by
    `seed` and `name` a chunk at a time, rounded once to `dtype`."""

    def chunks() -> Iterator[np.ndarray]:
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        total = int(np.prod(shape))
        for start in range(0, total, _CHUNK_ELEMENTS):
            draw = rng.standard_normal(min(_CHUNK_ELEMENTS, total - start), dtype=np.float32)
            yield (draw * np.float32(std) + np.float32(mean)).astype(dtype)

    return LazyTensor(np.dtype(dtype), tuple(shape), chunks)


def preset_dims(presets: Mapping[str, Mapping], preset: str, layers: int | None) -> dict:
    """A copy of `presets[preset]` with `layers` as num_hidden_layers when
    given; a preset not in `presets` or layers not a positive integer is
    refused, naming the argument."""
    if preset not in presets:
        raise ValueError(f"make_synthetic: preset={preset!r} must be one of {sorted(presets)}")
    if layers is not None and (
        isinstance(layers, bool) or not isinstance(layers, int) or layers < 1
    ):
        raise ValueError(f"make_synthetic: layers={layers!r} must be a positive integer")
    dims = dict(presets[preset])
    if layers is not None:
        dims["num_hidden_layers"] = layers
    return dims


def recipe_metadata(**recipe) -> dict[str, str]:
    """The safetensors metadata that marks a synthetic model and its recipe."""
    return {"format": "pt", MARK: json.dumps(recipe, sort_keys=True)}


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
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


def write_model_dir(
    directory: Path,
    texts: Mapping[str, str],
    tensors: Mapping[str, np.ndarray | LazyTensor],
    metadata: Mapping[str, str],
    progress: Callable[[str], None] | None = None,
) -> None:
    """Write `texts` (file name -> content) and `tensors` (as
    model.safetensors, with `metadata`) into `directory`, whole or not at
    all; call under `locked(directory)`. An existing `directory` is replaced
    only when it holds nothing but these files and its weights carry the
    synthetic mark; anything else is refused, naming what is there."""
    names = {*texts, "model.safetensors"}
    if directory.exists():
        if not directory.is_dir():
            raise ValueError(f"make_synthetic: {directory} is a file, not a directory")
        foreign = sorted(p.name for p in directory.iterdir() if p.name not in names)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ValueError(
                f"make_synthetic: {directory} holds files it did not write ({shown}); "
                "give a new or empty directory, or one holding only a synthetic model"
            )
        if _holds_a_real_model(directory):
            raise ValueError(
                f"make_synthetic: {directory / 'model.safetensors'} is not a synthetic model "
                f"(no {MARK} metadata); it is left alone: give another directory"
            )
    work = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        for name, text in texts.items():
            (work / name).write_text(text, encoding="utf-8")
        write_safetensors(work / "model.safetensors", tensors, metadata, progress)
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


def holds_recipe(directory: Path, metadata: Mapping[str, str], names: Sequence[str]) -> bool:
    """Whether `directory` holds a whole synthetic model of this recipe: one
    readable model.safetensors (every header entry checked against the
    file's size) with this `metadata` and exactly the tensors `names`."""
    try:
        with Checkpoint.open(directory) as checkpoint:
            return (
                len(checkpoint.files) == 1
                and checkpoint.files[0].metadata == dict(metadata)
                and set(checkpoint) == set(names)
            )
    except (ValueError, OSError):
        return False


def _holds_a_real_model(directory: Path) -> bool:
    """Whether `directory` holds a readable checkpoint that this module did
    not write (an unreadable one is no model to keep)."""
    try:
        with Checkpoint.open(directory) as checkpoint:
            return any(MARK not in f.metadata for f in checkpoint.files)
    except (ValueError, OSError):
        return False


@dataclass(frozen=True)
class SyntheticRecipe:
    """How an app writes its synthetic models. `config(preset, layers)` is
    the config of a preset (it refuses bad arguments); `read_config(dir)`
    reads a directory's config.json back; `expected_shapes(config)` names
    every tensor; `tensors(config, seed)` draws them; `files` maps each
    other text file (tokenizer.json, ...) to the function writing it.
    config.json is `config.to_dict()` as JSON."""

    presets: Sequence[str]
    config: Callable[[str, int | None], object]
    read_config: Callable[[Path], object]
    expected_shapes: Callable[[object], Mapping[str, tuple[int, ...]]]
    tensors: Callable[[object, int], Mapping[str, LazyTensor]]
    files: Mapping[str, Callable[[], str]]

    def make(
        self,
        directory: str | Path,
        preset: str = "tiny",
        layers: int | None = None,
        seed: int = 0,
        progress: Callable[[str], None] | None = None,
    ) -> Path:
        """Write the model of `preset` (with `layers` layers when given)
        and `seed` into `directory` and return it; `progress(name)` after
        each tensor. Written whole or not at all, under a lock."""
        config = self._checked(preset, layers, seed)
        directory = Path(directory)
        with locked(directory):
            self._write(directory, config, preset, layers, seed, progress)
        return directory

    def ensure(
        self,
        directory: str | Path,
        preset: str = "tiny",
        layers: int | None = None,
        seed: int = 0,
        progress: Callable[[str], None] | None = None,
    ) -> bool:
        """Make sure `directory` holds the model of these arguments, writing
        it (`make`) when it is missing, incomplete, corrupt or another
        recipe. Returns whether it was written."""
        config = self._checked(preset, layers, seed)
        directory = Path(directory)
        metadata = recipe_metadata(preset=preset, layers=layers, seed=seed)
        with locked(directory):  # a second first run waits, then finds the model written
            try:
                complete = (
                    all((directory / name).is_file() for name in self.files)
                    and self.read_config(directory) == config
                    and holds_recipe(directory, metadata, list(self.expected_shapes(config)))
                )
            except (ValueError, OSError):
                complete = False
            if not complete:
                self._write(directory, config, preset, layers, seed, progress)
        return not complete

    def _checked(self, preset: str, layers: int | None, seed: int):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"make_synthetic: seed={seed!r} must be a non-negative integer")
        return self.config(preset, layers)

    def _write(self, directory: Path, config, preset, layers, seed, progress) -> None:
        texts = {name: write() for name, write in self.files.items()}
        texts["config.json"] = json.dumps(config.to_dict(), indent=2) + "\n"
        metadata = recipe_metadata(preset=preset, layers=layers, seed=seed)
        write_model_dir(directory, texts, self.tensors(config, seed), metadata, progress)
