import numpy as np
import pytest

from iron.llama import AccuracyBounds, Oracle, OracleModel, check_accuracy, check_determinism
from iron.llama.checks import bitwise_equal, kl_divergence, log_softmax

PROMPT_A = [0, 10, 200, 31, 7, 450]
PROMPT_B = [0, 99, 3, 3, 120]


@pytest.fixture(scope="module")
def oracle(tiny_dir) -> Oracle:
    return Oracle.from_pretrained(tiny_dir)


class Perturbed(OracleModel):
    """The oracle with its logits bent: a stand-in for a broken implementation."""

    def __init__(self, oracle, bend):
        super().__init__(oracle)
        self.bend = bend

    def prefill(self, token_ids):
        return self.bend(super().prefill(token_ids), self.length)

    def decode(self, token_id):
        return self.bend(super().decode(token_id), self.length)


def test_kl_against_hand_computed_values():
    assert kl_divergence(np.zeros(4), np.zeros(4)) == 0.0
    # p = (1/2, 1/2), q = (3/4, 1/4): 0.5 ln(2/3) + 0.5 ln 2 = 0.5 ln(4/3)
    assert kl_divergence(np.zeros(2), np.log([3.0, 1.0])) == pytest.approx(
        0.5 * np.log(4 / 3), rel=1e-12
    )
    assert kl_divergence(np.array([0.0, -np.inf]), np.array([0.0, 5.0])) == pytest.approx(
        np.log1p(np.exp(5.0))
    )
    np.testing.assert_allclose(np.exp(log_softmax(np.array([1000.0, 1000.0]))), [0.5, 0.5])
    with pytest.raises(ValueError, match=r"shapes differ: reference \(3,\), model \(4,\)"):
        kl_divergence(np.zeros(3), np.zeros(4))


def test_accuracy_passes_the_oracle_against_itself(oracle):
    report = check_accuracy(OracleModel(oracle), OracleModel(oracle), PROMPT_A, steps=12)
    assert report.passed and report.failures == []
    assert len(report.kl) == 12 and report.max_kl == 0.0 and report.top1_mismatches == ()
    assert "PASS" in report.summary()


def test_accuracy_passes_bf16_rounded_logits_with_small_nonzero_kl(oracle):
    import ml_dtypes

    model = Perturbed(oracle, lambda logits, _: logits.astype(ml_dtypes.bfloat16))
    report = check_accuracy(OracleModel(oracle), model, PROMPT_A, steps=12)
    assert report.passed
    assert 0 < report.mean_kl < 1e-3


def test_accuracy_fails_a_perturbed_model_and_names_the_bounds(oracle):
    noise = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    model = Perturbed(oracle, lambda logits, n: logits + noise[n])
    report = check_accuracy(OracleModel(oracle), model, PROMPT_A, steps=12)
    assert not report.passed
    assert report.mean_kl > 0.02 and report.top1_mismatches
    assert any(line.startswith("mean KL") for line in report.failures)
    assert "FAIL" in report.summary() and "top-1 mismatches" in report.summary()


def test_one_bad_step_breaks_only_max_and_is_located(oracle):
    # step 5 is the 5th decode: the sequence then holds len(PROMPT_A) + 5 tokens
    bad = len(PROMPT_A) + 5
    model = Perturbed(oracle, lambda logits, n: logits * 1.5 if n == bad else logits)
    report = check_accuracy(OracleModel(oracle), model, PROMPT_A, steps=40)
    assert report.bounds == AccuracyBounds(mean_kl=0.02, p90_kl=0.04, max_kl=0.2)
    assert report.max_kl_step == 5 and report.max_kl > 0.2 and report.p90_kl == 0.0
    assert [line.split(" KL")[0] for line in report.failures] == ["max (step 5)"]


def test_accuracy_nan_logits_fail(oracle):
    model = Perturbed(
        oracle, lambda logits, n: np.full_like(logits, np.nan) if n > len(PROMPT_A) + 1 else logits
    )
    report = check_accuracy(OracleModel(oracle), model, PROMPT_A, steps=5)
    assert report.failures == [
        "the model's logits are not finite from step 2: the model computed NaN or Inf"
    ]


def test_determinism_passes_the_oracle(oracle):
    report = check_determinism(OracleModel(oracle), [PROMPT_A, PROMPT_B], rounds=3, tokens=4)
    assert report.passed and report.compared == 4
    assert "PASS, 0/4 runs differ" in report.summary()


class Leaky(OracleModel):
    """Keeps a trace of the previous sequence across reset(), like an unflushed cache."""

    def __init__(self, oracle):
        super().__init__(oracle)
        self.previous_length = 0

    def reset(self):
        self.previous_length = self.length
        super().reset()

    def prefill(self, token_ids):
        return super().prefill(token_ids) + np.float32(1e-3) * self.previous_length


def test_determinism_catches_state_leaking_between_prompts(oracle):
    report = check_determinism(Leaky(oracle), [PROMPT_A, PROMPT_B], rounds=3, tokens=3)
    assert not report.passed
    # round 0 of prompt A started from a clean model, every later run from a used one
    assert (0, 1, 0) in report.differing
    assert "prompt 0 round 1: logits differ from round 0 at step 0" in report.summary()


def test_bitwise_comparison_sees_signed_zeros_and_nan_payloads():
    assert bitwise_equal(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))  # same NaN: equal
    assert not bitwise_equal(np.array([0.0]), np.array([-0.0]))
    other_nan = np.array([0x7FF8000000000001], dtype=np.int64).view(np.float64)
    assert not bitwise_equal(np.array([np.nan]), other_nan)
    assert not bitwise_equal(np.zeros(2, np.float32), np.zeros(2, np.float64))


def test_determinism_argument_errors(oracle):
    model = OracleModel(oracle)
    with pytest.raises(ValueError, match="two different token sequences"):
        check_determinism(model, [PROMPT_A, list(PROMPT_A)])
    with pytest.raises(ValueError, match="rounds=1 must be >= 2"):
        check_determinism(model, [PROMPT_A, PROMPT_B], rounds=1)
    with pytest.raises(ValueError, match="steps=0 must be >= 1"):
        check_accuracy(model, model, PROMPT_A, steps=0)
