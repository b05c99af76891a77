"""``python -m relaxjax.testing.fuzz``: a long fuzzing campaign from the command line."""
from __future__ import annotations

import argparse
import sys

from .campaign import campaign


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m relaxjax.testing.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--programs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="fuzz-failures", help="directory for reproducer scripts")
    p.add_argument("--chunk", type=int, default=200, help="programs per hypothesis search")
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--max-ops", type=int, default=30)
    p.add_argument("--shrink", action="store_true",
                   help="let hypothesis shrink failures too (thorough, slow: each attempt compiles)")
    p.add_argument("--minimize-seconds", type=float, default=60.0,
                   help="time to minimize each failure (ops, outputs, dims, values)")
    p.add_argument("--features", action="store_true",
                   help="every other search draws feature cases: static arguments, captured "
                        "arrays, kernels with data-dependent indices")
    a = p.parse_args(argv)
    r = campaign(a.programs, a.seed, a.out, a.chunk, a.time_limit, a.max_ops, shrink=a.shrink,
                 minimize_s=a.minimize_seconds, features=a.features)
    print(f"{r['programs']} programs ({r['feature_cases']} feature cases) in {r['seconds']:.0f}s; "
          f"{len(r['failures'])} distinct failures")
    for sig, n in r["failures"].items():
        print(f"  {n}x {sig}")
    return 1 if r["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
