"""The `iron-llama` command line. One subcommand per job, each a `_NAME` function
taking the parsed arguments and returning the exit code (0 pass, 1 a failed
check, 2 bad input)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from iron.core.terminal import stdout_closed
from iron.dispatch import BackendUnavailable, cache_home
from iron.dispatch.selection import backend_names, get_backend
from iron.llama.checks import AccuracyBounds, check_accuracy, check_determinism
from iron.llama.config import LlamaConfig
from iron.llama.model import Model, NonFiniteLogits, check_fits, default_max_seq_len
from iron.llama.reference import Oracle, OracleModel
from iron.llama.sampling import Sampler
from iron.llama.synthetic import PRESETS, corpus, ensure_synthetic, make_synthetic, synthetic_config
from iron.llama.tokenizer import Tokenizer
from iron.llama.weights import LlamaWeights

DEMO_PROMPT = "Iron is the fourth most common element"
DEMO_SEED = 0


def paragraphs() -> list[str]:
    """The bundled text's paragraphs after its title: the default prompts of
    the checks (plain English, so a real Llama sees ordinary text)."""
    return [p.strip() for p in corpus().split("\n\n") if p.strip()][1:]


def demo_dir() -> Path:
    """Where `demo` keeps its synthetic model."""
    return cache_home() / "models" / "tiny"


def _model_dir(path: Path) -> Path:
    """--model: a directory, refused (naming it) before anything reads it."""
    if not path.is_dir():
        raise ValueError(
            f"--model {path}: "
            + ("is a file; " if path.exists() else "no such directory; ")
            + "give the model directory that holds config.json, model.safetensors "
            "and tokenizer.json"
        )
    return path


def _load(args: argparse.Namespace, prompt_tokens: int, new_tokens: int) -> Model:
    """Model.from_pretrained for a command, after refusing (before any work)
    a prompt that does not fit."""
    config = LlamaConfig.from_file(args.model)
    check_fits(prompt_tokens, new_tokens, args.max_seq_len or default_max_seq_len(config))
    return Model.from_pretrained(
        args.model, backend=args.backend, max_seq_len=args.max_seq_len, progress=_progress(args)
    )


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.quiet else None  # None: bars only on a terminal


def printable(text: str) -> str:
    """`text` with control characters other than newline and tab shown, not
    sent (an ESC or CSI drawn by a random model must not reach the terminal
    as an escape sequence): C0 and DEL as their Unicode control pictures, C1
    as the replacement character."""

    def shown(c: str) -> str:
        code = ord(c)
        if c in "\n\t" or 0x20 <= code < 0x7F or code > 0x9F:
            return c
        return chr(0x2400 + code) if code < 0x20 else "\u2421" if code == 0x7F else "\ufffd"

    return "".join(map(shown, text))


def _stream(
    model: Model, ids: list[int], num_tokens: int, sampler: Sampler, stop_tokens=None
) -> None:
    """Generate, printing each piece of text as its token is drawn."""
    text = model.tokenizer.stream()
    model.generate(
        ids,
        num_tokens,
        sampler,
        on_token=lambda t: print(printable(text.push(t)), end="", flush=True),
        stop_tokens=stop_tokens,
    )
    print()


def _generate(args: argparse.Namespace) -> int:
    text = args.prompt if args.prompt is not None else _read_prompt(args.prompt_file)
    sampler = Sampler(args.temperature, args.top_k or None, args.seed)
    ids = Tokenizer.from_pretrained(args.model).prompt(text)
    model = _load(args, len(ids), args.num_tokens)
    print(text, end="", flush=True)
    _stream(model, ids, args.num_tokens, sampler)
    print(model.metrics.table(), file=sys.stderr)
    return 0


def _read_prompt(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"--prompt-file {path}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except OSError as error:
        raise ValueError(f"--prompt-file {path}: cannot read: {error.strerror or error}") from None


def _check_accuracy(args: argparse.Namespace) -> int:
    text = args.prompt if args.prompt is not None else paragraphs()[0]
    ids = Tokenizer.from_pretrained(args.model).prompt(text)
    bounds = AccuracyBounds(args.mean_kl, args.p90_kl, args.max_kl)
    model = _load(args, len(ids), args.steps)
    oracle = OracleModel(Oracle.from_pretrained(args.model))
    report = check_accuracy(oracle, model, ids, steps=args.steps, bounds=bounds)
    print(f"{args.model}: {len(ids)} prompt tokens, backend {model.metrics.backend}")
    print(report.summary())
    return 0 if report.passed else 1


def _check_determinism(args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.from_pretrained(args.model)
    prompts = [tokenizer.prompt(text) for text in paragraphs()[1:3]]
    model = _load(args, max(map(len, prompts)), args.tokens)
    report = check_determinism(model, prompts, rounds=args.rounds, tokens=args.tokens)
    print(
        f"{args.model}: prompts of {[len(p) for p in prompts]} tokens, backend {model.metrics.backend}"
    )
    print(report.summary())
    return 0 if report.passed else 1


def _demo(args: argparse.Namespace) -> int:
    directory = demo_dir()
    config = synthetic_config("tiny")
    with _bar(len(LlamaWeights.expected_shapes(config)), "writing", args) as bar:
        written = ensure_synthetic(
            directory, "tiny", seed=DEMO_SEED, progress=lambda _: bar.update()
        )
    print(
        f"iron-llama demo: a tiny synthetic Llama ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {config.num_attention_heads} heads over "
        f"{config.num_key_value_heads} kv heads) with a real BPE tokenizer, "
        f"{'written to' if written else 'cached in'} {directory}.\n"
        "Its weights are random (seed 0): the text is gibberish by design. The numbers are "
        "the point: the IRON graph against the float32 oracle.\n"
        "For Llama 3.2 1B: iron-llama generate --model DIR --prompt TEXT (see the README).\n"
    )
    # the demo shows the device path: auto is iron-dispatch's (the npu, else sim)
    backend = get_backend(None).name if args.backend == "auto" else args.backend
    model = Model.from_pretrained(directory, backend=backend, progress=_progress(args))
    print(DEMO_PROMPT, end="", flush=True)
    # random weights: an end-of-text token means nothing, so it does not stop the demo
    ids = model.tokenizer.prompt(DEMO_PROMPT)
    _stream(model, ids, args.num_tokens, Sampler(seed=args.seed), stop_tokens=())
    print()
    measured = [model.metrics]
    if backend != "cpu":  # beside it, the same generation with the host kernels
        host = Model.from_pretrained(directory, backend="cpu", progress=_progress(args))
        host.generate(ids, args.num_tokens, Sampler(seed=args.seed), stop_tokens=())
        measured.append(host.metrics)
    print(side_by_side(measured))
    print()
    prompt = model.tokenizer.prompt(paragraphs()[0])
    report = check_accuracy(OracleModel(Oracle.from_pretrained(directory)), model, prompt)
    print(f"against the float32 oracle, from a {len(prompt)}-token prompt:")
    print(report.summary())
    return 0 if report.passed else 1


def side_by_side(measured: Sequence) -> str:
    """`Metrics` of several runs as one text table, a column per run."""
    columns = [m.rows() for m in measured]
    names = [name for name, _ in columns[0]]
    widths = [max(len(value) for _, value in rows) for rows in columns[:-1]]
    width = max(map(len, names))
    lines = []
    for i, name in enumerate(names):
        values = [rows[i][1] for rows in columns]
        padded = [v.ljust(w) for v, w in zip(values, widths)] + values[-1:]
        lines.append(f"{name:<{width}}  " + "  ".join(padded))
    return "\n".join(lines)


def _make_synthetic(args: argparse.Namespace) -> int:
    config = synthetic_config(args.preset, args.layers)  # bad arguments fail before any output
    with _bar(len(LlamaWeights.expected_shapes(config)), "writing", args) as bar:
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


def _bar(total: int, desc: str, args: argparse.Namespace) -> tqdm:
    return tqdm(total=total, desc=desc, unit="tensor", disable=args.quiet or None, file=sys.stderr)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _backend_option(parser: argparse.ArgumentParser) -> None:
    """--backend: "auto" or any registered backend (`iron doctor` lists them)."""
    parser.add_argument("--backend", choices=("auto", *backend_names()), default="auto")


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="DIR",
        type=Path,
        required=True,
        help="a Hugging Face Llama directory: config.json, model.safetensors, tokenizer.json",
    )
    _backend_option(parser)
    parser.add_argument(
        "--max-seq-len",
        type=_positive,
        metavar="N",
        help="positions the KV caches hold (a multiple of 256; default 2048)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iron-llama", description="Llama 3.2 1B on IRON.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log compiles and uploads")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="generate with a tiny synthetic model and check it against the oracle",
        description="Write (once, into the cache) a tiny synthetic Llama with random weights, "
        "generate from a prompt, print the metrics and the accuracy against the float32 oracle.",
    )
    _backend_option(demo)
    demo.add_argument("--num-tokens", type=_positive, default=40)
    demo.add_argument("--seed", type=int, default=DEMO_SEED, help="the sampler's seed")
    demo.set_defaults(run=_demo)

    generate = commands.add_parser(
        "generate",
        help="generate text, streaming tokens as they come",
        description="Prefill the prompt (BOS + text) and sample new tokens.",
    )
    _model_options(generate)
    prompt = generate.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT")
    prompt.add_argument("--prompt-file", metavar="FILE", type=Path)
    generate.add_argument("--num-tokens", type=_positive, default=40)
    generate.add_argument("--temperature", type=float, default=0.7, help="0: greedy")
    generate.add_argument("--top-k", type=int, default=50, help="0: the whole vocabulary")
    generate.add_argument("--seed", type=int, help="the sampler's seed (default: fresh)")
    generate.set_defaults(run=_generate)

    accuracy = commands.add_parser(
        "check-accuracy",
        help="teacher-forced KL against the float32 oracle; exit 1 on failure",
        description="Feed the model and the float32 oracle the oracle's greedy tokens and "
        "compare their distributions at every step (KL from float64 log-softmax).",
    )
    _model_options(accuracy)
    accuracy.add_argument("--steps", type=_positive, default=40)
    accuracy.add_argument("--prompt", metavar="TEXT", help="default: a bundled paragraph")
    bounds = AccuracyBounds()
    accuracy.add_argument("--mean-kl", type=float, default=bounds.mean_kl, metavar="BOUND")
    accuracy.add_argument("--p90-kl", type=float, default=bounds.p90_kl, metavar="BOUND")
    accuracy.add_argument("--max-kl", type=float, default=bounds.max_kl, metavar="BOUND")
    accuracy.set_defaults(run=_check_accuracy)

    determinism = commands.add_parser(
        "check-determinism",
        help="two prompts alternated, logits compared bitwise; exit 1 on failure",
        description="Run two bundled prompts alternately for several rounds; every logit must "
        "equal the first round's bit for bit.",
    )
    _model_options(determinism)
    determinism.add_argument("--rounds", type=_positive, default=5)
    determinism.add_argument("--tokens", type=_positive, default=4, help="greedy tokens per run")
    determinism.set_defaults(run=_check_determinism)

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
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        if getattr(args, "model", None) is not None:
            _model_dir(args.model)
        status = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, where it is caught, not at exit
        return status
    except BrokenPipeError:
        return stdout_closed()
    except NonFiniteLogits as error:  # a broken model: a failed run, not bad input
        print(printable(f"iron-llama {args.command}: {error}"), file=sys.stderr)
        return 1
    except (ValueError, OSError, BackendUnavailable) as error:
        parser.exit(2, printable(f"iron-llama {args.command}: error: {error}") + "\n")


if __name__ == "__main__":
    sys.exit(main())
