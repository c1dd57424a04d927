"""The transformers side of decode.py: `Gemma4ForCausalLM` (eager attention)
on the same checkpoint, prompt and fed tokens as the graph's sides.

decode.py runs this file with the interpreter given to `--transformers`,
one that has torch and transformers (never dependencies of iron-gemma);
this file imports nothing of iron. Weights load in `--dtype` (bfloat16:
transformers' own bf16 path; float32: widened once at load); torch runs on
every core. Prints one JSON object: ttft_seconds and decode_seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), required=True)
    parser.add_argument("--prompt-ids", type=Path, required=True, help=".npy of the prompt")
    parser.add_argument("--tokens", type=Path, required=True, help=".npy of the fed tokens")
    args = parser.parse_args()

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.Gemma4ForCausalLM.from_pretrained(
        args.model_dir, dtype=getattr(torch, args.dtype), attn_implementation="eager"
    ).eval()
    prompt = torch.tensor([np.load(args.prompt_ids).tolist()])
    fed = np.load(args.tokens).tolist()
    with torch.no_grad():
        started = time.perf_counter()
        out = model(prompt, use_cache=True, logits_to_keep=1)
        ttft = time.perf_counter() - started
        cache, steps = out.cache, []
        for token in fed:
            started = time.perf_counter()
            out = model(torch.tensor([[token]]), cache=cache, use_cache=True)
            steps.append(time.perf_counter() - started)
            cache = out.cache
    print(json.dumps({"ttft_seconds": ttft, "decode_seconds": steps}))


if __name__ == "__main__":
    main()
