"""The `iron-llama` command line. One subcommand per job, each a `_NAME` function
taking the parsed arguments and returning the exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from iron.llama.synthetic import PRESETS, make_synthetic, synthetic_config
from iron.llama.weights import LlamaWeights


def _make_synthetic(args: argparse.Namespace) -> int:
    config = synthetic_config(args.preset, args.layers)  # bad arguments fail before any output
    tensors = len(LlamaWeights.expected_shapes(config))
    with tqdm(total=tensors, desc="writing", unit="tensor", disable=None, file=sys.stderr) as bar:
        make_synthetic(
            args.dir, args.preset, args.layers, args.seed, progress=lambda _: bar.update()
        )
    size = (Path(args.dir) / "model.safetensors").stat().st_size
    print(
        f"wrote a synthetic {args.preset} model (random weights, seed {args.seed}) to {args.dir}: "
        f"{config.num_hidden_layers} layer{'s' * (config.num_hidden_layers != 1)}, "
        f"hidden {config.hidden_size}, "
        f"vocab {config.vocab_size}, {size / 2**20:.1f} MiB of bf16 weights"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iron-llama", description="Llama 3.2 1B on IRON.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    make = commands.add_parser(
        "make-synthetic",
        help="write a model directory with random weights and a real BPE tokenizer",
        description="Write config.json, tokenizer.json and model.safetensors of a synthetic "
        "Llama (random bf16 weights from the seed) into DIR.",
    )
    make.add_argument("dir", metavar="DIR", type=Path)
    make.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    make.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    make.add_argument("--seed", type=int, default=0)
    make.set_defaults(run=_make_synthetic)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, OSError) as error:
        parser.exit(2, f"iron-llama {args.command}: error: {error}\n")


if __name__ == "__main__":
    sys.exit(main())
