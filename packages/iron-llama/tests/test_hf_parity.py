"""The oracle against Hugging Face transformers' LlamaForCausalLM (eager attention).

torch and transformers are not dependencies of this package; the test runs
where they happen to be installed and is skipped (saying so) elsewhere.
"""

import numpy as np
import pytest

from iron.llama import LlamaConfig, Oracle
from iron.llama.synthetic import synthetic_config

torch = pytest.importorskip(
    "torch", reason="HF parity needs torch, which iron-llama does not depend on"
)
transformers = pytest.importorskip(
    "transformers", reason="HF parity needs transformers, which iron-llama does not depend on"
)


def random_hf_model(config: LlamaConfig):
    """A float32 LlamaForCausalLM with the synthetic scales, every weight rounded
    to bf16 in place. The model is NOT cast to bf16: that would also round the
    rotary inv_freq buffer, which alone moves the logits by about 0.6%."""
    fields = {
        k: v for k, v in config.to_dict().items() if k not in ("architectures", "torch_dtype")
    }
    hf_config = transformers.LlamaConfig(**fields, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1:
                parameter.normal_(1.0, 0.1)
            elif name.endswith("embed_tokens.weight"):
                parameter.normal_(0.0, 2.0 / parameter.shape[1] ** 0.5)
            else:
                scale = 4.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                parameter.normal_(0.0, scale / parameter.shape[1] ** 0.5)
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    return model


def test_oracle_matches_transformers(tmp_path):
    config = synthetic_config("tiny")
    model = random_hf_model(config)
    model.save_pretrained(tmp_path, safe_serialization=True)
    assert not (tmp_path / "pytorch_model.bin").exists()

    oracle = Oracle.from_pretrained(tmp_path)  # config.json in transformers' own spelling
    assert oracle.config == config
    ids = np.random.default_rng(0).integers(0, config.vocab_size, 96).tolist()
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    got = oracle.logits(ids)

    difference = np.abs(got - expected)
    scale = np.abs(expected).max()
    print(
        f"max abs {difference.max():.3g}, max rel to the logit scale {difference.max() / scale:.3g}"
    )
    assert scale > 1.0
    # float32 round-off: measured 1.6e-5 (2.0e-6 of the logit scale) with transformers 5.24 /
    # torch 2.13 on the tiny preset
    np.testing.assert_allclose(got, expected, rtol=0, atol=5e-6 * scale)
    assert np.array_equal(got.argmax(axis=-1), expected.argmax(axis=-1))
