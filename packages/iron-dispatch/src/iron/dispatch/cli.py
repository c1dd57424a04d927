"""`iron cache info` and `iron cache clear`."""

from __future__ import annotations

import json

from iron.dispatch.cache import CompileCache


def configure_cache(parser) -> None:
    actions = parser.add_subparsers(dest="cache_action", required=True, metavar="action")
    info = actions.add_parser("info", help="where the cache is and what it holds")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cache_info)
    actions.add_parser(
        "clear", help="remove the cache's own entries (anything else in the folder stays)"
    ).set_defaults(func=cache_clear)


def cache_info(args) -> int:
    cache = CompileCache()
    info = cache.info()
    if args.json:
        print(json.dumps({**info, "entries": cache.entries()}, indent=1))
        return 0
    print(f"{info['root']}: {info['entries']} entries, {info['bytes']} bytes")
    for entry in cache.entries():
        if entry.get("invalid"):
            print(f"  {entry['key'][:16]}  invalid: {entry['invalid']} (rebuilt on next use)")
            continue
        kind = entry.get("backend") or entry.get("kind", "?")
        print(
            f"  {entry['key'][:16]}  {kind:9} {entry.get('mode', ''):8} {entry['nbytes']:>10} B  {entry.get('name', '')}"
        )
        if entry.get("repaired"):
            print(f"    repaired: {entry['repaired']}")
    return 0


def cache_clear(args) -> int:
    removed = CompileCache().clear()
    print(f"removed {removed} entries")
    return 0
