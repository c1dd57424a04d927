"""The oracle against transformers' Gemma4ForCausalLM (eager attention) and
the language model of Gemma4ForConditionalGeneration, on small random
configurations that exercise every feature the config reader honours.

torch and transformers are not dependencies of this package; the test runs
where they are installed (the `hf-parity` nox session installs them) and is
skipped, saying so, elsewhere.
"""

import dataclasses

import numpy as np
import pytest

from iron.gemma import GemmaConfig, Oracle, Rope
from iron.gemma.config import FULL, SLIDING
from iron.gemma.synthetic import synthetic_config

torch = pytest.importorskip(
    "torch", reason="HF parity needs torch, which iron-gemma does not depend on"
)
transformers = pytest.importorskip(
    "transformers", reason="HF parity needs transformers, which iron-gemma does not depend on"
)
if not hasattr(transformers, "Gemma4ForCausalLM"):
    pytest.skip(
        f"transformers {transformers.__version__} has no Gemma 4 (5.5 or later has)",
        allow_module_level=True,
    )

#: max |oracle - transformers| over the largest |logit|: float32 round-off
#: only (measured about 1e-6 with transformers 5.24 / torch 2.13)
MAX_RELATIVE = 1e-4

S, F = SLIDING, FULL


def _small(**changes) -> GemmaConfig:
    """Six layers of two types and two head dims, a window of 8, the last
    three sharing KV, per-layer inputs, a double-wide MLP, soft-capping, a
    proportional RoPE with a factor, an untied head."""
    base = GemmaConfig(
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        intermediate_size=96,
        vocab_size=128,
        layer_types=(S, S, F, S, S, F),
        sliding_window=8,
        num_kv_shared_layers=3,
        use_double_wide_mlp=True,
        hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=128,
        final_logit_softcapping=10.0,
        rope={S: Rope(5_000.0), F: Rope(100_000.0, 0.5, 2.0)},
        tie_word_embeddings=False,
        bos_token_id=2,
        eos_token_ids=(1,),
    )
    return dataclasses.replace(base, **changes)


CASES = {
    "tiny preset": synthetic_config("tiny"),
    "small, every feature": _small(),
    "no per-layer inputs, no sharing, no cap": _small(
        hidden_size_per_layer_input=0,
        num_kv_shared_layers=0,
        final_logit_softcapping=None,
        use_double_wide_mlp=False,
        tie_word_embeddings=True,
    ),
}


def _hf_config(config: GemmaConfig):
    fields = {
        k: v
        for k, v in config.to_dict().items()
        if k not in ("architectures", "dtype", "model_type")
    }
    return transformers.Gemma4TextConfig(**fields, attn_implementation="eager")


def _randomize(model, config: GemmaConfig) -> None:
    """The synthetic checkpoints' scales (`iron.gemma.synthetic`), every
    weight rounded to bf16 in place; the model stays float32 (a bf16 model
    would also round the RoPE frequencies)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                scale = parameter.shape[0] ** -0.25
                parameter.normal_(scale, 0.1 * scale)
            elif parameter.ndim == 1:
                parameter.normal_(1.0, 0.1)
            elif name.endswith("embed_tokens.weight"):
                parameter.normal_(0.0, 2.0 / parameter.shape[1] ** 0.5)
            elif name.endswith("embed_tokens_per_layer.weight"):
                parameter.normal_(0.0, 1.0 / config.per_layer**0.5)
            else:
                parameter.normal_(0.0, 1.0 / parameter.shape[1] ** 0.5)
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
        for name, buffer in model.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.normal_(1.0, 0.1)
                buffer.copy_(buffer.to(torch.bfloat16).to(torch.float32))


def _compare(oracle: Oracle, model, ids) -> float:
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].float().numpy()
    got = oracle.logits(ids)
    scale = np.abs(expected).max()
    relative = float(np.abs(got - expected).max() / scale)
    print(f"max relative logit error {relative:.3g} (scale {scale:.3g})")
    assert scale > 0.5
    assert np.array_equal(got.argmax(axis=-1), expected.argmax(axis=-1))
    return relative


@pytest.mark.parametrize("case", list(CASES))
def test_oracle_matches_gemma4_for_causal_lm(case, tmp_path):
    config = CASES[case]
    model = transformers.Gemma4ForCausalLM(_hf_config(config)).eval()
    _randomize(model, config)
    model.save_pretrained(tmp_path, safe_serialization=True)

    oracle = Oracle.from_pretrained(tmp_path)  # config.json as transformers writes it
    assert oracle.config == config
    # longer than the window: sliding layers see only its last positions
    length = 3 * config.sliding_window if config.sliding_window < 64 else 200
    ids = np.random.default_rng(0).integers(3, config.vocab_size, length).tolist()
    assert _compare(oracle, model, ids) < MAX_RELATIVE


def test_oracle_reads_the_language_model_of_gemma4_for_conditional_generation(tmp_path):
    text = CASES["no per-layer inputs, no sharing, no cap"]
    text = dataclasses.replace(text, hidden_size_per_layer_input=8, num_kv_shared_layers=3)
    hf = transformers.Gemma4Config(text_config=_hf_config(text).to_dict())
    model = transformers.Gemma4ForConditionalGeneration(hf).eval()
    _randomize(model, text)
    model.save_pretrained(tmp_path, safe_serialization=True)

    oracle = Oracle.from_pretrained(tmp_path)
    assert oracle.config == dataclasses.replace(text, multimodal=True)
    ids = np.random.default_rng(1).integers(3, text.vocab_size, 30).tolist()
    assert _compare(oracle, model, ids) < MAX_RELATIVE
