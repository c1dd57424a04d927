import json
import mmap
import re
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors.numpy import save_file

from iron.lm import Checkpoint, CheckpointError, SafetensorsFile, write_safetensors
from iron.lm.checkpoint import DTYPES, LazyTensor


def raw_file(path: Path, header: dict, data: bytes = b"", length: int | None = None) -> Path:
    """A safetensors file built by hand: 8-byte LE header length, JSON, data."""
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def entry(dtype: str, shape: list, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def test_reads_a_hand_built_file(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16)
    header = {
        "__metadata__": {"format": "pt"},
        "b": entry("BF16", [3], 24, 30),
        "a": entry("F32", [2, 3], 0, 24),
    }
    path = raw_file(tmp_path / "m.safetensors", header, a.tobytes() + b.tobytes())
    with SafetensorsFile(path) as file:
        assert file.metadata == {"format": "pt"}
        assert sorted(file.tensors) == ["a", "b"]
        va, vb = file["a"], file["b"]
        assert va.dtype == np.float32 and np.array_equal(va, a)
        assert vb.dtype == ml_dtypes.bfloat16 and np.array_equal(vb, b)
        assert not va.flags.writeable  # views of a read-only mapping
        assert np.shares_memory(file["a"], va)  # zero-copy: two reads alias the same bytes
        del va, vb


def test_writer_round_trips_every_dtype(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        name: rng.standard_normal((3, 5)).astype(dtype)
        if dtype.kind in "fV"
        else (rng.integers(0, 100, (3, 5)).astype(dtype))
        for name, dtype in DTYPES.items()
    }
    tensors["empty"] = np.zeros((0, 4), np.float32)
    path = tmp_path / "all.safetensors"
    write_safetensors(path, tensors, metadata={"note": "x"})
    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    assert length % 8 == 0  # header padded so tensor data starts 8-aligned
    header = json.loads(raw[8 : 8 + length])
    assert header["__metadata__"] == {"note": "x"}
    assert header["BF16"]["dtype"] == "BF16" and header["BF16"]["shape"] == [3, 5]
    with SafetensorsFile(path) as file:
        for name, tensor in tensors.items():
            view = file[name]
            assert view.dtype == tensor.dtype and view.shape == tensor.shape
            assert view.tobytes() == tensor.tobytes(), name
        del view
    assert not list(tmp_path.glob("*.partial"))


def test_writer_refuses_a_short_tensor_and_leaves_nothing(tmp_path):
    short = LazyTensor(np.dtype(np.float32), (4, 4), lambda: [np.ones(12, np.float32)])
    with pytest.raises(
        CheckpointError, match=r"tensor 'w' produced 48 bytes, shape \[4, 4\] needs 64"
    ):
        write_safetensors(tmp_path / "m.safetensors", {"w": short})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda p: p.write_bytes(b"\x05\x00\x00"),
            r"3 bytes, too short for the 8-byte header length at bytes \[0, 8\)",
        ),
        (
            lambda p: raw_file(p, {}, length=1000),
            r"header length 1000 \(bytes \[0, 8\)\) claims a header at bytes \[8, 1008\) past the end of the 10-byte file",
        ),
        (
            lambda p: p.write_bytes(struct.pack("<Q", 5) + b"{abc}"),
            r"header at bytes \[8, 13\): not valid JSON",
        ),
        (
            lambda p: p.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{}"),
            r"header at bytes \[8, 12\): not UTF-8 text",
        ),
        (lambda p: raw_file(p, [1, 2]), "must hold a JSON object, not an array"),
        (
            lambda p: raw_file(p, {"w": entry("Q4", [2], 0, 2)}, b"\0\0"),
            "tensor 'w' has unknown dtype 'Q4'",
        ),
        (
            lambda p: raw_file(p, {"w": entry("F32", [2, 2], 0, 12)}, bytes(12)),
            r"tensor 'w' at bytes \[\d+, \d+\) holds 12 bytes but shape \[2, 2\] of F32 needs 16",
        ),
        (
            lambda p: raw_file(p, {"w": entry("F32", [4], 0, 16)}, bytes(10)),
            r"tensor 'w' at bytes \[\d+, \d+\) runs past the end of the \d+-byte file: truncated\?",
        ),
        (
            lambda p: raw_file(p, {"w": entry("F32", [2], 8, 4)}, bytes(8)),
            r"tensor 'w' has data_offsets \[8, 4\]",
        ),
        (
            lambda p: raw_file(p, {"w": entry("F32", [-2], 0, 8)}, bytes(8)),
            r"tensor 'w' has shape \[-2\]",
        ),
        (lambda p: raw_file(p, {"w": ["F32"]}, bytes(8)), "tensor 'w' entry must be an object"),
        (
            lambda p: raw_file(
                p, {"a": entry("F32", [4], 0, 16), "b": entry("F32", [2], 8, 16)}, bytes(16)
            ),
            r"tensor 'b' at bytes \[\d+, \d+\) overlaps tensor 'a' at bytes \[\d+, \d+\)",
        ),
        (lambda p: raw_file(p, {"__metadata__": [1]}), "__metadata__ must be an object"),
    ],
    ids=[
        "truncated-length",
        "header-past-end",
        "bad-json",
        "not-utf8",
        "not-object",
        "unknown-dtype",
        "size-mismatch",
        "out-of-range",
        "reversed-offsets",
        "negative-shape",
        "entry-not-object",
        "overlap",
        "bad-metadata",
    ],
)
def test_corrupt_files_fail_up_front_naming_the_bytes(tmp_path, build, message):
    path = tmp_path / "bad.safetensors"
    build(path)
    with pytest.raises(CheckpointError, match=message):
        SafetensorsFile(path)


def test_truncated_real_file_names_the_cut_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"first": np.ones(64, np.float32), "last": np.ones(64, np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(CheckpointError) as error:
        SafetensorsFile(path)
    begin = len(data) - 256
    assert (
        f"tensor 'last' at bytes [{begin}, {len(data)}) runs past the end of the {len(data) - 10}-byte file"
        in str(error.value)
    )


def write_shards(
    directory: Path, shards: dict[str, dict[str, np.ndarray]], weight_map: dict | None = None
):
    for shard, tensors in shards.items():
        write_safetensors(directory / shard, tensors)
    if weight_map is None:
        weight_map = {name: shard for shard, tensors in shards.items() for name in tensors}
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def test_sharded_checkpoint(tmp_path):
    a, b = np.arange(4, dtype=np.float32), np.arange(6, dtype=np.float16)
    write_shards(
        tmp_path,
        {
            "model-00001-of-00002.safetensors": {"a": a},
            "model-00002-of-00002.safetensors": {"b": b},
        },
    )
    with Checkpoint.open(tmp_path) as checkpoint:
        assert sorted(checkpoint) == ["a", "b"] and len(checkpoint) == 2
        assert np.array_equal(checkpoint["a"], a) and np.array_equal(checkpoint["b"], b)
        assert checkpoint.info("b").shape == (6,)
        assert checkpoint.release(checkpoint["b"]) > 0
        with pytest.raises(KeyError, match="no tensor 'c'"):
            checkpoint["c"]


@pytest.mark.parametrize(
    ("weight_map", "message"),
    [
        (
            {"a": "s1.safetensors", "c": "s1.safetensors", "b": "s1.safetensors"},
            r"maps tensor 'b' to s1.safetensors, which lacks it",
        ),
        (
            {"a": "s1.safetensors", "b": "s2.safetensors"},
            r"s1.safetensors: holds tensor 'c' that model.safetensors.index.json maps to None",
        ),
        (
            {"a": "s1.safetensors", "b": "../s2.safetensors"},
            "must be a file name in the same directory",
        ),
    ],
)
def test_sharded_index_must_match_the_shards(tmp_path, weight_map, message):
    shards = {
        "s1.safetensors": {"a": np.ones(2), "c": np.ones(2)},
        "s2.safetensors": {"b": np.ones(2)},
    }
    write_shards(tmp_path, shards, weight_map)
    with pytest.raises(CheckpointError, match=message):
        Checkpoint.open(tmp_path)


def test_open_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"model.safetensors: no such file"):
        Checkpoint.open(tmp_path)


def mapped_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists(),
    reason="needs Linux /proc/self/smaps to see resident pages",
)
def test_release_returns_the_pages(tmp_path):
    path = tmp_path / "big.safetensors"
    big = np.random.default_rng(0).standard_normal(2 << 20, dtype=np.float32)  # 8 MiB
    write_safetensors(path, {"small": np.ones(3, np.float32), "big": big})
    with SafetensorsFile(path) as file:
        view = file["big"]
        assert float(view.sum(dtype=np.float64)) == float(
            big.sum(dtype=np.float64)
        )  # faults every page in
        before = mapped_rss(path)
        assert before >= view.nbytes
        released = file.release(view)
        after = mapped_rss(path)
        # the tensor starts mid-page: the advised range starts at the page boundary before it
        offset = file.tensors["big"].begin
        assert released == view.nbytes + offset % mmap.PAGESIZE
        assert before - after >= view.nbytes - mmap.PAGESIZE
        assert np.array_equal(view, big)  # pages fault back in from the file
        del view


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists(),
    reason="needs Linux /proc/self/smaps to see resident pages",
)
def test_copyto_reads_the_file_without_faulting_in_the_mapping(tmp_path):
    path = tmp_path / "big.safetensors"
    big = np.random.default_rng(1).standard_normal((1024, 1024), dtype=np.float32)  # 4 MiB
    write_safetensors(path, {"small": np.ones(3, np.float32), "big": big})
    with Checkpoint.open(path) as checkpoint:
        view = checkpoint["big"]
        before = mapped_rss(path)
        target = np.empty_like(big)
        checkpoint.copyto(target[100:300], view[100:300])
        assert np.array_equal(target[100:300], big[100:300])
        assert mapped_rss(path) - before < mmap.PAGESIZE
        del view


def test_copyto_copies_what_it_cannot_read(tmp_path):
    path = tmp_path / "m.safetensors"
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    write_safetensors(path, {"w": w})
    with Checkpoint.open(path) as checkpoint:
        view = checkpoint["w"]
        strided, other = np.zeros((4, 2), np.float32), np.zeros(4, np.float32)
        checkpoint.copyto(strided, view[:, ::2])  # not one byte range of the file
        checkpoint.copyto(other, np.full(4, 5, np.float32))  # not the file's at all
        assert np.array_equal(strided, w[:, ::2]) and np.array_equal(other, np.full(4, 5))
        del view


def test_copyto_of_a_file_cut_short_raises_instead_of_reading_garbage(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    with SafetensorsFile(path) as file:
        b = file["b"]
        with open(path, "r+b") as f:
            f.truncate(file.tensors["b"].begin + 100)
        with pytest.raises(CheckpointError, match="truncated to"):
            file.copyto(np.zeros(1024, np.float32), b)
        del b


def test_release_refuses_what_it_cannot_release(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": np.ones((4, 4), np.float32)})
    with SafetensorsFile(path) as file:
        w = file["w"]
        with pytest.raises(ValueError, match=r"strides \(16, 8\) is not contiguous"):
            file.release(w[:, ::2])
        with pytest.raises(ValueError, match="not inside"):
            file.release(np.ones((4, 4), np.float32))
        with pytest.raises(TypeError, match="must be a numpy array"):
            file.release([1.0])
        assert file.release(w[1:3]) > 0  # a contiguous slice is fine
        assert file.release(w.T) > 0  # so is a transposed (F-contiguous) view
        del w
    with (
        Checkpoint.open(path) as checkpoint,
        pytest.raises(ValueError, match="not inside any file"),
    ):
        checkpoint.release(np.ones(3))


def test_close_refuses_while_views_are_alive(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": np.ones(4, np.float32)})
    file = SafetensorsFile(path)
    view = file["w"]
    with pytest.raises(BufferError, match="views of it are alive"):
        file.close()
    assert np.array_equal(view, np.ones(4))  # still usable after the refused close
    del view
    file.close()


def test_release_without_madvise_is_a_noop_that_says_why(tmp_path, monkeypatch):
    import iron.lm.checkpoint as checkpoint_module

    monkeypatch.setattr(checkpoint_module, "_MADVISE", False)
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": np.ones(1024, np.float32)})
    with SafetensorsFile(path) as file:
        w = file["w"]
        with pytest.warns(RuntimeWarning, match=r"madvise\(MADV_DONTNEED\) is not available"):
            assert file.release(w) == 0
        assert np.array_equal(w, np.ones(1024))
        del w


# ---- parity with the official safetensors package ----

PARITY_DTYPES = {"BF16": ml_dtypes.bfloat16, "F32": np.float32, "F16": np.float16, "I8": np.int8}


def parity_tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, dtype in PARITY_DTYPES.items():
        for shape in ((3, 5), (7,), (2, 0, 4), ()):
            if np.dtype(dtype).kind == "i":
                array = rng.integers(-128, 128, shape).astype(dtype)
            else:
                array = (rng.standard_normal(shape) * 100).astype(dtype)
            key = f"{name.lower()}.{'x'.join(map(str, shape)) or 'scalar'}"
            tensors[key] = np.asarray(array, dtype)  # a 0-d draw comes back as a scalar
    return tensors


def same(view: np.ndarray, array: np.ndarray) -> bool:
    return (
        view.dtype == array.dtype
        and view.shape == array.shape
        and (view.tobytes() == array.tobytes())
    )


def test_reads_every_tensor_the_official_package_writes(tmp_path):
    tensors = parity_tensors(0)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "np"})
    with Checkpoint.open(tmp_path) as checkpoint:
        assert sorted(checkpoint) == sorted(tensors)
        assert checkpoint.files[0].metadata == {"format": "np"}
        for name, array in tensors.items():
            assert same(checkpoint[name], array), name


def test_the_official_package_reads_every_tensor_we_write(tmp_path):
    tensors = parity_tensors(1)
    write_safetensors(tmp_path / "m.safetensors", tensors, metadata={"note": "ours"})
    data = (tmp_path / "m.safetensors").read_bytes()
    read = dict(safetensors.deserialize(data))
    assert sorted(read) == sorted(tensors)
    names = {np.dtype(dtype): name for name, dtype in PARITY_DTYPES.items()}
    for name, array in tensors.items():
        assert read[name]["dtype"] == names[array.dtype] and read[name]["shape"] == list(
            array.shape
        )
        assert bytes(read[name]["data"]) == array.tobytes(), name
    with safetensors.safe_open(tmp_path / "m.safetensors", framework="np") as f:
        assert f.metadata() == {"note": "ours"}
        assert same(f.get_tensor("f32.3x5"), tensors["f32.3x5"])


def write_official_shards(directory: Path, shards: dict[str, dict[str, np.ndarray]]) -> None:
    """Shards written by the official package, and the index as transformers writes it."""
    weight_map, total = {}, 0
    for shard, tensors in shards.items():
        save_file(tensors, directory / shard, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, shard))
        total += sum(t.nbytes for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def test_reads_a_checkpoint_of_several_official_shards(tmp_path):
    tensors = parity_tensors(2)
    names = sorted(tensors)
    shards = {
        f"model-0000{i + 1}-of-00003.safetensors": {n: tensors[n] for n in names[i::3]}
        for i in range(3)
    }
    write_official_shards(tmp_path, shards)
    with Checkpoint.open(tmp_path) as checkpoint:
        assert len(checkpoint.files) == 3 and sorted(checkpoint) == names
        for name, array in tensors.items():
            assert same(checkpoint[name], array), name
            assert checkpoint.release(checkpoint[name]) >= 0


def multimodal(tmp_path: Path) -> dict[str, np.ndarray]:
    """A checkpoint laid out as transformers writes a multimodal model: the
    language model in two shards, the vision tower in a third."""
    rng = np.random.default_rng(3)
    text = {
        "model.language_model.embed_tokens.weight": rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16),
        "model.language_model.layers.0.mlp.up_proj.weight": rng.standard_normal((6, 4)).astype(ml_dtypes.bfloat16),
        "model.language_model.norm.weight": np.ones(4, ml_dtypes.bfloat16),
    }  # fmt: skip
    vision = {"model.vision_tower.patch.weight": np.ones((3, 3), np.float32),
              "model.multi_modal_projector.weight": np.ones((2, 2), np.float32)}  # fmt: skip
    names = sorted(text)
    write_official_shards(tmp_path, {
        "model-00001-of-00003.safetensors": {names[0]: text[names[0]]},
        "model-00002-of-00003.safetensors": {n: text[n] for n in names[1:]},
        "model-00003-of-00003.safetensors": vision,
    })  # fmt: skip
    return text


def test_a_prefix_reads_only_the_language_model_and_never_opens_the_other_shards(tmp_path):
    text = multimodal(tmp_path)
    (tmp_path / "model-00003-of-00003.safetensors").unlink()  # never opened: may be absent
    with Checkpoint.open(tmp_path, prefix="model.language_model.", rename="model.") as checkpoint:
        assert len(checkpoint.files) == 2
        assert sorted(checkpoint) == sorted(n.replace("language_model.", "") for n in text)
        for name, array in text.items():
            assert same(checkpoint[name.replace("language_model.", "")], array)
        assert checkpoint.info("model.norm.weight").name == "model.language_model.norm.weight"
    with Checkpoint.open(tmp_path, prefix="model.language_model.") as checkpoint:
        assert sorted(checkpoint) == sorted(text)
    with pytest.raises(CheckpointError, match=r"model-00003-of-00003\.safetensors: no such file"):
        Checkpoint.open(tmp_path)


@pytest.mark.skipif(
    not Path("/proc/self/smaps").exists(),
    reason="needs Linux /proc/self/smaps to see resident pages",
)
def test_a_prefix_in_one_file_never_reads_the_other_tensors(tmp_path):
    path = tmp_path / "model.safetensors"
    big = np.ones(4 << 20, np.float32)  # 16 MiB of vision weights
    small = np.arange(16, dtype=np.float32)
    save_file({"model.language_model.w": small, "model.vision_tower.w": big}, path)
    with Checkpoint.open(tmp_path, prefix="model.language_model.") as checkpoint:
        assert list(checkpoint) == ["model.language_model.w"]
        assert same(checkpoint["model.language_model.w"], small)
        with pytest.raises(KeyError, match=r"no tensor 'model\.vision_tower\.w'"):
            checkpoint["model.vision_tower.w"]
        assert mapped_rss(path) < big.nbytes // 16  # the header and one tensor's pages
