"""The graph against the float32 oracle, teacher-forced, on reference, cpu
and sim, with bf16 and bfp16 weights; the chunked prefill; bad input."""

import dataclasses
import json

import numpy as np
import pytest

from iron.core import OperatorError
from iron.gemma import Model, Oracle
from iron.gemma.graph import CHUNK, ROUND
from iron.gemma.synthetic import synthetic_config, synthetic_tensors, train_tokenizer
from iron.lm import kl_divergence, write_safetensors

BOUNDS = {"mean": 0.02, "max": 0.2}


def teacher_forced(model, oracle, ids, fed):
    """KL(oracle || model) at the prompt's last row and after each fed token."""
    expected = oracle.logits([*ids, *fed])[len(ids) - 1 :]
    got = [model.prefill(ids)] + [model.decode(t) for t in fed]
    return np.array([kl_divergence(e, g) for e, g in zip(expected, got, strict=True)]), got


def tokens(n, seed=0, vocab=512):
    return np.random.default_rng(seed).integers(5, vocab, n).tolist()


@pytest.fixture(scope="module")
def oracle(tiny_dir):
    return Oracle.from_pretrained(tiny_dir)


@pytest.mark.parametrize("weights", ["bf16", "bfp16"])
def test_cpu_agrees_with_the_oracle(tiny_dir, oracle, weights):
    model = Model.from_pretrained(tiny_dir, backend="cpu", weight_format=weights, progress=False)
    # a whole round through a prefill chunk, the rest decoded: past the window of 128
    ids, fed = tokens(150), tokens(6, seed=1)
    kl, got = teacher_forced(model, oracle, ids, fed)
    print(f"{weights}: KL mean {kl.mean():.3g}, max {kl.max():.3g}")
    assert kl.mean() <= BOUNDS["mean"] and kl.max() <= BOUNDS["max"]
    # a wrong graph lands far away: the same logits one position late do not agree
    shifted = kl_divergence(oracle.logits([*ids, *fed])[len(ids)], got[0])
    assert shifted > 100 * kl.max()


def test_a_prompt_of_whole_rounds_takes_its_logits_from_the_chunk(tiny_dir, oracle):
    model = Model.from_pretrained(tiny_dir, backend="cpu", progress=False)
    ids = tokens(2 * ROUND, seed=4)  # no tail: row `last` of the chunk through LMHead
    kl, _ = teacher_forced(model, oracle, ids, tokens(2, seed=5))
    assert kl.mean() <= BOUNDS["mean"] and kl.max() <= BOUNDS["max"]
    assert model.metrics.decode_seconds and len(model.metrics.decode_seconds) == 2


def test_bfp16_packs_the_weights(tiny_dir):
    bf16 = Model.from_pretrained(tiny_dir, backend="cpu", progress=False)
    bfp16 = Model.from_pretrained(tiny_dir, backend="cpu", weight_format="bfp16", progress=False)
    name = "layers.0.decode.weights"
    assert bfp16.graph_weights()[name].nbytes * 16 == bf16.graph_weights()[name].nbytes * 9
    ids = tokens(20)
    assert not np.array_equal(bf16.prefill(ids), bfp16.prefill(ids))


def test_prefill_then_decode_equals_prefill(tiny_dir):
    model = Model.from_pretrained(tiny_dir, backend="cpu", progress=False)
    ids = tokens(2 * ROUND + 1)
    whole = model.prefill(ids)
    model.prefill(ids[:-1])
    stepped = model.decode(ids[-1])
    assert np.array_equal(whole, stepped)  # the same path: the last token is decoded
    assert model.position == len(ids)


def test_a_short_chunk_has_its_projections_compute_its_rows_only(tiny_dir, oracle, monkeypatch):
    """150 prompt tokens: a chunk of 128 query rows, whose products bind M
    per call to 256 rows (FLMGemm's unit), not the chunk's 512; the
    logits still agree with the oracle."""
    from iron.ops.flm import FLMGemm

    model = Model.from_pretrained(tiny_dir, backend="cpu", progress=False)
    assert [model.plan.product_rows(n) for n in (128, 256, 384, 512)] == [256, 256, 512, CHUNK]
    rows, reference = [], FLMGemm.reference

    def spy(self, a, b, *, M=None):
        rows.append(self.M if M is None else M)
        return reference(self, a, b, M=M)

    monkeypatch.setattr(FLMGemm, "reference", spy)
    ids = tokens(150)
    kl = kl_divergence(oracle.logits(ids)[-1], model.prefill(ids))
    assert kl <= BOUNDS["max"]
    assert rows and max(rows) == 256


@pytest.mark.slow
def test_two_prefill_chunks_on_reference(tiny_dir, oracle):
    model = Model.from_pretrained(tiny_dir, backend="reference", progress=False)
    ids, fed = tokens(CHUNK + ROUND + 3, seed=2), tokens(2, seed=3)
    kl, _ = teacher_forced(model, oracle, ids, fed)
    assert kl.mean() <= BOUNDS["mean"] and kl.max() <= BOUNDS["max"]


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["bf16", "bfp16"])
def test_sim_agrees_with_the_oracle(tiny_dir, oracle, weights):
    model = Model.from_pretrained(tiny_dir, backend="sim", weight_format=weights, progress=False)
    ids, fed = tokens(ROUND + 2), tokens(3, seed=1)
    kl, _ = teacher_forced(model, oracle, ids, fed)
    print(f"sim {weights}: KL mean {kl.mean():.3g}, max {kl.max():.3g}")
    assert kl.mean() <= BOUNDS["mean"] and kl.max() <= BOUNDS["max"]


def test_bad_options_are_refused(tiny_dir):
    with pytest.raises(ValueError, match=r"weight_format='q4': 'bf16' or 'bfp16'"):
        Model.from_pretrained(tiny_dir, backend="cpu", weight_format="q4", progress=False)
    with pytest.raises(ValueError, match=r"max_seq_len=600: a multiple of 128"):
        Model.from_pretrained(tiny_dir, backend="cpu", max_seq_len=600, progress=False)
    with pytest.raises(ValueError, match=r"max_seq_len=256: .* from 512"):
        Model.from_pretrained(tiny_dir, backend="cpu", max_seq_len=256, progress=False)


def test_a_shape_the_operators_refuse_names_the_operator(tmp_path):
    config = dataclasses.replace(synthetic_config("tiny"), hidden_size=384)
    write_model(tmp_path, config)
    with pytest.raises(OperatorError, match=r"DecodeLayer: hidden=384: a positive multiple of 256"):
        Model.from_pretrained(tmp_path, backend="cpu", progress=False)


def write_model(directory, config):
    """config.json, tokenizer.json and random weights of `config` in `directory`."""
    (directory / "config.json").write_text(json.dumps(config.to_dict()))
    (directory / "tokenizer.json").write_text(train_tokenizer().to_str())
    write_safetensors(directory / "model.safetensors", synthetic_tensors(config))
