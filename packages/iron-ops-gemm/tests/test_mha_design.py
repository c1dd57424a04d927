"""MHA's pipelines design (npu2), run on iron-design's simulator against
the reference, within the operator's own tolerance."""

from __future__ import annotations

import pytest
from support import random_inputs, simulated

from iron.core import Device, OperatorError, compare
from iron.design import check, design_of, simulate
from iron.ops.gemm import MHA

NPU2 = Device.from_name("npu2")


def run(op: MHA):
    op = op.resolve(NPU2)
    inputs = random_inputs(op)
    (expected,) = op.call_reference(*inputs)
    verdict = compare(simulated(op, inputs), expected, op.tolerance(NPU2, inputs=inputs))
    assert verdict.passed, verdict.detail


def test_sequence_256_with_4_to_1_grouped_queries():
    run(MHA(num_heads=8, seq_len=256, num_kv_heads=2, num_pipelines=4))


def test_padded_interleaved_rows_on_three_pipelines():
    # 100 rows pad to 192; sequence-first, as a projection GEMM writes it
    run(MHA(num_heads=4, seq_len=100, num_kv_heads=2, heads_interleaved=True, num_pipelines=3))


def test_eight_pipelines_split_over_two_memtiles():
    design = design_of(MHA(num_heads=2, seq_len=512, num_kv_heads=1, num_pipelines=8).resolve(NPU2))
    assert {link.name for link in design.links} >= {"q_split0", "q_split1", "o_join0", "o_join1"}
    run(MHA(num_heads=2, seq_len=512, num_kv_heads=1, num_pipelines=8))


def test_without_the_causal_mask():
    run(MHA(num_heads=2, seq_len=128, causal=False, num_pipelines=2))


@pytest.mark.slow
def test_llama_heads_at_sequence_256():
    # 32 heads over 8 KV heads, 256 prompt rows on 4 pipelines, as Llama's prefill records it
    run(MHA(num_heads=32, seq_len=256, num_kv_heads=8, heads_interleaved=True, num_pipelines=4))


def test_a_key_block_stream_shared_by_the_pipelines_is_read_once_per_round():
    op = MHA(num_heads=4, seq_len=256, num_kv_heads=1, num_pipelines=2).resolve(NPU2)
    design = design_of(op)
    assert check(design).ok
    q, k, v = random_inputs(op)
    traffic = simulate(design, {"Q": q, "K": k, "V": v}).traffic.tensors
    # 4 heads read their one KV head in 2 rounds of 2 query blocks each
    assert traffic["K"].read == 4 * 2 * k.nbytes
    assert traffic["Q"].read == q.nbytes


def test_more_rounds_of_query_blocks_than_a_pattern_iterates_are_refused():
    assert MHA(num_heads=2, seq_len=4096).resolve(NPU2).seq_pad == 4096  # 64 rounds: fits
    with pytest.raises(
        OperatorError,
        match=r"MHA: seq_len=4097: at most 64 rounds .*\(4096 rows at num_pipelines=1\)",
    ):
        MHA(num_heads=2, seq_len=4097).resolve(NPU2)
