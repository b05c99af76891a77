"""First-call time of a jitted function in a fresh process, with a cold and a warm persistent
cache (and with the cache off), for the MLP block of the peer benchmark,
``gelu(x @ W1 + b1) @ W2 + b2`` with x (n, 512), W1 (512, 2048), W2 (2048, 512).

    python benchmarks/cache_startup.py [--runs 5] [--n 16]

Each run is a new Python process: it imports relaxjax, builds the jitted workload, and times
its first call (trace, passes, code generation or loading, the run itself) and then a warm
call.  "compile" is the first call minus the median warm call.  Cold runs use an empty
cache directory each; warm runs reuse one filled by a previous run.  Python's own bytecode
cache goes to a temporary ``PYTHONPYCACHEPREFIX`` warmed before timing, so module
compilation (or PYTHONDONTWRITEBYTECODE) does not blur the numbers.

The first symbolic sum in any process makes SymPy import ``sympy.tensor`` (it builds
permutation groups at import: about 0.1 s), whatever the cache holds; the runs pay it before
timing (``--include-sympy-import`` leaves it in the first call) and report it apart.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, os, sys, time
t_start = time.perf_counter()
sys.path.insert(0, {here!r})
import numpy as np
import relaxjax as rj
from relaxjax import cache
from relaxjax_plugin import workloads
t_import = time.perf_counter() - t_start
t0 = time.perf_counter()
if {pre_sympy!r}:
    import sympy
    sympy.Symbol("a") + sympy.Symbol("b")        # SymPy's lazy import of sympy.tensor
t_sympy = time.perf_counter() - t0
f = workloads()["W4"]
rng = np.random.default_rng(0)
args = [rng.standard_normal((n, k)).astype(np.float32) * 0.05 for n, k in
        (({n}, 512), (512, 2048), (1, 2048), (2048, 512), (1, 512))]
args[2], args[4] = args[2][0], args[4][0]
t0 = time.perf_counter()
y = f(*args)
first = time.perf_counter() - t0
warm = []
for _ in range(5):
    t0 = time.perf_counter()
    f(*args)
    warm.append(time.perf_counter() - t0)
print(json.dumps({{"import_s": t_import, "sympy_s": t_sympy, "first_s": first,
                  "warm_s": sorted(warm)[2], "stats": cache.stats()}}))
"""


def run(env: dict, n: int, pre_sympy: bool) -> dict:
    src = CHILD.format(here=HERE, n=n, pre_sympy=pre_sympy)
    r = subprocess.run([sys.executable, "-c", src], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=16, help="batch size of the call")
    ap.add_argument("--threads", type=int, default=1,
                    help="OpenMP / OpenBLAS threads (1: the run part stays steady on a busy machine; "
                         "compiling and loading are single-threaded anyway)")
    ap.add_argument("--include-sympy-import", action="store_true")
    a = ap.parse_args()
    pre = not a.include_sympy_import
    tmp = tempfile.mkdtemp(prefix="relaxjax-cache-startup-")
    try:
        base = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"))
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        if a.threads:
            base.update(OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
        base.pop("RELAXJAX_CACHE", None)
        warm_dir = os.path.join(tmp, "warm")
        run(dict(base, RELAXJAX_CACHE_DIR=os.path.join(tmp, "throwaway")), a.n, pre)   # fills pycache
        run(dict(base, RELAXJAX_CACHE_DIR=warm_dir), a.n, pre)                          # fills warm_dir
        res: dict = {"off": [], "cold": [], "warm": []}
        for i in range(a.runs):            # interleaved, so machine load affects each alike
            res["off"].append(run(dict(base, RELAXJAX_CACHE="0"), a.n, pre))
            cold_dir = os.path.join(tmp, f"cold{i}")
            res["cold"].append(run(dict(base, RELAXJAX_CACHE_DIR=cold_dir), a.n, pre))
            shutil.rmtree(cold_dir, ignore_errors=True)
            res["warm"].append(run(dict(base, RELAXJAX_CACHE_DIR=warm_dir), a.n, pre))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(mode, k):
        return statistics.median(r[k] for r in res[mode])

    def compile_s(mode):
        return statistics.median(r["first_s"] - r["warm_s"] for r in res[mode])
    print(f"MLP block, n = {a.n}; fresh process per run, median of {a.runs} runs"
          f"{' (SymPy lazy import included in the first call)' if not pre else ''}\n")
    print("| cache | first call (ms) | of which compile/load (ms) | warm call (ms) | import relaxjax (ms) |")
    print("|---|---|---|---|---|")
    names = {"off": "off (in-memory MCJIT)", "cold": "cold (compile, link, store)", "warm": "warm (load)"}
    for mode in ("off", "cold", "warm"):
        print(f"| {names[mode]} | {med(mode, 'first_s') * 1e3:.1f} | {compile_s(mode) * 1e3:.1f} | "
              f"{med(mode, 'warm_s') * 1e3:.2f} | {med(mode, 'import_s') * 1e3:.0f} |")
    if pre:
        print(f"\nSymPy's lazy sympy.tensor import, paid before timing: {med('warm', 'sympy_s') * 1e3:.0f} ms")
    w = res["warm"][0]["stats"]
    print(f"warm run cache counters: {w}")
    print(f"\ncold / warm first call: {med('cold', 'first_s') / med('warm', 'first_s'):.1f}x; "
          f"compile part: {compile_s('cold') / compile_s('warm'):.1f}x; "
          f"off / warm first call: {med('off', 'first_s') / med('warm', 'first_s'):.1f}x")


if __name__ == "__main__":
    main()
