"""`iron cache info` and `iron cache clear`."""

from __future__ import annotations

import json

from iron.core.terminal import printable
from iron.dispatch.cache import CompileCache


def configure_cache(parser) -> None:
    actions = parser.add_subparsers(dest="cache_action", required=True, metavar="action")
    info = actions.add_parser(
        "info",
        help="where the cache is and what it holds",
        description="The cache folder (IRON_CACHE_HOME), its entries and what each holds; "
        "an entry that fails its checks is listed as invalid, with why.",
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.set_defaults(func=cache_info)
    actions.add_parser(
        "clear",
        help="remove the cache's own entries (anything else in the folder stays)",
        description="Remove every entry with the cache's manifest, its locks and staging "
        "folders; another tool's files and symlinks stay.",
    ).set_defaults(func=cache_clear)


def cache_info(args) -> int:
    cache = CompileCache()
    info = cache.info()
    if args.json:
        print(json.dumps({**info, "entries": cache.entries()}, indent=1))
        return 0
    print(printable(f"{info['root']}: {info['entries']} entries, {info['bytes']} bytes"))
    print(f"  configurations: {info['configurations']}, streams: {info['streams']}")
    for entry in cache.entries():
        if entry.get("invalid"):
            why = printable(entry["invalid"])
            print(f"  {entry['key'][:16]}  invalid: {why} (rebuilt on next use)")
            continue
        kind = entry.get("backend") or entry.get("kind", "?")
        line = f"  {entry['key'][:16]}  {kind:9} {entry.get('mode', ''):8} {entry['nbytes']:>10} B"
        print(printable(f"{line}  {entry.get('name', '')}"))
        if entry.get("repaired"):
            print(printable(f"    repaired: {entry['repaired']}"))
    return 0


def cache_clear(args) -> int:
    removed = CompileCache().clear()
    print(f"removed {removed} entries")
    return 0
