"""A small safetensors reader and writer: memory-mapped, validated, zero-copy.
numpy has no bfloat16 and the official package hands out copies, so the
reader is our own; `tests/test_checkpoint.py` holds it to the official
package on files that package writes.

Layout: 8 bytes little-endian header length N, N bytes of JSON (name ->
{dtype, shape, data_offsets [begin, end)} relative to byte 8 + N, plus an
optional `__metadata__`), then the tensor bytes. Every entry is checked
(dtype known, size = prod(shape) * itemsize, range inside the file, ranges
disjoint) before any tensor is handed out, so a truncated or corrupt file
fails up front with the byte range named (a header naming one tensor twice
is refused too). Tensors are read-only numpy views
of the mapping; `release(view)` hands their pages back to the kernel after
they were copied elsewhere (they fault back in from the page cache if read
again, so nothing is lost), and `copyto(target, view)` copies a view's
bytes by reading the file, never faulting in the mapping.

`Checkpoint.open(dir, prefix=...)` reads only the tensors whose names start
with `prefix` (the language model inside a multimodal checkpoint): shards
that hold none of them are never opened, and the others' bytes are never
read. Every file is checked to be a regular file before it is opened.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from iron.core.files import open_regular, parse_json, read_json

DTYPES: dict[str, np.dtype] = {
    name: np.dtype(dtype)
    for name, dtype in {
        "BOOL": np.bool_,
        "U8": np.uint8,
        "U16": np.uint16,
        "U32": np.uint32,
        "U64": np.uint64,
        "I8": np.int8,
        "I16": np.int16,
        "I32": np.int32,
        "I64": np.int64,
        "F16": np.float16,
        "BF16": ml_dtypes.bfloat16,
        "F32": np.float32,
        "F64": np.float64,
        "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2,
    }.items()
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MADVISE = getattr(mmap.mmap, "madvise", None) is not None and hasattr(mmap, "MADV_DONTNEED")
_PREADV = hasattr(os, "preadv")
#: a mapping advised so reads it faults in fill the page cache with 2 MiB
#: folios, which the kernel then maps with one TLB entry each: a host kernel
#: streaming weights where they lie reads them like huge-page memory
_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


class CheckpointError(ValueError):
    """A safetensors file or index that cannot be read as it claims."""


@dataclass(frozen=True)
class TensorInfo:
    """One header entry; `begin`/`end` are absolute byte offsets in the file."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """One memory-mapped .safetensors file. `file[name]` is a read-only
    zero-copy view; the mapping lives until `close()` (or the `with` block ends)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        # kept open: `check_intact` asks this file (not whatever is at the
        # path now) whether it still holds every mapped byte
        self._file = f = _open(self.path)  # closed in close()
        try:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise CheckpointError(
                    f"{self.path}: {size} bytes, too short for the 8-byte header length "
                    f"at bytes [0, 8): truncated?"
                )
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if _MADVISE and _HUGEPAGE is not None:
                with contextlib.suppress(OSError):  # a kernel without THP: 4 KiB pages
                    self._map.madvise(_HUGEPAGE)
        except BaseException:
            f.close()
            raise
        try:
            self.metadata, self.tensors = _parse_header(self.path, self._map, size)
        except BaseException:
            self._map.close()
            f.close()
            raise
        self._address = np.frombuffer(self._map, np.uint8, count=1).__array_interface__["data"][0]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __getitem__(self, name: str) -> np.ndarray:
        info = self.tensors.get(name)
        if info is None:
            raise KeyError(f"{self.path}: no tensor {name!r}")
        count = math.prod(info.shape)
        return np.frombuffer(self._map, info.dtype, count, info.begin).reshape(info.shape)

    def owns(self, view: np.ndarray) -> bool:
        """Whether `view`'s bytes lie inside this file's mapping."""
        start = view.__array_interface__["data"][0]
        return self._address <= start and start + view.nbytes <= self._address + len(self._map)

    def release(self, view: np.ndarray) -> int:
        """Drop the resident pages under `view` (madvise MADV_DONTNEED from the
        page-aligned start) and return how many bytes were advised. Refuses a
        view that is not contiguous or not inside this mapping. Where madvise is
        unavailable it does nothing and returns 0 (warning once with the reason)."""
        if not isinstance(view, np.ndarray):
            raise TypeError(f"release: view must be a numpy array, got {type(view).__name__}")
        if not (view.flags.c_contiguous or view.flags.f_contiguous):
            raise ValueError(
                f"release: view of shape {view.shape} with strides {view.strides} is not "
                "contiguous: only a whole tensor (or a contiguous slice) covers one byte range"
            )
        if not self.owns(view):
            raise ValueError(f"release: the view's bytes are not inside {self.path}'s mapping")
        if view.nbytes == 0:
            return 0
        if not _MADVISE:
            _warn_no_madvise()
            return 0
        offset = view.__array_interface__["data"][0] - self._address
        aligned = offset - offset % mmap.PAGESIZE
        length = offset + view.nbytes - aligned
        self._map.madvise(mmap.MADV_DONTNEED, aligned, length)
        return length

    def copyto(self, target: np.ndarray, view: np.ndarray) -> None:
        """`np.copyto(target, view)` for a view of this file, read from the
        file (preadv) instead of through the mapping: the mapping's pages
        are never faulted in (2.47 GB into touched memory: 1.0 s against
        1.6 s) nor counted in this process's RSS. A view or target that is
        not one contiguous range of the same dtype and shape is copied by
        numpy."""
        if not (
            _PREADV
            and isinstance(view, np.ndarray)
            and isinstance(target, np.ndarray)
            and view.flags.c_contiguous
            and target.flags.c_contiguous
            and target.flags.writeable
            and (target.dtype, target.shape) == (view.dtype, view.shape)
            and self.owns(view)
        ):
            np.copyto(target, view)
            return
        offset = view.__array_interface__["data"][0] - self._address
        into = memoryview(target.reshape(-1).view(np.uint8))
        done = 0
        while done < len(into):
            read = os.preadv(self._file.fileno(), [into[done:]], offset + done)
            if read == 0:
                self.check_intact()
                raise CheckpointError(f"{self.path}: no bytes at offset {offset + done}")
            done += read

    def check_intact(self) -> None:
        """Raise `CheckpointError` if the file is now shorter than when it was
        mapped: reading a page past its new end would kill the process with
        SIGBUS. One fstat; a truncation between this check and the read can
        still do so."""
        size = os.fstat(self._file.fileno()).st_size
        if size < len(self._map):
            raise CheckpointError(
                f"{self.path}: truncated to {size} bytes while mapped ({len(self._map)} bytes "
                "when opened); the model cannot read its weights any more"
            )

    def close(self) -> None:
        """Unmap the file. Views handed out must be dropped first (mmap refuses otherwise)."""
        try:
            self._map.close()
        except BufferError:
            raise BufferError(
                f"{self.path}: cannot unmap while tensor views of it are alive; drop them first"
            ) from None
        self._file.close()

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_header(
    path: Path, data: mmap.mmap, size: int
) -> tuple[dict[str, str], dict[str, TensorInfo]]:
    length = int.from_bytes(data[:8], "little")
    if 8 + length > size:
        raise CheckpointError(
            f"{path}: header length {length} (bytes [0, 8)) claims a header at bytes "
            f"[8, {8 + length}) past the end of the {size}-byte file: truncated or not safetensors"
        )
    where = f"{path}: header at bytes [8, {8 + length})"

    header = parse_json(bytes(data[8 : 8 + length]), where, CheckpointError)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{where}: __metadata__ must be an object")
    start = 8 + length
    tensors = {
        name: _parse_entry(where, name, entry, start, size) for name, entry in header.items()
    }
    previous = None
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if previous is not None and info.begin < previous.end and info.begin < info.end:
            raise CheckpointError(
                f"{path}: tensor {info.name!r} at bytes [{info.begin}, {info.end}) overlaps "
                f"tensor {previous.name!r} at bytes [{previous.begin}, {previous.end})"
            )
        if previous is None or info.end > previous.end:
            previous = info
    return metadata, tensors


def _parse_entry(where: str, name: str, entry: object, start: int, size: int) -> TensorInfo:
    def fail(rule: str) -> CheckpointError:
        return CheckpointError(f"{where}: tensor {name!r} {rule}")

    if not isinstance(entry, dict):
        raise fail(f"entry must be an object, got {entry!r}")
    dtype = DTYPES.get(entry.get("dtype"))
    if dtype is None:
        raise fail(f"has unknown dtype {entry.get('dtype')!r} (known: {', '.join(DTYPES)})")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise fail(f"has shape {shape!r}: must be a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise fail(f"has data_offsets {offsets!r}: must be [begin, end] with 0 <= begin <= end")
    begin, end = start + offsets[0], start + offsets[1]
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise fail(
            f"at bytes [{begin}, {end}) holds {end - begin} bytes but shape {shape} of "
            f"{entry['dtype']} needs {expected}"
        )
    if end > size:
        raise fail(
            f"at bytes [{begin}, {end}) runs past the end of the {size}-byte file: truncated?"
        )
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _open(path: Path):
    """`path` opened for reading once it is known to be a regular file."""
    try:
        return open_regular(path, CheckpointError)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except OSError as error:
        raise CheckpointError(f"{path}: cannot open: {error.strerror or error}") from None


def _warn_no_madvise() -> None:
    warnings.warn(
        f"release: mmap.madvise(MADV_DONTNEED) is not available on {sys.platform}; "
        "pages stay resident until the checkpoint is closed",
        RuntimeWarning,
        stacklevel=3,
    )


class Checkpoint:
    """The tensors of a model directory: `model.safetensors`, or the shards that
    `model.safetensors.index.json` maps each name to. Read-only mapping of
    name -> zero-copy view, plus `release(view)` for any view it handed out.
    Opened with a `prefix`, it holds only the tensors whose names start with
    it, named with `rename` in its place when one is given."""

    def __init__(self, files: list[SafetensorsFile], where: dict[str, tuple[SafetensorsFile, str]]):
        self.files = files
        self._where = where  # name shown -> (file, name in the file)

    @classmethod
    def open(cls, path: str | Path, prefix: str = "", rename: str | None = None) -> Checkpoint:
        """Open a model directory, an index file or a single .safetensors file,
        keeping the tensors named `prefix`... (all by default); `rename`
        replaces the prefix in the names the checkpoint shows (e.g. prefix
        "model.language_model.", rename "model."). Shards holding none of
        them are not opened."""
        path = Path(path)
        if path.is_dir():
            index = path / INDEX_FILE
            path = index if index.exists() else path / SINGLE_FILE
        if path.name.endswith(".index.json"):
            return cls._open_index(path, prefix, rename)
        if not path.exists():
            raise CheckpointError(f"{path}: no such file (expected {SINGLE_FILE} or {INDEX_FILE})")
        file = SafetensorsFile(path)
        chosen = {name: file for name in file.tensors if name.startswith(prefix)}
        return cls([file], _renamed(chosen, prefix, rename))

    @classmethod
    def _open_index(cls, index: Path, prefix: str, rename: str | None) -> Checkpoint:
        weight_map = read_json(index, CheckpointError).get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()
        ):
            raise CheckpointError(
                f"{index}: weight_map must be an object of tensor name -> shard file name, "
                f"got {type(weight_map).__name__}"
            )
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard or shard in ("", ".", ".."):
                raise CheckpointError(
                    f"{index}: shard {shard!r} must be a file name in the same directory"
                )
        chosen = {name: shard for name, shard in weight_map.items() if name.startswith(prefix)}
        files: list[SafetensorsFile] = []
        try:
            for shard in sorted(set(chosen.values())):
                files.append(SafetensorsFile(index.parent / shard))
            by_name = {file.path.name: file for file in files}
            for name, shard in chosen.items():
                if name not in by_name[shard]:
                    raise CheckpointError(
                        f"{index}: maps tensor {name!r} to {shard}, which lacks it"
                    )
            for file in files:
                for name in file.tensors:
                    if weight_map.get(name) != file.path.name:
                        raise CheckpointError(
                            f"{file.path}: holds tensor {name!r} that {index.name} "
                            f"maps to {weight_map.get(name)!r}"
                        )
        except BaseException:
            for file in files:
                file.close()
            raise
        where = {name: by_name[shard] for name, shard in chosen.items()}
        return cls(files, _renamed(where, prefix, rename))

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._where.get(name)
        if found is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        file, stored = found
        return file[stored]

    def info(self, name: str) -> TensorInfo:
        file, stored = self._where[name]
        return file.tensors[stored]

    def owns(self, view: np.ndarray) -> bool:
        """Whether `view`'s bytes lie inside the mapping of one of the files."""
        return isinstance(view, np.ndarray) and any(file.owns(view) for file in self.files)

    def check_intact(self, view: np.ndarray | None = None) -> None:
        """`SafetensorsFile.check_intact` on the file holding `view` (every file
        when None)."""
        for file in self.files:
            if view is None or (isinstance(view, np.ndarray) and file.owns(view)):
                file.check_intact()

    def release(self, view: np.ndarray) -> int:
        """`SafetensorsFile.release` on whichever file holds `view`."""
        for file in self.files:
            if isinstance(view, np.ndarray) and file.owns(view):
                return file.release(view)
        raise ValueError("release: the view's bytes are not inside any file of this checkpoint")

    def copyto(self, target: np.ndarray, view: np.ndarray) -> None:
        """`SafetensorsFile.copyto` on whichever file holds `view`; any other
        array is copied by numpy."""
        for file in self.files:
            if isinstance(view, np.ndarray) and file.owns(view):
                return file.copyto(target, view)
        np.copyto(target, view)

    def close(self) -> None:
        for file in self.files:
            file.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _renamed(
    where: dict[str, SafetensorsFile], prefix: str, rename: str | None
) -> dict[str, tuple[SafetensorsFile, str]]:
    """name shown -> (file, stored name), the prefix replaced by `rename`."""
    if rename is None:
        return {name: (file, name) for name, file in where.items()}
    return {rename + name[len(prefix) :]: (file, name) for name, file in where.items()}


@dataclass(frozen=True)
class LazyTensor:
    """A tensor to write without holding it whole: `chunks()` yields C-order
    pieces (of `dtype`) whose sizes add up to prod(shape)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    chunks: Callable[[], Iterable[np.ndarray]]


def write_safetensors(
    path: str | Path,
    tensors: Mapping[str, np.ndarray | LazyTensor],
    metadata: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Write `tensors` (in the mapping's order) to `path` as safetensors, the
    header padded to 8 bytes. Written to a temporary name and renamed, so a
    failure leaves no partial file; the rename replaces only a regular file
    (a FIFO or a device at `path` is refused, not replaced). `progress(name)`
    is called after each tensor."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise CheckpointError(
            f"write_safetensors: {path} exists and is not a regular file; it is left alone"
        )
    entries, offset = {}, 0
    for name, tensor in tensors.items():
        dtype = np.dtype(tensor.dtype)
        if dtype not in _NAMES:
            raise CheckpointError(
                f"write_safetensors: tensor {name!r} has unsupported dtype {dtype}"
            )
        nbytes = math.prod(tensor.shape) * dtype.itemsize
        entries[name] = {
            "dtype": _NAMES[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    header = {"__metadata__": dict(metadata or {"format": "pt"}), **entries}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    # a name of this writer's own: two writers of one path never share it
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    partial = Path(partial)
    try:
        with open(fd, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for name, tensor in tensors.items():
                chunks = tensor.chunks() if isinstance(tensor, LazyTensor) else [tensor]
                written = 0
                for chunk in chunks:
                    chunk = np.ascontiguousarray(chunk, dtype=tensor.dtype).reshape(-1)
                    f.write(chunk.view(np.uint8).data)
                    written += chunk.nbytes
                begin, end = entries[name]["data_offsets"]
                if written != end - begin:
                    raise CheckpointError(
                        f"write_safetensors: tensor {name!r} produced {written} bytes, "
                        f"shape {list(tensor.shape)} needs {end - begin}"
                    )
                if progress is not None:
                    progress(name)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


_WEIGHT_DTYPES = {DTYPES[name] for name in ("F16", "BF16", "F32", "F64")}
#: problems listed in one error; the count says how many there were
SHOWN = 12


def check_weights(
    checkpoint: Checkpoint,
    expected: Mapping[str, tuple[int, ...]],
    problems: Iterable[str] = (),
    ignored: Iterable[str] = (),
) -> None:
    """Raise `CheckpointError` listing every problem (after `problems`, the
    app's own) unless `checkpoint` holds exactly the tensors `expected`
    (name -> shape), each with its shape and a float dtype; tensors named
    in `ignored` may be present or not."""
    ignored = set(ignored)
    problems = list(problems)
    problems += [
        f"missing tensor {name!r} (expected shape {shape})"
        for name, shape in expected.items()
        if name not in checkpoint
    ]
    problems += [
        f"unexpected tensor {name!r} of shape {checkpoint.info(name).shape}"
        + (" (the config ties the head to the embedding)" if name == "lm_head.weight" else "")
        for name in checkpoint
        if name not in expected and name not in ignored
    ]
    for name, shape in expected.items():
        if name not in checkpoint:
            continue
        info = checkpoint.info(name)
        if info.shape != shape:
            problems.append(f"tensor {name!r} has shape {info.shape}, the config needs {shape}")
        elif info.dtype not in _WEIGHT_DTYPES:
            problems.append(
                f"tensor {name!r} has dtype {info.dtype}, weights must be F16, BF16, F32 or F64"
            )
    if problems:
        shown = problems[:SHOWN] + (
            [f"... {len(problems) - SHOWN} more"] if len(problems) > SHOWN else []
        )
        raise CheckpointError(
            f"checkpoint does not match the config ({len(problems)} problem(s)): "
            + "; ".join(shown)
        )
