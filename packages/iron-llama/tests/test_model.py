import dataclasses
import logging

import numpy as np
import pytest

from iron.core import bf16
from iron.llama import (
    AccuracyBounds,
    Checkpoint,
    LlamaConfig,
    LlamaWeights,
    Model,
    Oracle,
    OracleModel,
    Sampler,
    Tokenizer,
    check_accuracy,
    check_determinism,
    llama_graph,
    make_synthetic,
)
from iron.llama.checks import kl_divergence
from iron.llama.graph import graph_weights

TEXT = "Iron is the fourth most common element in the crust of the Earth"
OTHER = "Smelting changed everything. A smith builds a small furnace of clay"


@pytest.fixture(scope="module")
def oracle(tiny_dir) -> Oracle:
    return Oracle.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def prompts(tiny_dir) -> tuple[list[int], list[int]]:
    tokenizer = Tokenizer.from_pretrained(tiny_dir)
    return tokenizer.prompt(TEXT), tokenizer.prompt(OTHER)


@pytest.fixture(scope="module", params=["reference", "sim", "cpu"])
def model(request, tiny_dir) -> Model:
    return Model.from_pretrained(tiny_dir, backend=request.param, max_seq_len=512, progress=False)


def rows_of(model: Model) -> list[int]:
    return sorted(signature[0][1][0] for signature in model.forward.versions)


def near_best(expected: np.ndarray, chosen: int) -> bool:
    """Whether the oracle rates `chosen` within 1% of its logit scale of its
    best: a near-tie that a bf16 graph (logits ~1% off, as IRON measured)
    cannot be asked to break the oracle's way."""
    return expected[chosen] >= expected.max() - 0.01 * np.abs(expected).max()


def test_matches_the_oracle_within_the_accuracy_bounds(model, oracle, prompts):
    report = check_accuracy(OracleModel(oracle), model, prompts[0], steps=40)
    assert report.passed, report.summary()
    assert len(report.top1_mismatches) <= 2
    # the graph computes in bf16 between operators: close to the oracle, never equal
    assert 0 < report.mean_kl < AccuracyBounds().mean_kl / 10
    assert model.metrics.backend == model.forward.backend.name


@pytest.mark.parametrize("model", ["sim", "cpu"], indirect=True)
def test_deterministic_across_alternating_prompts(model, prompts):
    report = check_determinism(model, prompts, rounds=3, tokens=4)
    assert report.passed, report.summary()


def test_prefill_then_decode_follows_the_oracle_and_one_decode_serves_every_position(
    model, oracle, prompts
):
    assert {1, 128, 256} <= set(rows_of(model))  # from_pretrained compiled decode, two buckets
    reference = OracleModel(oracle)
    expected, got = reference.prefill(prompts[0]), model.prefill(prompts[0])
    before = rows_of(model)
    agreed = 0
    for step in range(17):  # the prefill's token, then 16 decodes fed the oracle's choice
        best, chosen = int(np.argmax(expected)), int(np.argmax(got))
        agreed += chosen == best
        assert chosen == best or near_best(expected, chosen), f"step {step}"
        if step < 16:
            expected, got = reference.decode(best), model.decode(best)
    assert agreed >= 16
    assert rows_of(model) == before  # 16 positions, no new compile
    decode = next(v for s, v in model.forward.versions.items() if s[0][1][0] == 1)
    # the position reaches the operators only as per-call values
    bound = {str(b.expression) for b in decode.graph.bindings}
    assert bound == {"128*pos", "pos + 1"}  # cache row offset (2 kv heads x 64), valid length


def test_generate_streams_the_greedy_tokens_and_reports_metrics(model, prompts):
    greedy = []
    for _ in range(12):
        logits = model.decode(greedy[-1]) if greedy else model.prefill(prompts[1])
        greedy.append(int(np.argmax(logits)))
    streamed = []
    tokens = model.generate(prompts[1], 12, Sampler(temperature=0), streamed.append, ())
    assert tokens == streamed == greedy
    metrics = model.metrics
    assert metrics.ttft_seconds > 0 and len(metrics.decode_seconds) == 11
    assert metrics.decode_tokens_per_second > 0
    assert metrics.peak_rss_bytes >= metrics.steady_rss_bytes > 0
    assert "time to first token" in metrics.table()
    # a stop token ends the generation once drawn
    stop = model.generate(prompts[1], 12, Sampler(temperature=0), stop_tokens=[greedy[3]])
    assert stop == greedy[: greedy.index(greedy[3]) + 1]


def test_a_longer_prompt_compiles_its_bucket_on_demand(model, oracle, caplog):
    ids = [0, *np.random.default_rng(1).integers(2, 512, 299).tolist()]
    with caplog.at_level(logging.INFO, logger="iron.llama"):
        logits = model.prefill(ids)
    assert "prefill of 300 tokens: compiling the 512-row version" in caplog.text
    assert 512 in rows_of(model)
    reference = OracleModel(oracle)
    assert kl_divergence(reference.prefill(ids), logits) < AccuracyBounds().p90_kl
    token = int(np.argmax(logits))
    assert kl_divergence(reference.decode(token), model.decode(token)) < AccuracyBounds().p90_kl


def test_prompts_take_the_smallest_bucket_the_tiling_allows(tiny_dir, oracle, caplog):
    model = Model.from_pretrained(tiny_dir, backend="reference", max_seq_len=512, progress=False)
    buckets = {n: model.prefill_rows(n) for n in (1, 64, 65, 128, 129, 256, 257)}
    assert buckets == {1: 64, 64: 64, 65: 128, 128: 128, 129: 256, 256: 256, 257: 512}
    size = model.forward.arena.size
    ids = [0, *np.random.default_rng(3).integers(2, 512, 39).tolist()]
    with caplog.at_level(logging.INFO, logger="iron.llama"):
        logits = model.prefill(ids)
    assert "prefill of 40 tokens: compiling the 64-row version" in caplog.text
    assert model.forward.arena.size == size  # the 256-row bucket sized the arena for it
    assert kl_divergence(OracleModel(oracle).prefill(ids), logits) < AccuracyBounds().p90_kl
    (prefill_64,) = (v for s, v in model.forward.versions.items() if s[0][1][0] == 64)
    gemms = {s.op.tile_m for s in prefill_64.runlist.steps if type(s.op).__name__ == "GEMM"}
    assert gemms == {16}  # 4 cores x 16 rows


def test_caches_and_weights_survive_the_arena_growing(tiny_dir, oracle, prompts):
    model = Model.from_pretrained(tiny_dir, backend="reference", max_seq_len=512, progress=False)
    reference = OracleModel(oracle)
    token = int(np.argmax(reference.prefill(prompts[0])))
    model.prefill(prompts[0])
    size = model.forward.arena.size
    model.forward.compile(x=((512, 256), bf16), angles=((512, 64), bf16))
    assert model.forward.arena.size > size
    # this decode reads the cache rows the 256-row prefill wrote before the growth
    assert kl_divergence(reference.decode(token), model.decode(token)) < AccuracyBounds().p90_kl


def test_a_prompt_that_does_not_fit_fails_with_both_counts_before_any_work(model):
    model.reset()
    ttft = model.metrics.ttft_seconds
    message = (
        "the prompt of 500 tokens and 20 new tokens need 520 positions; max_seq_len is 512 tokens"
    )
    with pytest.raises(ValueError, match=message):
        model.generate([0] * 500, 20, Sampler(seed=0))
    with pytest.raises(ValueError, match="prompt of 513 tokens does not fit max_seq_len=512"):
        model.prefill([0] * 513)
    assert model.position is None and model.metrics.ttft_seconds == ttft


def test_decode_needs_a_sequence_and_room_in_the_cache(tiny_dir):
    model = Model.from_pretrained(tiny_dir, backend="reference", max_seq_len=256, progress=False)
    with pytest.raises(RuntimeError, match="no sequence to extend; call prefill first"):
        model.decode(5)
    model.prefill(list(range(2, 257)))  # 255 tokens
    model.decode(5)  # position 255: the last row
    with pytest.raises(ValueError, match="already holds 256 tokens, all of max_seq_len=256"):
        model.decode(5)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 512\), got min 3 max 512"):
        model.prefill([3, 512])
    model.reset()
    with pytest.raises(RuntimeError, match="call prefill first"):
        model.decode(5)


def test_weights_are_released_piece_by_piece_during_load(tiny_dir, monkeypatch):
    released = []
    original = Checkpoint.release
    monkeypatch.setattr(
        Checkpoint, "release", lambda self, view: released.append(view) or original(self, view)
    )
    # sim: its device memory is not the host's, so every weight is copied
    model = Model.from_pretrained(tiny_dir, backend="sim", progress=False)
    expected = len(LlamaWeights.expected_shapes(model.config))  # tied: the head is the embedding
    assert len(released) == expected == 20  # every weight is under one 64 MiB piece

    config = LlamaConfig.from_file(tiny_dir)
    checkpoint = Checkpoint.open(tiny_dir)
    weights = LlamaWeights.load(checkpoint, config)
    model = Model(config, weights, backend="reference")
    model.compile(progress=False)
    pieces = []
    piece_bytes = 64 * 1024
    total = model.load(release=pieces.append, piece_bytes=piece_bytes)
    assert (
        total
        == sum(p.nbytes for p in pieces)
        == sum(checkpoint.info(name).end - checkpoint.info(name).begin for name in checkpoint)
    )
    assert max(p.nbytes for p in pieces) <= piece_bytes
    # the 512 x 256 embedding (the tied head) went up as 4 pieces of 128 rows, each
    # a view of the checkpoint's own pages, handed back as soon as it was copied
    embedding = [p for p in pieces if np.shares_memory(p, weights.embedding)]
    assert [p.shape for p in embedding] == [(128, 256)] * 4
    assert model.load(release=pieces.append) == 0  # uploaded once


def test_from_pretrained_reads_each_piece_from_the_file(tiny_dir, monkeypatch):
    read = []
    original = Checkpoint.copyto
    monkeypatch.setattr(
        Checkpoint,
        "copyto",
        lambda self, target, view: read.append(view.nbytes) or original(self, target, view),
    )
    model = Model.from_pretrained(tiny_dir, backend="sim", progress=False)
    assert len(read) == 20 and sum(read) == sum(
        array.nbytes for array in graph_weights(model.config, model.weights).values()
    )


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_host_backends_read_the_weights_where_the_checkpoint_maps_them(
    tiny_dir, monkeypatch, backend
):
    """Nothing copied, nothing handed back (the graph reads the pages, the
    head the embedding's too), the arena's weight bytes never touched, and
    the logits those of a model that copied its weights."""
    calls = []
    for name in ("copyto", "release"):
        original = getattr(Checkpoint, name)
        monkeypatch.setattr(
            Checkpoint,
            name,
            lambda self, *a, _o=original, _n=name: calls.append(_n) or _o(self, *a),
        )
    model = Model.from_pretrained(tiny_dir, backend=backend, progress=False)
    weights = graph_weights(model.config, model.weights)
    assert sorted(model.forward.held_in_place()) == sorted(weights)
    arena = model.forward.residents.memory.buffer
    for weight in model.forward.residents.weights.values():
        assert not arena.host[weight.offset : weight.offset + weight.nbytes].any()
    ids = model.tokenizer.prompt("Iron is")
    got = [model.prefill(ids), model.decode(5)]
    assert calls == []

    copied = Model(model.config, LlamaWeights.load(Checkpoint.open(tiny_dir), model.config),
                   backend=backend)  # fmt: skip
    copied.compile(progress=False)
    copied.load()
    assert copied.forward.held_in_place() == []
    want = [copied.prefill(ids), copied.decode(5)]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_token_gathers_hand_the_embedding_pages_back(tiny_dir, monkeypatch):
    released = []
    original = Checkpoint.release
    monkeypatch.setattr(
        Checkpoint, "release", lambda self, view: released.append(view) or original(self, view)
    )
    model = Model.from_pretrained(tiny_dir, backend="sim", progress=False)  # copied weights
    released.clear()
    model.prefill(list(range(2, 22)))  # 20 tokens: gathered 8, 8 and 4 rows at a time
    model.decode(5)
    assert len(released) == 4
    assert all(view is model.weights.embedding for view in released)


def test_poisoned_transients_never_reach_the_logits(tiny_dir, oracle, prompts, monkeypatch):
    # every transient and output is NaN before each run: a buffer read before
    # it is written would make the logits NaN and fail the check
    monkeypatch.setenv("IRON_POISON", "1")
    model = Model.from_pretrained(tiny_dir, backend="sim", progress=False)
    assert model.forward.poison
    report = check_accuracy(OracleModel(oracle), model, prompts[1], steps=6)
    assert report.passed, report.summary()


@pytest.mark.parametrize(
    ("max_seq_len", "rule"),
    [(300, "max_seq_len=300"), (0, "max_seq_len=0"), (16384, "max_seq_len=16384")],
)
def test_max_seq_len_is_a_whole_number_of_buckets_within_the_decode_attention(
    tiny_dir, max_seq_len, rule
):
    config = LlamaConfig.from_file(tiny_dir)
    weights = LlamaWeights.load(Checkpoint.open(tiny_dir), config)
    with pytest.raises(ValueError, match=rf"Model: {rule}: a multiple of 256 .* from 256 to 8192"):
        Model(config, weights, max_seq_len=max_seq_len)


def test_float_weights_other_than_bf16_are_refused_by_name(tiny_dir):
    config = LlamaConfig.from_file(tiny_dir)
    weights = LlamaWeights.load(Checkpoint.open(tiny_dir), config)
    layer = dataclasses.replace(weights.layers[1], up=weights.layers[1].up.astype(np.float32))
    weights = dataclasses.replace(weights, layers=(weights.layers[0], layer))
    with pytest.raises(ValueError, match=r"'model\.layers\.1\.mlp\.up_proj\.weight' is float32"):
        llama_graph(config, weights, 256)


@pytest.mark.slow
def test_llama_32_1b_widths_match_the_oracle(tmp_path):
    # one decoder layer at full width: 32 heads over 8 kv heads, MHA with 2
    # pipelines (a 128-row bucket), a 128256-row head, caches of 2048 positions
    directory = make_synthetic(tmp_path, preset="1b-shaped", layers=1)
    model = Model.from_pretrained(directory, backend="sim", progress=False)
    oracle = OracleModel(Oracle.from_pretrained(directory))
    prompt = [0, *np.random.default_rng(2).integers(2, 128256, 99).tolist()]
    report = check_accuracy(oracle, model, prompt, steps=8)
    assert report.passed, report.summary()
    assert rows_of(model) == [1, 128, 256]


def test_auto_is_the_npu_where_present_else_the_host_kernels(monkeypatch):
    from iron.llama.model import choose_backend

    assert choose_backend("auto") == "cpu"  # no NPU here (the npu backend says why)
    assert choose_backend("sim") == "sim"
    monkeypatch.setenv("IRON_BACKEND", "reference")
    assert choose_backend("auto") is None  # iron-dispatch reads IRON_BACKEND itself
