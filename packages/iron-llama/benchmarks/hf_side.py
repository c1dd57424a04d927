"""One transformers side of decode.py: `LlamaForCausalLM` (eager attention)
on the same checkpoint, prompt and fed tokens as the graph's sides.

decode.py runs this file with the interpreter given to `--transformers`,
one that has torch and transformers; they are not dependencies of
iron-llama, and this file imports nothing of iron. Weights are loaded in
`--dtype` (bfloat16: transformers' own bf16 path; float32: the weights
widened once at load), torch runs on every core, and the figures have the
keys of decode.py's `run_side`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import LlamaForCausalLM

# transformers 5 renamed `torch_dtype` to `dtype` and `past_key_values` to `cache`
DTYPE = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
_FORWARD = inspect.signature(LlamaForCausalLM.forward).parameters
CACHE = "cache" if "cache" in _FORWARD else "past_key_values"
#: the prefill's head reads its last row only, as the graph's does
LAST_ROW = {"logits_to_keep": 1} if "logits_to_keep" in _FORWARD else {}


def resident_bytes() -> tuple[int | None, int | None]:
    """(VmHWM, VmRSS) in bytes, or (None, None) without /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None, None
    found = dict(re.findall(r"^(VmHWM|VmRSS):\s+(\d+) kB", status, re.M))
    return tuple(int(found[k]) * 1024 if k in found else None for k in ("VmHWM", "VmRSS"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), required=True)
    parser.add_argument("--prompt-ids", type=Path, required=True, help=".npy of the prompt")
    parser.add_argument("--tokens", type=Path, required=True, help=".npy of the fed tokens")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(os.cpu_count() or 1)
    dtype = getattr(torch, args.dtype)
    started = time.perf_counter()
    model = LlamaForCausalLM.from_pretrained(
        args.model_dir, attn_implementation="eager", **{DTYPE: dtype}
    ).eval()
    load = time.perf_counter() - started
    if model.dtype != dtype:
        raise SystemExit(
            f"hf_side.py: asked for {dtype} weights, transformers loaded {model.dtype}"
        )
    fed = np.load(args.tokens)
    seconds, rows = [], []
    with torch.inference_mode():
        ids = torch.from_numpy(np.load(args.prompt_ids)).reshape(1, -1)
        cache = None
        for step in range(args.steps + 1):
            started = time.perf_counter()
            out = model(ids, use_cache=True, **{CACHE: cache}, **LAST_ROW)
            seconds.append(time.perf_counter() - started)
            cache = getattr(out, CACHE)
            rows.append(out.logits[0, -1].float().numpy())
            ids = torch.tensor([[int(fed[step])]])
    peak, steady = resident_bytes()
    figures = {"load": load, "ttft": seconds[0], "decode": float(np.mean(seconds[1:])),
               "peak": peak, "steady": steady}  # fmt: skip
    np.savez(args.out, logits=np.array(rows), figures=json.dumps(figures))


if __name__ == "__main__":
    main()
