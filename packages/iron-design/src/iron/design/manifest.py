"""Kernel manifests: what every kernel a family's designs call is, and where.

A family ships one manifest, ``kernels/manifest.json`` in its package, that
says for each kernel: its source (a file of mlir-aie at the pinned commit,
with the git object id it has there, or a file the family ships, with its
sha256), the ``extern "C"`` symbol and argument list, the architectures it
is built for, the defines, extra sources and include dirs its object needs,
and the constraints its source asserts (a ``static_assert``, a loop that
walks whole vectors), each citing the line it follows. `design_problems`
holds a design's calls against it; `parse_extern_c` reads the signatures a
C++ source defines, so a shipped file can be held against its entries.

The manifest is data: `tools/kernel_manifest.py` regenerates the object
ids, digests and signatures from an mlir-aie checkout and the shipped files;
the constraints are read off the source by hand, with the line they cite.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.resources
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from iron.design.model import AIE_KERNELS, Call, Design, Kernel, KernelSource, Memref, Param, Scalar

#: the mlir-aie commit every kernel a design names is read at (iron-design's
#: README, "MLIR for aiecc": main at 3ca0193ce, PR #3545, 14 August 2026)
MLIR_AIE_COMMIT = "3ca0193cea9e2c39ec670a65f93e1dd43c969f22"
MANIFEST_FILE = "kernels/manifest.json"

#: the C type of a kernel argument, by iron-design element type
C_TYPES = {
    "bf16": "bfloat16",
    "f32": "float",
    "i8": "int8_t",
    "i16": "int16_t",
    "i32": "int32_t",
    "u8": "uint8_t",
    "bfp16ebs8": "bfp16ebs8",
}
#: spellings of the same C type in kernel sources (the AIE API's int8 is int8_t;
#: a core's int is 32 bits)
_ALIASES = {
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "int": "int32_t",
    "unsigned": "uint32_t",
    "unsigned int": "uint32_t",
    "unsigned char": "uint8_t",
    "size_t": "uint32_t",
}
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "struct"}


class ManifestError(ValueError):
    """A manifest that is malformed, or a constraint it cannot evaluate."""


# ---- the manifest -------------------------------------------------------------------


@attrs.frozen
class Constraint:
    """A rule a kernel's source asserts, as an expression over the build's
    defines (``DIM_M``; ``defined(C_COL_MAJ)``) and the call's arguments
    by name (a Memref argument stands for its element count), citing the
    source line it follows."""

    rule: str
    cites: str

    def __attrs_post_init__(self) -> None:
        try:
            _check_expression(ast.parse(self.rule, mode="eval"))
        except (SyntaxError, ManifestError) as error:
            raise ManifestError(f"constraint {self.rule!r}: {error}") from None


@attrs.frozen
class KernelEntry:
    """One symbol of one source, as built for `archs` (and, with `when`,
    with the defines it states)."""

    symbol: str
    source: str
    archs: tuple[str, ...] = attrs.field(converter=tuple)
    args: tuple[tuple[str, str], ...] = attrs.field(
        converter=lambda v: tuple((str(t), str(n)) for t, n in v)
    )
    defines: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    extra_sources: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    include_dirs: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    constraints: tuple[Constraint, ...] = attrs.field(
        default=(),
        converter=lambda v: tuple(c if isinstance(c, Constraint) else Constraint(**c) for c in v),
    )
    vector: bool = True
    note: str = ""
    when: str = ""

    def __attrs_post_init__(self) -> None:
        if self.when:
            Constraint(self.when, "when")  # checks the expression

    def describes(self, kernel: Kernel) -> bool:
        """Whether this entry is `kernel`'s build: its `when` (an expression
        over the build's defines, like a constraint) holds; an entry
        without one describes every build."""
        return not self.when or evaluate(self.when, defines_of(kernel)) is True

    @property
    def label(self) -> str:
        return f"{self.symbol} ({self.source}, {'/'.join(self.archs)})"


@attrs.frozen
class Manifest:
    """A family's kernels: `mlir_aie` maps each mlir-aie path its kernels
    read (``aie_kernels/aie2/mm.cc``, ``aie_runtime_lib/AIE2``) to its git
    object id at `commit`; `shipped` maps each file of `package` to its
    sha256."""

    package: str
    commit: str
    mlir_aie: Mapping[str, str]
    shipped: Mapping[str, str]
    kernels: tuple[KernelEntry, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        for entry in self.kernels:
            if entry.source not in self.mlir_aie and entry.source not in self.shipped:
                raise ManifestError(
                    f"{self.package}: kernel {entry.label}: its source is neither an mlir-aie "
                    "path nor a shipped file of the manifest"
                )
            for part in (*entry.extra_sources, *entry.include_dirs):
                if part not in self.mlir_aie and part not in self.shipped:
                    raise ManifestError(f"{self.package}: kernel {entry.label}: {part} is unlisted")
            known = {n for _, n in entry.args} | set(entry.defines)
            for constraint in entry.constraints:
                unknown = [n for n in _names(constraint.rule, bare=True) if n not in known]
                if entry.args and unknown:
                    raise ManifestError(
                        f"{self.package}: kernel {entry.label}: constraint {constraint.rule!r} "
                        f"reads {', '.join(unknown)}, neither an argument nor a define it lists"
                    )

    @classmethod
    def from_json(cls, data: Mapping) -> Manifest:
        if data.get("format") != 1:
            raise ManifestError(f"a kernel manifest has format 1, got {data.get('format')!r}")
        return cls(
            data["package"],
            data["mlir_aie"]["commit"],
            dict(data["mlir_aie"]["objects"]),
            dict(data["shipped"]),
            [KernelEntry(**k) for k in data["kernels"]],
        )

    def to_json(self) -> dict:
        def entry(k: KernelEntry) -> dict:
            out = {"symbol": k.symbol, "source": k.source, "archs": list(k.archs)}
            out["args"] = [list(a) for a in k.args]
            for name in ("defines", "extra_sources", "include_dirs"):
                if getattr(k, name):
                    out[name] = list(getattr(k, name))
            if k.constraints:
                out["constraints"] = [{"rule": c.rule, "cites": c.cites} for c in k.constraints]
            if not k.vector:
                out["vector"] = False
            if k.when:
                out["when"] = k.when
            if k.note:
                out["note"] = k.note
            return out

        return {
            "format": 1,
            "package": self.package,
            "mlir_aie": {"commit": self.commit, "objects": dict(sorted(self.mlir_aie.items()))},
            "shipped": dict(sorted(self.shipped.items())),
            "kernels": [entry(k) for k in self.kernels],
        }

    def shipped_path(self, file: str) -> Path:
        return Path(str(importlib.resources.files(self.package) / file))

    def entry_for(self, kernel: Kernel, arch: str) -> KernelEntry | None:
        key = source_key(kernel.source, arch, self.package)
        return next(
            (
                k
                for k in self.kernels
                if (k.symbol, k.source) == (kernel.symbol, key)
                and arch in k.archs
                and k.describes(kernel)
            ),
            None,
        )


@functools.cache
def load(package: str) -> Manifest:
    """The manifest `package` ships (``kernels/manifest.json``), read once."""
    text = (importlib.resources.files(package) / MANIFEST_FILE).read_text()
    return Manifest.from_json(json.loads(text))


def source_key(source: KernelSource, arch: str, package: str | None = None) -> str:
    """How a manifest names `source` built for `arch`: its path in the
    mlir-aie repository (``aie_kernels/...``, ``aie_runtime_lib/...``), or
    its file in the family's package; a file of another package is named
    ``package:file``."""
    path = source.path_for(arch)
    if source.package is None:
        return f"aie_kernels/{path}" if source.tree == AIE_KERNELS else f"aie_runtime_lib/{path}"
    return path if source.package == package else f"{source.package}:{path}"


def c_type(arg: Memref | Scalar) -> str:
    """The C type a kernel argument is passed as."""
    base = C_TYPES[arg.dtype]
    return f"{base}*" if isinstance(arg, Memref) else base


def defines_of(kernel: Kernel) -> dict[str, str]:
    """NAME -> VALUE of every define the kernel's object is built with (its
    source's defines and its ``-D`` flags; a bare define is ``"1"``)."""
    found = {}
    flags = [d for d in kernel.source.defines] + [f[2:] for f in kernel.flags if f.startswith("-D")]
    for define in flags:
        name, _, value = define.partition("=")
        found[name] = value or "1"
    return found


# ---- checking designs --------------------------------------------------------------


def kernel_problems(
    manifests: Iterable[Manifest], kernel: Kernel, arch: str, call: Call | None = None
) -> list[str]:
    """What is wrong with `kernel` (and, given, one `call` of it) on `arch`
    by the manifests: a symbol, source or architecture none lists; an
    argument count or type, a define, an extra source or include dir that
    differs from its entry; a constraint the call breaks. Empty when none."""
    manifests = list(manifests)
    where = f"kernel {kernel.symbol} on {arch}"
    found = _entry(manifests, kernel, arch)
    if found is None:
        keys = {source_key(kernel.source, arch, m.package) for m in manifests}
        return [
            f"{where}: no manifest lists {kernel.symbol} in {' or '.join(sorted(keys))} for {arch}"
        ]
    manifest, entry = found
    problems = []
    given = tuple(c_type(a) for a in kernel.args)
    wanted = tuple(t for t, _ in entry.args)
    if given != wanted:
        problems.append(
            f"{where}: arguments ({', '.join(given)}); {entry.source} defines "
            f"{entry.symbol}({', '.join(f'{t} {n}' for t, n in entry.args)})"
        )
    defines = defines_of(kernel)
    missing = [d for d in entry.defines if d not in defines]
    if missing:
        problems.append(f"{where}: built without {', '.join(missing)}, which {entry.source} needs")
    for what, listed, parts in (
        ("extra sources", entry.extra_sources, kernel.source.extra_sources),
        ("include dirs", entry.include_dirs, kernel.source.include_dirs),
    ):
        have = tuple(source_key(p, arch, manifest.package) for p in parts)
        if have != listed:
            problems.append(
                f"{where}: {what} [{', '.join(have)}]; its object needs [{', '.join(listed)}]"
            )
    for _, constraint, names in broken_constraints(manifests, kernel, arch, call):
        problems.append(
            f"{where}: breaks {constraint.rule} ({constraint.cites}) with "
            + ", ".join(f"{n}={names[n]}" for n in _names(constraint.rule) if n in names)
        )
    return problems


def _entry(manifests: list[Manifest], kernel: Kernel, arch: str):
    for manifest in manifests:
        entry = manifest.entry_for(kernel, arch)
        if entry is not None:
            return manifest, entry
    return None


def broken_constraints(
    manifests: Iterable[Manifest], kernel: Kernel, arch: str, call: Call | None = None
) -> list[tuple[KernelEntry, Constraint, dict]]:
    """The constraints of `kernel`'s entry that its build (and `call`, when
    given) breaks, each with the names it was evaluated with: the defines,
    each Memref argument's element count, and the call's int scalars (a
    per-call parameter leaves a constraint unchecked: the design keeps it)."""
    found = _entry(list(manifests), kernel, arch)
    if found is None:
        return []
    _, entry = found
    names: dict[str, object] = dict(defines_of(kernel))
    values = call.args if call is not None else (None,) * len(kernel.args)
    for (_, name), arg, value in zip(entry.args, kernel.args, values):
        if isinstance(arg, Memref):
            names[name] = _count(arg)
        elif value is not None and not isinstance(value, Param):
            names[name] = value
    return [(entry, c, names) for c in entry.constraints if evaluate(c.rule, names) is False]


def _count(arg: Memref) -> int:
    return math.prod(arg.shape)


def design_problems(design: Design, manifests: Iterable[Manifest]) -> list[str]:
    """Every problem of every call of every worker of `design` (see
    `kernel_problems`), each prefixed with the design and the worker."""
    manifests = list(manifests)
    problems, seen = [], set()
    for worker in design.workers:
        for call in worker.calls():
            for problem in kernel_problems(manifests, call.kernel, design.device.arch, call):
                if problem not in seen:
                    seen.add(problem)
                    problems.append(f"{design.name}: worker {worker.name}: {problem}")
    return problems


# ---- constraint expressions ---------------------------------------------------------

_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp,
    ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Compare, ast.Eq, ast.NotEq, ast.Lt,
    ast.LtE, ast.Gt, ast.GtE, ast.Name, ast.Load, ast.Constant, ast.Call,
)  # fmt: skip


def _check_expression(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ManifestError(f"{type(node).__name__} is not allowed in a constraint")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name)
            and node.func.id == "defined"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
        ):
            raise ManifestError("the one call allowed is defined(NAME)")


def _names(rule: str, *, bare: bool = False) -> list[str]:
    """The names `rule` reads; `bare`: only those it reads a value of (not
    the ones it only tests with ``defined(...)``)."""
    tree = ast.parse(rule, mode="eval")
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id != "defined"}
    if bare:
        found -= {n.args[0].id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return sorted(found)


class _Unknown(Exception):
    """A name with no value here: a per-call parameter."""


def evaluate(rule: str, names: Mapping[str, object]) -> bool | None:
    """The value of constraint `rule` with `names` (defines as strings,
    arguments as ints); None when it reads a name with no value (a
    runtime parameter, which the design, not the build, must keep)."""
    tree = ast.parse(rule, mode="eval")
    _check_expression(tree)

    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call):
            return node.args[0].id in names
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise _Unknown(node.id)
            raw = names[node.id]
            if isinstance(raw, str):
                try:
                    return int(raw, 0)
                except ValueError:
                    return raw
            return raw
        if isinstance(node, ast.BoolOp):
            # three-valued: one False decides an `and` (one True an `or`)
            # even where another operand reads a per-call value
            results = []
            for operand in node.values:
                try:
                    results.append(bool(value(operand)))
                except _Unknown:
                    results.append(None)
            decisive = isinstance(node.op, ast.Or)
            if decisive in results:
                return decisive
            if None in results:
                raise _Unknown("an operand")
            return not decisive
        if isinstance(node, ast.UnaryOp):
            inner = value(node.operand)
            return (not inner) if isinstance(node.op, ast.Not) else -inner
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
                   ast.FloorDiv: int.__floordiv__, ast.Mod: int.__mod__}  # fmt: skip
            return ops[type(node.op)](left, right)
        left = value(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = value(comparator)
            ok = {ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                  ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}[type(op)]  # fmt: skip
            if not ok:
                return False
            left = right
        return True

    try:
        return bool(value(tree))
    except _Unknown:
        return None


# ---- reading C++ -----------------------------------------------------------------


@attrs.frozen
class Signature:
    """An ``extern "C"`` function a source defines: its symbol, its
    arguments as (normalised C type, name), the names the preprocessor
    conditions around it test (``#ifdef X``, ``#if defined(X)``), and its
    body (the braces' contents)."""

    symbol: str
    args: tuple[tuple[str, str], ...]
    guards: tuple[str, ...]
    body: str


def normalise_type(spelling: str) -> str:
    """``const bfloat16 *__restrict`` -> ``bfloat16*``; ``int32`` -> ``int32_t``."""
    stars = spelling.count("*")
    words = [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", spelling) if w not in _QUALIFIERS]
    base = " ".join(words)
    return _ALIASES.get(base, base) + "*" * stars


def _strip_comments(text: str) -> str:
    """Comments and string literals (but ``"C"``) blanked, newlines kept."""

    def blank(match: re.Match) -> str:
        s = match.group(0)
        if s == '"C"':
            return s
        return re.sub(r"[^\n]", " ", s)

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def _block_end(text: str, start: int) -> int:
    """The index just past the brace matching the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ManifestError("unbalanced braces")


_FUNCTION = re.compile(
    r"(?P<ret>[A-Za-z_][\w\s\*:<>,]*?)\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*\{", re.S
)
_GUARD = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$", re.M)


def _guards_at(text: str, index: int) -> tuple[str, ...]:
    """The defines the open preprocessor conditions at `index` require
    (``#ifdef X``, ``#if defined(X)``; not those they require absent, nor
    an ``#else`` branch's)."""
    stack: list[list[str]] = []
    for match in _GUARD.finditer(text, 0, index):
        kind, rest = match.group(1), match.group(2)
        if kind in ("if", "ifdef", "ifndef"):
            stack.append([])
        elif kind == "endif":
            if stack:
                stack.pop()
            continue
        if not stack:
            continue
        if kind == "ifdef":
            stack[-1] = [rest.split()[0]]
        elif kind in ("if", "elif"):
            stack[-1] = re.findall(r"(?<!!)\bdefined\s*\(?\s*([A-Za-z_]\w*)", rest)
        elif kind == "else":
            stack[-1] = []
    return tuple(name for frame in stack for name in frame)


def _functions(text: str, start: int, end: int) -> Iterable[tuple[re.Match, int]]:
    """Function definitions at brace depth 0 between `start` and `end`."""
    position = start
    while True:
        match = _FUNCTION.search(text, position, end)
        if match is None:
            return
        close = _block_end(text, match.end() - 1)
        yield match, close
        position = close


def parse_extern_c(text: str) -> dict[str, Signature]:
    """The ``extern "C"`` functions `text` (C++) defines, by symbol: those
    inside ``extern "C" { ... }`` blocks and those declared ``extern "C"``
    one by one. Preprocessor lines are read for their conditions only; a
    function a macro writes is not seen (regenerate such a manifest entry
    from preprocessed text)."""
    clean = _strip_comments(text)
    clean_no_pp = re.sub(r"^\s*#[^\n]*", lambda m: " " * len(m.group(0)), clean, flags=re.M)
    found: dict[str, Signature] = {}

    def add(match: re.Match, close: int) -> None:
        name = match.group("name")
        if name in ("if", "for", "while", "switch", "return"):
            return
        params = match.group("params").strip()
        args = []
        if params and params != "void":
            for param in params.split(","):
                param = re.sub(r"\s+", " ", param.strip())
                words = re.match(r"(.*?)([A-Za-z_]\w*)\s*(\[\s*\w*\s*\])?$", param)
                if words is None:
                    raise ManifestError(f"cannot read parameter {param!r} of {name}")
                spelling, arg_name = words.group(1), words.group(2)
                if words.group(3):
                    spelling += "*"
                args.append((normalise_type(spelling), arg_name))
        found[name] = Signature(
            name,
            tuple(args),
            _guards_at(clean, match.start("name")),
            clean_no_pp[match.end() : close - 1],
        )

    for block in re.finditer(r'extern\s+"C"\s*\{', clean_no_pp):
        close = _block_end(clean_no_pp, block.end() - 1)
        for match, end in _functions(clean_no_pp, block.end(), close - 1):
            add(match, end)
    for single in re.finditer(r'extern\s+"C"\s+(?!\{)', clean_no_pp):
        match = _FUNCTION.match(clean_no_pp, single.end())
        if match is not None:
            add(match, _block_end(clean_no_pp, match.end() - 1))
    return found


def definitions(text: str) -> dict[str, str]:
    """Every function (or template) defined at file scope, outside ``extern
    "C"``, by name: its body. What an ``extern "C"`` kernel calls."""
    clean = _strip_comments(text)
    clean = re.sub(r"^\s*#[^\n]*", lambda m: " " * len(m.group(0)), clean, flags=re.M)
    bodies: dict[str, str] = {}
    position = 0
    while True:
        match = _FUNCTION.search(clean, position)
        if match is None:
            return bodies
        close = _block_end(clean, match.end() - 1)
        name = match.group("name")
        if name not in ("if", "for", "while", "switch", "namespace"):
            bodies.setdefault(name, clean[match.end() : close - 1])
        position = close if name not in ("namespace",) else match.end()


#: what a vectorised kernel's arithmetic goes through: the AIE API's vectors,
#: accumulators, matrix multiplies and block-float streams
VECTOR_PRIMITIVES = re.compile(
    r"aie::(load_v|store_v|begin_vector|begin_restrict_vector|cbegin_vector|"
    r"cbegin_restrict_vector|mmul|block_vector_input_buffer_stream|"
    r"block_vector_output_buffer_stream|vector\s*<|accum\s*<)"
)
#: libm and its builtins: a core has no FPU for them; kernels use the AIE API's
#: approximations (aie::exp2, aie::inv, aie::invsqrt, aie::tanh) or tables
LIBM = re.compile(
    r"(?<![\w:])(__builtin_)?(expf?|exp2f?|logf?|log2f?|powf?|sqrtf?|tanhf?|sinf?|cosf?|erff?)\s*\("
)


def reaches(symbol: str, signatures: Mapping[str, Signature], text: str) -> str:
    """The body of `symbol` and of every function of `text` it calls,
    transitively: what the kernel runs."""
    bodies = definitions(text)
    bodies.update({s.symbol: s.body for s in signatures.values()})
    seen, todo, parts = set(), [symbol], []
    while todo:
        name = todo.pop()
        if name in seen or name not in bodies:
            continue
        seen.add(name)
        parts.append(bodies[name])
        todo += re.findall(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;]*>)?\s*\(", bodies[name])
    return "\n".join(parts)


def catalog_problems(family: str, device, manifests: Iterable[Manifest]) -> tuple[int, list[str]]:
    """(designs checked, problems) of every declared case of `family` that
    has a design on `device`: `design_problems`, and every mlir-aie file a
    kernel names (its source, extra sources, include dirs) that the
    manifests hold no object of at the pin."""
    from iron.design.operators import catalog_designs  # the registry: only when asked

    manifests = list(manifests)
    listed = {path for m in manifests for path in m.mlir_aie}
    designs = [c.design for c in catalog_designs(device, family) if c.design is not None]
    problems = [p for d in designs for p in design_problems(d, manifests)]
    for design in designs:
        for kernel in design.kernels:
            for part in (*kernel.source.parts, *kernel.source.include_dirs):
                key = source_key(part, device.arch)
                if part.package is None and key not in listed:
                    problems.append(
                        f"{design.name}: {kernel.symbol} names {key}: no object at the pin"
                    )
    return len(designs), list(dict.fromkeys(problems))


def shipped_problems(manifest: Manifest) -> list[str]:
    """What is wrong with the family's own sources by its manifest: a file
    missing or changed since its sha256 was written; a kernel its file does
    not define, with other arguments, or inside a preprocessor condition on
    a define its entry does not list; a kernel (unless marked ``"vector":
    false``) whose code reaches no AIE API vector, accumulator or matrix
    multiply; a call of libm, which a core has no unit for."""
    problems = []
    texts = {}
    for file, digest in manifest.shipped.items():
        path = manifest.shipped_path(file)
        if not path.is_file():
            problems.append(f"{manifest.package}: {file} is not in the package")
            continue
        data = path.read_bytes()
        texts[file] = data.decode()
        if sha256(data) != digest:
            problems.append(
                f"{manifest.package}: {file} changed since the manifest was written "
                "(regenerate it with tools/kernel_manifest.py and review the diff)"
            )
        for match in LIBM.finditer(_strip_comments(texts[file])):
            problems.append(
                f"{manifest.package}: {file} calls {match.group(0).strip()}: libm on a core"
            )
    for entry in manifest.kernels:
        if entry.source not in texts:
            continue
        text = texts[entry.source]
        signatures = parse_extern_c(text)
        found = signatures.get(entry.symbol)
        if found is None:
            problems.append(f'{entry.label}: {entry.source} defines no extern "C" {entry.symbol}')
            continue
        if found.args != entry.args:
            problems.append(
                f"{entry.label}: {entry.source} defines ({', '.join(f'{t} {n}' for t, n in found.args)})"
            )
        unlisted = [g for g in found.guards if g not in entry.defines]
        if unlisted:
            problems.append(
                f"{entry.label}: defined only under {', '.join(unlisted)}, which it does not list"
            )
        code = reaches(entry.symbol, signatures, _with_includes(entry.source, texts))
        if entry.vector and not VECTOR_PRIMITIVES.search(code):
            problems.append(f"{entry.label}: its code reaches no AIE API vector: a scalar kernel")
    return problems


def _with_includes(file: str, texts: Mapping[str, str]) -> str:
    """`file`'s text and, transitively, that of every shipped file it
    includes with quotes."""
    seen, todo, parts = set(), [file], []
    while todo:
        name = todo.pop()
        if name in seen or name not in texts:
            continue
        seen.add(name)
        parts.append(texts[name])
        for included in re.findall(r'#\s*include\s+"([^"]+)"', texts[name]):
            todo.append(posixpath.normpath(posixpath.join(posixpath.dirname(name), included)))
    return "\n".join(parts)


# ---- object ids ------------------------------------------------------------------


def git_blob_id(data: bytes) -> str:
    """The git object id of a file with contents `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
