"""Generation as text: stop tokens, stop strings held back across pieces,
the finish reason, cancellation."""

import bigram
import numpy as np
import pytest

from iron.lm import OracleModel, Sampler, StopStrings, Tokenizer, complete


def test_stop_strings_hold_back_what_could_start_one():
    stops = StopStrings(["</s>", "END"])
    pieces = [stops.push(p) for p in ("Hello <", "/", "x E", "N", "D and more")]
    assert pieces == ["Hello ", "", "</x ", "", ""] and stops.stopped
    assert stops.flush() == "" and stops.push("late") == ""
    quiet = StopStrings(["###"])
    assert [quiet.push(p) for p in ("a#", "#b", "c#")] == ["a", "##b", "c"]
    assert not quiet.stopped and quiet.flush() == "#"
    with pytest.raises(ValueError, match="stop strings must be non-empty text"):
        StopStrings([""])


@pytest.fixture(scope="module")
def oracle_and_tokenizer(bigram_dir):
    return OracleModel(bigram.Oracle.from_pretrained(bigram_dir)), Tokenizer.from_pretrained(
        bigram_dir
    )


def greedy_ids(oracle, prompt, count):
    logits, drawn = oracle.prefill(prompt), []
    for _ in range(count):
        drawn.append(int(np.argmax(logits)))
        logits = oracle.decode(drawn[-1])
    return drawn


def test_complete_streams_the_whole_decode_and_says_why_it_ended(oracle_and_tokenizer):
    oracle, tokenizer = oracle_and_tokenizer
    prompt = tokenizer.prompt("Wrought iron")
    drawn = greedy_ids(oracle, prompt, 12)
    pieces = []
    done = complete(oracle, tokenizer, prompt, 12, Sampler(0), on_text=pieces.append)
    assert done.tokens == tuple(drawn) and done.finish_reason == "length"
    assert done.text == "".join(pieces) == tokenizer.decode(drawn) and "" not in pieces
    stopped = complete(oracle, tokenizer, prompt, 12, Sampler(0), stop_tokens=[drawn[4]])
    assert stopped.tokens == tuple(drawn[: drawn.index(drawn[4]) + 1])
    assert stopped.finish_reason == "stop"


def test_complete_cuts_the_text_at_a_stop_string(oracle_and_tokenizer):
    oracle, tokenizer = oracle_and_tokenizer
    prompt = tokenizer.prompt("Cast iron")
    text = tokenizer.decode(greedy_ids(oracle, prompt, 20))
    stop = text[5:8]
    done = complete(oracle, tokenizer, prompt, 20, Sampler(0), stop_strings=[stop])
    assert done.text == text[: text.index(stop)] and done.finish_reason == "stop"
    assert len(done.tokens) < 20


def test_complete_stops_when_cancelled(oracle_and_tokenizer):
    oracle, tokenizer = oracle_and_tokenizer
    asked = []
    done = complete(oracle, tokenizer, tokenizer.prompt("Steel"), 50, Sampler(0),
                    cancelled=lambda: asked.append(1) or len(asked) > 3)  # fmt: skip
    assert done.finish_reason == "cancelled" and len(done.tokens) == 3
