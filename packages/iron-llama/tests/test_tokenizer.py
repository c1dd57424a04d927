import json

import pytest

from iron.llama import Tokenizer
from iron.llama.synthetic import corpus

TEXT = "Iron is the fourth most common element. Le fer est gris; 鉄は金属です 🔥 ö"


def test_prompt_is_bos_then_text(tiny_dir):
    tokenizer = Tokenizer.from_pretrained(tiny_dir)
    assert tokenizer.bos_token_id == 0 and tokenizer.vocab_size == 512
    ids = tokenizer.encode(TEXT)
    assert 0 not in ids  # encode adds no special token (the file's post-processor would)
    assert tokenizer.prompt(TEXT) == [0, *ids]
    assert (
        tokenizer.decode(tokenizer.prompt(TEXT)) == TEXT
    )  # byte-level BPE round-trips; BOS skipped
    assert tokenizer.decode([0, *ids], skip_special_tokens=False) == "<|begin_of_text|>" + TEXT
    # a BPE trained on the bundled text compresses it
    assert len(tokenizer.encode(corpus())) < len(corpus().encode()) / 2


def test_stream_never_splits_a_character(tiny_dir):
    tokenizer = Tokenizer.from_pretrained(tiny_dir)
    ids = tokenizer.encode(TEXT)
    # the rare characters are several byte tokens each: single-token decodes would break them
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)
    stream = tokenizer.stream()
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) == TEXT
    assert not any("\ufffd" in piece for piece in pieces)
    assert "" in pieces  # a token ending mid-character yields nothing until the character completes


def test_from_file_without_config_has_no_bos(tiny_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_text((tiny_dir / "tokenizer.json").read_text())
    tokenizer = Tokenizer.from_pretrained(tmp_path / "tokenizer.json")
    assert tokenizer.bos_token_id is None
    with pytest.raises(ValueError, match="no bos_token_id"):
        tokenizer.prompt("x")
    with pytest.raises(FileNotFoundError, match=r"needs tokenizer\.json"):
        Tokenizer.from_pretrained(tmp_path / "elsewhere")


def test_bos_comes_from_config(tiny_dir, tmp_path):
    for name in ("tokenizer.json", "config.json"):
        (tmp_path / name).write_text((tiny_dir / name).read_text())
    config = json.loads((tmp_path / "config.json").read_text())
    config["bos_token_id"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert Tokenizer.from_pretrained(tmp_path).prompt("a")[0] == 1
