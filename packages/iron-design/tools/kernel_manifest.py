"""Regenerate or check kernel manifests (`iron.design.manifest`) against an
mlir-aie checkout and the shipped sources.

    uv run python packages/iron-design/tools/kernel_manifest.py \\
        --mlir-aie PATH [--commit REV] [--write] MANIFEST.json...

PATH is an mlir-aie git repository (a work tree or a bare git directory);
REV defaults to the pin, `iron.design.manifest.MLIR_AIE_COMMIT`. For every
manifest it recomputes what can be read off the sources: the git object id
at REV of every mlir-aie path it lists, the sha256 of every shipped file,
and each kernel's argument list, from the ``extern "C"`` definition of its
symbol (an mlir-aie source is first run through the C preprocessor, `cpp`
or `clang -E`, with the kernel's defines, because mm.cc writes its
functions with macros). What a human reads off the source stays as written:
the kernels listed, their defines, extra sources and constraints, each
constraint citing the line it follows; the tool checks that every cited
mlir-aie line is still in its file.

Without --write it prints every difference and exits 1 if there is one (a
moved pin, an edited kernel); with --write it rewrites the manifests. To
move the pin: run it with --commit NEW --write, read the diff, and update
`MLIR_AIE_COMMIT` and the iron-design README.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import attrs

from iron.design.manifest import (
    MLIR_AIE_COMMIT,
    KernelEntry,
    Manifest,
    ManifestError,
    parse_extern_c,
    sha256,
)


class Checkout:
    """An mlir-aie repository read at one revision through git."""

    def __init__(self, path: Path, commit: str):
        self.path, self.commit = Path(path), commit
        self.sha = self._git("rev-parse", f"{commit}^{{commit}}").strip()

    def _git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise FileNotFoundError(done.stderr.strip() or f"git {' '.join(args)} failed")
        return done.stdout

    def object_id(self, path: str) -> str | None:
        """The git object id of `path` at the revision, None if it has none."""
        try:
            return self._git("rev-parse", f"{self.sha}:{path}").strip()
        except FileNotFoundError:
            return None

    def text(self, path: str) -> str:
        return self._git("show", f"{self.sha}:{path}")


def preprocess(text: str, defines: dict[str, str]) -> str:
    """`text` through the C preprocessor with `defines`, its #include lines
    dropped (the headers are not needed to see which functions it defines);
    `text` itself where no preprocessor is found."""
    tool = shutil.which("cpp") or shutil.which("clang")
    if tool is None:
        return text
    body = re.sub(r"^\s*#\s*include\b[^\n]*", "", text, flags=re.M)
    command = [tool, *(["-E"] if tool.endswith("clang") else []), "-P", "-w", "-xc++", "-"]
    command += [f"-D{name}={value}" for name, value in defines.items()]
    done = subprocess.run(command, input=body, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else text


def _example_defines(entry: KernelEntry) -> dict[str, str]:
    """A value for each define a kernel needs, to preprocess its source: a
    dimension gets 64, anything else 1."""
    return {d: "64" if d.startswith("DIM") else "1" for d in entry.defines}


def refresh(manifest: Manifest, root: Path, checkout: Checkout) -> tuple[Manifest, list[str]]:
    """`manifest` with every derivable field recomputed, and the differences
    from what it said. `root` is the family package's directory."""
    changes: list[str] = []
    objects = {}
    for path, old in manifest.mlir_aie.items():
        new = checkout.object_id(path)
        if new is None:
            changes.append(f"{path}: absent at {checkout.sha[:9]}")
            new = old
        elif new != old:
            changes.append(f"{path}: object {old[:9]} -> {new[:9]}")
        objects[path] = new
    shipped = {}
    for file, old in manifest.shipped.items():
        new = sha256((root / file).read_bytes())
        if new != old:
            changes.append(f"{file}: sha256 {old[:12]} -> {new[:12]}")
        shipped[file] = new
    kernels = []
    for entry in manifest.kernels:
        if entry.source in manifest.mlir_aie:
            if checkout.object_id(entry.source) is None:
                kernels.append(entry)  # reported above
                continue
            text = checkout.text(entry.source)
            found = parse_extern_c(preprocess(text, _example_defines(entry)))
            for constraint in entry.constraints:
                cited = constraint.cites.split(": ", 1)[-1]
                if cited not in text:
                    changes.append(f"{entry.label}: cited line not in {entry.source}: {cited}")
        else:
            found = parse_extern_c((root / entry.source).read_text())
        signature = found.get(entry.symbol)
        if signature is None:
            changes.append(f"{entry.label}: {entry.source} defines no {entry.symbol}")
            kernels.append(entry)
            continue
        if signature.args != entry.args:
            changes.append(
                f"{entry.label}: arguments {_spell(entry.args)} -> {_spell(signature.args)}"
            )
        kernels.append(attrs.evolve(entry, args=signature.args))
    if manifest.commit != checkout.sha:
        changes.append(f"pin {manifest.commit[:9]} -> {checkout.sha[:9]}")
    return Manifest(manifest.package, checkout.sha, objects, shipped, kernels), changes


def _spell(args) -> str:
    return "(" + ", ".join(f"{t} {n}" for t, n in args) + ")"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlir-aie", required=True, type=Path, help="an mlir-aie git repository")
    parser.add_argument("--commit", default=MLIR_AIE_COMMIT, help="the revision to read")
    parser.add_argument("--write", action="store_true", help="rewrite the manifests")
    parser.add_argument("manifests", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        checkout = Checkout(args.mlir_aie, args.commit)
    except FileNotFoundError as error:
        print(f"kernel_manifest: {args.mlir_aie} at {args.commit}: {error}", file=sys.stderr)
        return 2
    drift = False
    for path in args.manifests:
        try:
            manifest = Manifest.from_json(json.loads(path.read_text()))
            fresh, changes = refresh(manifest, path.parent.parent, checkout)
        except (ManifestError, OSError, KeyError) as error:
            print(f"kernel_manifest: {path}: {error}", file=sys.stderr)
            return 2
        for change in changes:
            print(f"{path}: {change}")
        drift |= bool(changes)
        if args.write and changes:
            path.write_text(json.dumps(fresh.to_json(), indent=1) + "\n")
    if not drift:
        print("every manifest matches its sources")
    return 1 if drift and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
