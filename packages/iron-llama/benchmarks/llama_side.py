"""One llama.cpp side of decode.py: llama-cpp-python on a bf16 GGUF of the
same checkpoint, fed the same prompt and tokens as the graph's sides.

decode.py runs this file with the interpreter given to `--llama-cpp`, one
that has llama-cpp-python (built from source with the host's native
flags) and, to make the GGUF, llama.cpp's converter's needs (torch,
transformers, gguf, sentencepiece); none is a dependency of iron-llama,
and this file imports nothing of iron.

    python llama_side.py convert --converter .../convert_hf_to_gguf.py --model-dir DIR --out F.gguf
    python llama_side.py run --gguf F.gguf --threads 2 --prompt-ids P.npy --tokens T.npy ...

`convert` runs llama.cpp's own converter (`--outtype bf16`: the weights'
bits unchanged). The synthetic checkpoints' byte-level BPE is one the
converter does not know by its pre-tokenizer's hash, so it is named
"llama-bpe": only speed is compared, and the prompt reaches llama.cpp as
token ids, never as text. `run` prefills the prompt in one batch and
decodes the fed tokens one at a time on `--threads` threads; its figures
have the keys of decode.py's `run_side`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np


def resident_bytes() -> tuple[int | None, int | None]:
    """(VmHWM, VmRSS) in bytes, or (None, None) without /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None, None
    found = dict(re.findall(r"^(VmHWM|VmRSS):\s+(\d+) kB", status, re.M))
    return tuple(int(found[k]) * 1024 if k in found else None for k in ("VmHWM", "VmRSS"))


def convert(converter: Path, model_dir: Path, out: Path) -> None:
    """`out`, a bf16 GGUF of `model_dir` by llama.cpp's converter, written
    under another name and renamed (an interrupted run leaves nothing)."""
    sys.path.insert(0, str(converter.parent))
    import convert_hf_to_gguf as module

    try:  # where the model classes live moved between llama.cpp versions
        from conversion.base import TextModel
    except ImportError:
        TextModel = module.TextModel
    TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
    partial = out.with_name(out.name + ".partial")
    sys.argv = [str(converter), str(model_dir), "--outtype", "bf16", "--outfile", str(partial)]
    module.main()
    os.replace(partial, out)


def run(args) -> None:
    from llama_cpp import Llama

    prompt = np.load(args.prompt_ids).tolist()
    fed = np.load(args.tokens)
    started = time.perf_counter()
    model = Llama(
        model_path=str(args.gguf),
        n_ctx=len(prompt) + args.steps + 1,
        n_batch=len(prompt),
        n_ubatch=len(prompt),
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=False,
        verbose=False,
    )
    load = time.perf_counter() - started
    seconds, rows = [], []
    ids = prompt
    for step in range(args.steps + 1):
        started = time.perf_counter()
        model.eval(ids)
        seconds.append(time.perf_counter() - started)
        # only the last row's logits are computed (logits_all off), as the graph's head does
        last = np.ctypeslib.as_array(model._ctx.get_logits(), shape=(model.n_vocab(),))
        rows.append(last.astype(np.float32))
        ids = [int(fed[step])]
    peak, steady = resident_bytes()
    figures = {"load": load, "ttft": seconds[0], "decode": float(np.mean(seconds[1:])),
               "peak": peak, "steady": steady}  # fmt: skip
    np.savez(args.out, logits=np.array(rows), figures=json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    making = commands.add_parser("convert")
    making.add_argument("--converter", type=Path, required=True, help="convert_hf_to_gguf.py")
    making.add_argument("--model-dir", type=Path, required=True)
    making.add_argument("--out", type=Path, required=True)
    running = commands.add_parser("run")
    running.add_argument("--gguf", type=Path, required=True)
    running.add_argument("--threads", type=int, required=True)
    running.add_argument("--prompt-ids", type=Path, required=True, help=".npy of the prompt")
    running.add_argument("--tokens", type=Path, required=True, help=".npy of the fed tokens")
    running.add_argument("--steps", type=int, required=True)
    running.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "convert":
        convert(args.converter, args.model_dir, args.out)
    else:
        run(args)


if __name__ == "__main__":
    main()
