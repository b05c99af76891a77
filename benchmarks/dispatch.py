"""Per-call overhead and compile time of relaxjax's LLVM backend, against jax.jit (CPU) and
numba measured in the same run (each skipped with a note when not installed).

    python benchmarks/dispatch.py

Overhead: a 5-op elementwise function on an (8, 8) float32 array, where the work itself is
negligible, so the time is the cost of a call.  Compile time: the first call of softmax and
of the MLP block from the peer benchmark, in a fresh process each (LLVM and tracing, not
import time).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import sys
import time

import numpy as np

X = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def median_us(f, *args, n=2000, repeat=15) -> float:
    for _ in range(100):
        f(*args)
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            f(*args)
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def five_ops(xp):
    def f(x):
        return xp.tanh(x * 2.0 + 1.0) - xp.exp(x) * 0.5
    return f


def overhead() -> dict:
    out = {}
    import relaxjax as rj
    import relaxjax.numpy as rnp
    out["relaxjax (llvm)"] = median_us(rj.jit(five_ops(rnp)), X)
    out["relaxjax (numpy reference)"] = median_us(rj.jit(five_ops(rnp), backend="numpy"), X)
    out["numpy (eager)"] = median_us(five_ops(np), X)
    try:
        import jax
        import jax.numpy as jnp
        jf = jax.jit(five_ops(jnp))
        out["jax.jit"] = median_us(lambda x: jf(x).block_until_ready(), X)
    except ImportError:
        out["jax.jit"] = "not installed"
    try:
        import numba

        @numba.njit
        def nf(x):
            return np.tanh(x * np.float32(2.0) + np.float32(1.0)) - np.exp(x) * np.float32(0.5)
        out["numba"] = median_us(nf, X)
    except ImportError:
        out["numba"] = "not installed"
    return out


COMPILE_SRC = r"""
import sys, time, json
sys.path.insert(0, {bench!r})
import numpy as np
from relaxjax_plugin import workloads
import relaxjax as rj
fns = workloads()
args = {{"W2": [np.ones((64, 1024), np.float32)],
        "W4": [np.ones((64, 512), np.float32), np.ones((512, 2048), np.float32),
               np.ones(2048, np.float32), np.ones((2048, 512), np.float32), np.ones(512, np.float32)]}}
import relaxjax.backends.llvm.target as t; t.init(); t.libmvec(); t.libgomp(); t.openblas()
t0 = time.perf_counter(); fns[{wl!r}](*args[{wl!r}]); first = time.perf_counter() - t0
t0 = time.perf_counter(); fns[{wl!r}](*args[{wl!r}]); second = time.perf_counter() - t0
print(json.dumps({{"first_call_s": first, "second_call_s": second}}))
"""


def compile_times() -> dict:
    import os
    bench = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for wl, name in (("W2", "softmax (n, 1024)"), ("W4", "MLP block gelu(x@W1+b1)@W2+b2")):
        runs = []
        for _ in range(3):
            with tempfile.TemporaryDirectory(prefix="relaxjax_cold_") as cold:   # compile, not load
                r = subprocess.run([sys.executable, "-c", COMPILE_SRC.format(bench=bench, wl=wl)],
                                   capture_output=True, text=True, check=True,
                                   env=dict(os.environ, RELAXJAX_CACHE_DIR=cold))
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        out[name] = statistics.median(r["first_call_s"] - r["second_call_s"] for r in runs)
    return out


def main() -> None:
    print("## Per-call overhead: 5 elementwise ops on float32 (8, 8), median of 15 x 2000 calls\n")
    print("| implementation | µs per call |\n|---|---|")
    for k, v in overhead().items():
        print(f"| {k} | {v if isinstance(v, str) else f'{v:.1f}'} |")
    print("\n## Compile time (first call minus a warm call, fresh process, median of 3)\n")
    print("| function | seconds |\n|---|---|")
    for k, v in compile_times().items():
        print(f"| {k} | {v:.3f} |")


if __name__ == "__main__":
    main()
