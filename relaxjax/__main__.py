"""``python -m relaxjax cache info|clear``: inspect or empty the persistent cache."""
from __future__ import annotations

import argparse
import sys


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relaxjax")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cache", help="the persistent cache of compiled code")
    csub = c.add_subparsers(dest="action", required=True)
    csub.add_parser("info", help="directory, number of entries, total size")
    csub.add_parser("clear", help="delete every entry")
    args = parser.parse_args(argv)
    from . import cache
    if args.action == "info":
        i = cache.info()
        print(f"directory: {i['dir']}")
        print(f"enabled:   {'yes' if i['enabled'] else 'no (RELAXJAX_CACHE=0)'}")
        print(f"entries:   {i['entries']}")
        print(f"bytes:     {i['bytes']} ({_size(i['bytes'])})")
        for kind, k in sorted(i["kinds"].items()):
            print(f"  {kind}: {k['entries']} entries, {k['bytes']} bytes")
    else:
        n = cache.clear()
        print(f"removed {n} entries from {cache.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
