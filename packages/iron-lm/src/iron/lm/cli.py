"""The command line every model app gets: `demo`, `generate`, `chat`,
`serve`, `check-accuracy`, `check-determinism` and `make-synthetic`, with
the short flags people know from llama.cpp (`-m`, `-p`, `-n`, `-s`,
`--temp`, `--top-k`, `--top-p`, `-c`).

An app describes itself once (`App`: its name, its `GraphModel`, its
oracle, its synthetic models) and its console script is `App.main`. Each
command is a function taking the app and the parsed arguments and
returning the exit status: 0 done, 1 a failed check or a broken model, 2
bad input (one line naming the file, the flag or the variable, and the
rule), 130 interrupted (Ctrl-C: one line, nothing half-written), 141 a
closed stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tqdm import tqdm

# iron-core's one escaper: an ESC or CSI drawn by a random model, or in a file
# name or a prompt, is shown as \x1b, never sent to the terminal
from iron.core.terminal import INTERRUPTED, printable, stdout_closed
from iron.dispatch import BackendUnavailable, cache_home
from iron.dispatch.backends.cpu import host_modules
from iron.dispatch.host import warm_elsewhere
from iron.dispatch.selection import backend_names, get_backend
from iron.lm.backends import checked_settings
from iron.lm.checks import AccuracyBounds, check_accuracy, check_determinism
from iron.lm.generation import Completion, NonFiniteLogits, check_fits, complete
from iron.lm.model import GraphModel, progress_bar, status_line
from iron.lm.protocols import CausalLM
from iron.lm.sampling import Sampler
from iron.lm.synthetic import SyntheticRecipe, paragraphs
from iron.lm.tokenizer import Tokenizer

DEMO_PROMPT = "Iron is the fourth most common element"
DEMO_SEED = 0
#: the demo's column heads: what each backend's figures measure
DEMO_LABELS = {
    "sim": "sim: NPU designs simulated on this CPU (not NPU speed)",
    "cpu": "cpu: host kernels on this CPU",
    "reference": "reference: numpy on this CPU",
    "npu": "npu: the NPU",
}


@dataclass(frozen=True)
class SyntheticModels:
    """How an app writes models with random weights: its presets, the
    config of a preset (bad arguments fail here, before any output), the
    tensor names of a config (for the progress bar), and its
    `make_synthetic(dir, preset, layers, seed, progress)` and
    `ensure_synthetic(...)` (write only when missing or another recipe).
    `demo` writes the preset named "tiny"."""

    presets: Sequence[str]
    config: Callable[[str, int | None], Any]
    tensor_names: Callable[[Any], Sequence[str]]
    make: Callable[..., Path]
    ensure: Callable[..., bool]

    @classmethod
    def of(cls, recipe: SyntheticRecipe) -> SyntheticModels:
        """The synthetic models an iron-lm `SyntheticRecipe` writes."""
        return cls(
            presets=tuple(recipe.presets),
            config=recipe.config,
            tensor_names=lambda config: list(recipe.expected_shapes(config)),
            make=recipe.make,
            ensure=recipe.ensure,
        )


@dataclass(frozen=True)
class ModelFlag:
    """A flag of an app's own that every command loading a model takes
    (`--weights bfp16`): `flags` and `options` as `add_argument` takes them;
    its value reaches `from_pretrained` (and so the model's constructor) as
    the keyword `keyword`."""

    flags: tuple[str, ...]
    keyword: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class App:
    """One model app's command line. `name` is the console script and
    `distribution` the distribution it ships in (its version is shown;
    default: none); `model` its `GraphModel`; `oracle(dir)` its float32
    oracle as a `CausalLM`; `describe(config)` says what a synthetic model
    is ("a tiny synthetic Llama (2 layers, ...)"); `real_model` how to run
    a real checkpoint (one line); `model_help` what --model must hold;
    `demo_model` the folder under the cache's models/ the demo writes;
    `model_flags` the app's own flags (`ModelFlag`)."""

    name: str
    title: str
    model: type[GraphModel]
    oracle: Callable[[Path], CausalLM]
    synthetic: SyntheticModels
    describe: Callable[[Any], str]
    real_model: str
    model_help: str
    demo_model: str = "tiny"
    model_flags: Sequence[ModelFlag] = ()
    distribution: str | None = None

    def demo_dir(self) -> Path:
        """Where `demo` keeps its synthetic model."""
        return cache_home() / "models" / self.demo_model

    def parser(self) -> argparse.ArgumentParser:
        return _parser(self)

    def main(self, argv: Sequence[str] | None = None) -> int:
        return _main(self, argv)


# ---- commands ----


def _generate(app: App, args: argparse.Namespace) -> int:
    if args.prompt is None and args.prompt_file is None:
        raise ValueError("one of the arguments --prompt --prompt-file is required")
    text = args.prompt if args.prompt is not None else _read_prompt(args.prompt_file)
    sampler = _sampler(args)
    ids = Tokenizer.from_pretrained(args.model).prompt(text)
    model = _load(app, args, len(ids), args.num_tokens)
    _stream(model, ids, args.num_tokens, sampler, stop_strings=args.stop, prefix=text)
    print(model.metrics.table(), file=sys.stderr)
    return 0


def _chat(app: App, args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.from_pretrained(args.model)
    base = [{"role": "system", "content": args.system}] if args.system else []
    tokenizer.require_chat_template()  # refused before the model loads
    sampler = _sampler(args)
    model = _load(app, args, 0, 1)
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    print(
        f"{app.name} chat: {printable(str(args.model))} on {model.metrics.backend}, "
        f"{model.max_seq_len} positions; /reset forgets the conversation, /exit (or Ctrl-D) ends it",
        file=sys.stderr,
    )
    messages = list(base)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print()
            return 0
        command = line.strip()
        if command == "/exit":
            return 0
        if command == "/reset":
            messages = list(base)
            print("(conversation forgotten)", file=sys.stderr)
            continue
        if command.startswith("/") or not command:
            if command:
                print(f"unknown command {printable(command)}: /reset or /exit", file=sys.stderr)
            continue
        messages.append({"role": "user", "content": line})
        ids = tokenizer.chat_prompt(messages)
        room = model.max_seq_len - len(ids)
        if room < 1:
            messages.pop()
            print(
                f"the conversation needs {len(ids)} positions, more than the "
                f"{model.max_seq_len} the model holds: /reset to start again",
                file=sys.stderr,
            )
            continue
        reply = _stream(model, ids, min(args.num_tokens, room), sampler)
        messages.append({"role": "assistant", "content": reply.text})


def _serve(app: App, args: argparse.Namespace) -> int:
    from iron.lm.server import serve  # the ASGI stack loads only for this command

    name = args.served_name or args.model.resolve().name
    model = _load(app, args, 0, 1)
    serve(
        model,
        name,
        host=args.host,
        port=args.port,
        queue=args.queue,
        ready=lambda url: print(f"{app.name} serve: {name} on {url}", flush=True),
    )
    return 0


def _check_accuracy(app: App, args: argparse.Namespace) -> int:
    text = args.prompt if args.prompt is not None else paragraphs()[0]
    ids = Tokenizer.from_pretrained(args.model).prompt(text)
    bounds = AccuracyBounds(args.mean_kl, args.p90_kl, args.max_kl)
    model = _load(app, args, len(ids), args.steps)
    _status(app, f"accuracy: {args.steps} teacher-forced steps against the float32 oracle")
    report = check_accuracy(app.oracle(args.model), model, ids, steps=args.steps, bounds=bounds)
    about = {"model": str(args.model), "prompt_tokens": len(ids), "backend": model.metrics.backend}
    if args.json:
        print(json.dumps({**about, **report.to_dict()}))
    else:
        print(printable(f"{args.model}: {len(ids)} prompt tokens, backend {model.metrics.backend}"))
        print(report.summary())
    return 0 if report.passed else 1


def _check_determinism(app: App, args: argparse.Namespace) -> int:
    tokenizer = Tokenizer.from_pretrained(args.model)
    prompts = [tokenizer.prompt(text) for text in paragraphs()[1:3]]
    model = _load(app, args, max(map(len, prompts)), args.tokens)
    report = check_determinism(model, prompts, rounds=args.rounds, tokens=args.tokens)
    sizes = [len(p) for p in prompts]
    if args.json:
        about = {"model": str(args.model), "prompt_tokens": sizes, "backend": model.metrics.backend}
        print(json.dumps({**about, **report.to_dict()}))
    else:
        print(
            printable(f"{args.model}: prompts of {sizes} tokens, backend {model.metrics.backend}")
        )
        print(report.summary())
    return 0 if report.passed else 1


def _demo(app: App, args: argparse.Namespace) -> int:
    # the demo shows the device path: auto is iron-dispatch's (the npu, else sim)
    backend = get_backend(None).name if args.backend == "auto" else args.backend
    ok, why = get_backend(backend).available()
    if not ok:  # refused before anything is printed or written
        raise BackendUnavailable(f"backend {backend!r} is not available here: {why}")
    directory = app.demo_dir()
    config = app.synthetic.config("tiny", None)
    print(
        f"{app.name} demo: {app.describe(config)} with a real BPE tokenizer, in {printable(str(directory))}.\n"
        f"Its weights are random (seed {DEMO_SEED}): the text is gibberish by design. What "
        "counts is that the graph agrees with the float32 oracle (the check at the end).\n"
        + (
            "sim is the device path without an NPU: every step's NPU design runs in IRON's "
            "functional simulator on this CPU. It proves the designs compute the right bytes; "
            "its speed is the simulator's, not an NPU's.\n"
            if backend == "sim"
            else ""
        )
        + f"{app.real_model}\n"
    )
    _ensure_demo_model(app, args)
    _status(app, f"{backend}: compiling the graph and uploading the weights")
    model = app.model.from_pretrained(directory, backend=backend, progress=_progress(args))
    # the cpu column's kernels compile (first run) or load on the other core meanwhile
    ahead = warm_elsewhere(host_modules(model.forward)) if backend != "cpu" else None
    ids = model.tokenizer.prompt(DEMO_PROMPT)
    _status(app, f"{backend}: {args.num_tokens} tokens, streamed as they come")
    # random weights: an end-of-text token means nothing, so it does not stop the demo
    sampler = Sampler(seed=args.seed)
    drawn = _stream(model, ids, args.num_tokens, sampler, stop_tokens=(), prefix=DEMO_PROMPT)
    measured = [model.metrics]
    if backend != "cpu":  # beside it, the same generation with the host kernels
        _wait_for(ahead, "host kernels", "JIT compiling in a second process", args)
        _status(app, "cpu: loading the host kernels (compiled once, then cached) and the weights")
        host = app.model.from_pretrained(directory, backend="cpu", progress=_progress(args))
        _status(app, f"cpu: {args.num_tokens} tokens from the same prompt and seed")
        tokens = host.generate(ids, args.num_tokens, Sampler(seed=args.seed), stop_tokens=())
        print(printable(DEMO_PROMPT + host.tokenizer.decode(tokens)))
        print(_agreement(backend, drawn.tokens, tokens))
        measured.append(host.metrics)
    print()
    print(side_by_side(measured, [DEMO_LABELS.get(m.backend, m.backend) for m in measured]))
    print()
    prompt = model.tokenizer.prompt(paragraphs()[0])
    _status(app, f"accuracy: 40 teacher-forced steps of {backend} against the float32 oracle")
    report = check_accuracy(app.oracle(directory), model, prompt)
    print(f"against the float32 oracle, from a {len(prompt)}-token prompt:")
    print(report.summary())
    return 0 if report.passed else 1


def _wait_for(process, label: str, doing: str, args: argparse.Namespace) -> None:
    """Wait for `process` (None: nothing to wait for), saying what it does."""
    if process is None:
        return
    with status_line(_progress(args), label) as status:
        while process.poll() is None:
            status(doing)
            time.sleep(0.2)


def _ensure_demo_model(app: App, args: argparse.Namespace) -> None:
    """Write the demo's synthetic model unless the cache holds it whole."""
    synthetic = app.synthetic
    config = synthetic.config("tiny", None)
    announced = False

    def written(_) -> None:
        nonlocal announced
        if not announced:  # the first tensor: say what is being written
            _status(app, f"writing the model into {app.demo_dir()} (once)")
            announced = True
        bar.update()

    with _bar(len(synthetic.tensor_names(config)), "writing", args) as bar:
        synthetic.ensure(app.demo_dir(), "tiny", seed=DEMO_SEED, progress=written)


def _agreement(backend: str, tokens: Sequence[int], host: Sequence[int]) -> str:
    """Whether the cpu run drew `backend`'s tokens, and where they part."""
    if list(tokens) == list(host):
        return f"cpu drew the same {len(host)} tokens as {backend}."
    first = next(
        (i for i, (a, b) in enumerate(zip(tokens, host)) if a != b), min(map(len, (tokens, host)))
    )
    why = (
        f"{backend} rounds as the NPU's kernels do (on npu2 bf16 products go through bfp16 "
        "blocks) where cpu rounds as the numpy references do"
        if backend in ("sim", "npu")
        else f"{backend} and cpu sum in float32 in other orders"
    )
    return (
        f"cpu's tokens part from {backend}'s at token {first + 1} of {len(host)}: a sampled "
        f"token can tip on a small difference of logits, and {why}; both stay within the "
        "operators' tolerances."
    )


def _plan(app: App, args: argparse.Namespace) -> int:
    directory = args.model
    if directory is None:
        _ensure_demo_model(app, args)
        directory = app.demo_dir()
    _status(app, f"compiling {directory}'s graph (its plan is the same on every backend)")
    options = {flag.keyword: getattr(args, flag.keyword) for flag in app.model_flags}
    model = app.model.from_pretrained(
        directory,
        backend="reference",
        max_seq_len=args.max_seq_len,
        progress=_progress(args),
        **options,
    )
    forward = model.forward
    forward.plan_svg(args.svg, title=f"{app.name}: {printable(str(directory))}, one arena")
    print(printable(forward.summary()))
    print(
        f"wrote {printable(str(args.svg))}: time across, bytes up; weights, states and transients"
    )
    return 0


def _make_synthetic(app: App, args: argparse.Namespace) -> int:
    synthetic = app.synthetic
    config = synthetic.config(args.preset, args.layers)  # bad arguments fail before any output
    with _bar(len(synthetic.tensor_names(config)), "writing", args) as bar:
        synthetic.make(
            args.dir, args.preset, args.layers, args.seed, progress=lambda _: bar.update()
        )
    size = (Path(args.dir) / "model.safetensors").stat().st_size
    layers = config.num_hidden_layers
    print(
        f"wrote a synthetic {args.preset} model (random weights, seed {args.seed}) to "
        f"{printable(str(args.dir))}: "
        f"{layers} layer{'s' * (layers != 1)}, hidden {config.hidden_size}, "
        f"vocab {config.vocab_size}, {size / 2**20:.1f} MiB of bf16 weights"
    )
    return 0


# ---- shared steps ----


def _load(app: App, args: argparse.Namespace, prompt_tokens: int, new_tokens: int) -> GraphModel:
    """The app's model from --model, after refusing (before any work) a
    cache length the model cannot hold or a prompt that does not fit it."""
    config = app.model.config_class.from_file(args.model)
    max_seq_len = args.max_seq_len or app.model.default_max_seq_len(config)
    if args.max_seq_len is not None:
        app.model.check_max_seq_len(config, args.max_seq_len)
    check_fits(prompt_tokens, new_tokens, max_seq_len)
    options = {flag.keyword: getattr(args, flag.keyword) for flag in app.model_flags}
    return app.model.from_pretrained(
        args.model,
        backend=args.backend,
        max_seq_len=args.max_seq_len,
        progress=_progress(args),
        **options,
    )


def _sampler(args: argparse.Namespace) -> Sampler:
    return Sampler(args.temperature, args.top_k or None, args.seed, args.top_p)


def _stream(
    model: GraphModel,
    ids: list[int],
    num_tokens: int,
    sampler: Sampler,
    stop_tokens: Sequence[int] | None = None,
    stop_strings: Sequence[str] = (),
    prefix: str = "",
) -> Completion:
    """Generate, printing `prefix` (the prompt's text) and then each piece
    of text as its token is drawn; log records wait until the line ends."""
    with held_logs():
        print(printable(prefix), end="", flush=True)
        completion = complete(
            model,
            model.tokenizer,
            ids,
            num_tokens,
            sampler,
            stop_tokens=model.eos_token_ids if stop_tokens is None else stop_tokens,
            stop_strings=stop_strings or (),
            on_text=lambda piece: print(printable(piece), end="", flush=True),
            source=model.source,
        )
        print(flush=True)
    return completion


def _status(app: App, text: str) -> None:
    """One line on stderr before a phase that may take a while, so a
    terminal never sits silent (stdout flushed first, to keep the order)."""
    sys.stdout.flush()
    print(f"{app.name}: {text} ...", file=sys.stderr, flush=True)


class HeldLogs(logging.StreamHandler):
    """The command line's log handler (stderr): while text streams to the
    terminal (`held_logs`), records wait and are written after the line."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.held: list[logging.LogRecord] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.held is not None:
            self.held.append(record)
        else:
            super().emit(record)


@contextlib.contextmanager
def held_logs():
    """Hold the records of the root logger's `HeldLogs` handlers while
    the block runs, then write them."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, HeldLogs)]
    for handler in handlers:
        handler.held = []
    try:
        yield
    finally:
        for handler in handlers:
            held, handler.held = handler.held, None
            for record in held:
                handler.emit(record)


def _read_prompt(path: Path) -> str:
    # not refused when it is a FIFO: `--prompt-file <(command)` is one
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"--prompt-file {path}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except OSError as error:
        raise ValueError(f"--prompt-file {path}: cannot read: {error.strerror or error}") from None


def side_by_side(measured: Sequence, labels: Sequence[str] | None = None) -> str:
    """`Metrics` of several runs as one text table, a column per run, each
    headed by its backend's name or by its label in `labels`."""
    columns = [m.rows() for m in measured]
    for rows, label in zip(columns, labels or ()):
        rows[0] = (rows[0][0], label)
    names = [name for name, _ in columns[0]]
    widths = [max(len(value) for _, value in rows) for rows in columns[:-1]]
    width = max(map(len, names))
    lines = []
    for i, name in enumerate(names):
        values = [rows[i][1] for rows in columns]
        padded = [v.ljust(w) for v, w in zip(values, widths)] + values[-1:]
        lines.append(f"{name:<{width}}  " + "  ".join(padded))
    return "\n".join(lines)


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.quiet else None  # None: bars only on a terminal


def _bar(total: int, desc: str, args: argparse.Namespace) -> tqdm:
    return progress_bar(_progress(args), total=total, desc=desc, unit="tensor")


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


# ---- the parser ----


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535; 0 picks a free one)")
    return value


def _version(app: App) -> str:
    def of(dist: str) -> str:
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:  # an app run from a source tree
            return dist

    app_version = of(app.distribution) if app.distribution else app.name
    return f"{app_version} ({of('iron-npu-lm')})"


def _backend_option(parser: argparse.ArgumentParser) -> None:
    """--backend: "auto" or any registered backend (`iron doctor` lists them)."""
    parser.add_argument(
        "--backend",
        choices=("auto", *backend_names()),
        default="auto",
        help="where the graph runs: auto is the NPU where present, else cpu",
    )


def _model_options(app: App, parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-m", "--model", metavar="DIR", type=Path, required=True, help=app.model_help
    )
    _backend_option(parser)
    parser.add_argument(
        "-c",
        "--ctx-len",
        "--max-seq-len",
        dest="max_seq_len",
        type=_positive,
        metavar="N",
        help="positions the KV caches hold (default: the model's choice)",
    )
    for flag in app.model_flags:
        parser.add_argument(*flag.flags, dest=flag.keyword, **flag.options)


def _sampling_options(parser: argparse.ArgumentParser, seed_help: str) -> None:
    parser.add_argument(
        "--temp", "--temperature", dest="temperature", type=float, default=0.7, help="0: greedy"
    )
    parser.add_argument("--top-k", type=int, default=50, help="0: the whole vocabulary")
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="keep the most probable tokens up to this mass"
    )
    parser.add_argument("-s", "--seed", type=int, help=seed_help)


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def _parser(app: App) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=app.name, description=app.title)
    parser.add_argument("-v", "--verbose", action="store_true", help="log compiles and uploads")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--version", action="version", version=_version(app))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run, help: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help,
            description=description,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        sub.set_defaults(run=run)
        return sub

    demo = command(
        "demo",
        _demo,
        "generate with a tiny synthetic model and check it against the oracle",
        "Write (once, into the cache) a tiny synthetic model with random weights, "
        "generate from a prompt, print the metrics and the accuracy against the float32 oracle.",
    )
    _backend_option(demo)
    demo.add_argument("-n", "--num-tokens", type=_positive, default=40, help="tokens to draw")
    demo.add_argument("-s", "--seed", type=int, default=DEMO_SEED, help="the sampler's seed")

    generate = command(
        "generate",
        _generate,
        "generate text, streaming tokens as they come",
        "Prefill the prompt (BOS + text) and sample new tokens, stopping at the model's "
        "end-of-sequence tokens.",
    )
    _model_options(app, generate)
    prompt = generate.add_mutually_exclusive_group()  # one is required: _generate says so
    prompt.add_argument("-p", "--prompt", metavar="TEXT", help="the prompt")
    prompt.add_argument(
        "-f", "--prompt-file", metavar="FILE", type=Path, help="the prompt, from a file"
    )
    generate.add_argument(
        "-n", "--num-tokens", type=_positive, default=40, help="tokens to draw at most"
    )
    _sampling_options(generate, "the sampler's seed (default: fresh)")
    generate.add_argument(
        "--stop", metavar="TEXT", action="append", help="stop where this text appears (repeatable)"
    )

    chat = command(
        "chat",
        _chat,
        "talk with an Instruct model, turn by turn",
        "An interactive conversation through the model's own chat template "
        "(tokenizer_config.json): /reset forgets it, /exit or Ctrl-D ends it.",
    )
    _model_options(app, chat)
    chat.add_argument("--system", metavar="TEXT", help="a system message to start with")
    chat.add_argument(
        "-n", "--num-tokens", type=_positive, default=512, help="tokens per reply at most"
    )
    _sampling_options(chat, "the sampler's seed (default: fresh)")

    serve = command(
        "serve",
        _serve,
        "an OpenAI-compatible HTTP server for one model",
        "Serve /v1/models, /v1/completions and /v1/chat/completions (streaming as server-sent "
        "events); requests run one at a time on the device, in arrival order.",
    )
    _model_options(app, serve)
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=_port, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--served-name",
        metavar="NAME",
        help="the model's name in the API (default: the directory's)",
    )
    serve.add_argument(
        "--queue",
        type=int,
        default=8,
        metavar="N",
        help="requests that may wait while one runs; more are answered 503",
    )

    accuracy = command(
        "check-accuracy",
        _check_accuracy,
        "teacher-forced KL against the float32 oracle; exit 1 on failure",
        "Feed the model and the float32 oracle the oracle's greedy tokens and "
        "compare their distributions at every step (KL from float64 log-softmax).",
    )
    _model_options(app, accuracy)
    accuracy.add_argument("--steps", type=_positive, default=40, help="positions compared")
    accuracy.add_argument("-p", "--prompt", metavar="TEXT", help="default: a bundled paragraph")
    bounds = AccuracyBounds()
    accuracy.add_argument(
        "--mean-kl", type=float, default=bounds.mean_kl, metavar="BOUND", help="nats"
    )
    accuracy.add_argument(
        "--p90-kl", type=float, default=bounds.p90_kl, metavar="BOUND", help="nats"
    )
    accuracy.add_argument(
        "--max-kl", type=float, default=bounds.max_kl, metavar="BOUND", help="nats"
    )
    _json_option(accuracy)

    determinism = command(
        "check-determinism",
        _check_determinism,
        "two prompts alternated, logits compared bitwise; exit 1 on failure",
        "Run two bundled prompts alternately for several rounds; every logit must "
        "equal the first round's bit for bit.",
    )
    _model_options(app, determinism)
    determinism.add_argument("--rounds", type=_positive, default=5, help="rounds of both prompts")
    determinism.add_argument("--tokens", type=_positive, default=4, help="greedy tokens per run")
    _json_option(determinism)

    plan = command(
        "plan",
        _plan,
        "draw the graph's memory plan as an SVG picture",
        "Compile the model's graph (every version it compiles ahead) and draw its one arena: "
        "time across (each version's steps end to end), bytes up; weights, states (the KV "
        "caches) and transients coloured. The plan is the same on every backend.",
    )
    plan.add_argument(
        "-m",
        "--model",
        metavar="DIR",
        type=Path,
        help=f"{app.model_help} (default: the demo's synthetic model, written if missing)",
    )
    plan.add_argument("--svg", metavar="FILE", type=Path, required=True, help="the picture")
    plan.add_argument(
        "-c",
        "--ctx-len",
        "--max-seq-len",
        dest="max_seq_len",
        type=_positive,
        metavar="N",
        help="positions the KV caches hold (default: the model's choice)",
    )
    for flag in app.model_flags:
        plan.add_argument(*flag.flags, dest=flag.keyword, **flag.options)

    make = command(
        "make-synthetic",
        _make_synthetic,
        "write a model directory with random weights and a real BPE tokenizer",
        "Write config.json, tokenizer.json and model.safetensors of a synthetic "
        "model (random bf16 weights from the seed) into DIR.",
    )
    make.add_argument(
        "dir", metavar="DIR", type=Path, help="the folder to write (new, empty or synthetic)"
    )
    make.add_argument(
        "--preset", choices=sorted(app.synthetic.presets), default="tiny", help="the shapes"
    )
    make.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    make.add_argument("-s", "--seed", type=int, default=0, help="the weights' seed")
    return parser


def _main(app: App, argv: Sequence[str] | None) -> int:
    command = None
    try:
        parser = _parser(app)
        args = parser.parse_args(argv)
        command = args.command
        if args.verbose:
            logging.basicConfig(level=logging.INFO, handlers=[HeldLogs()], force=True)
        try:
            checked_settings()  # a bad IRON_* value: one line, before any work
            if getattr(args, "model", None) is not None:
                _model_dir(args.model)
            status = args.run(app, args)
            sys.stdout.flush()  # a closed pipe shows here, where it is caught, not at exit
            return status
        except BrokenPipeError:
            return stdout_closed()
        except NonFiniteLogits as error:  # a broken model: a failed run, not bad input
            print(printable(f"{app.name} {command}: {error}"), file=sys.stderr)
            return 1
        except (ValueError, OSError, BackendUnavailable) as error:
            parser.exit(2, printable(f"{app.name} {command}: error: {error}") + "\n")
    except KeyboardInterrupt:
        print(f"{app.name}{' ' + command if command else ''}: interrupted", file=sys.stderr)
        return INTERRUPTED
