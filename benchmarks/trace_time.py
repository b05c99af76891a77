"""Time tracing + checking (verify) of a 100-op function, and per-call dispatch overhead.

    python benchmarks/trace_time.py
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp


def hundred_ops(x, w):
    y = x
    for i in range(20):                      # 5 ops per iteration -> 100 ops
        y = rnp.tanh(y * 0.5 + 1.0)
        y = y - rnp.mean(y, axis=-1, keepdims=True)
    return y @ w


def main(repeats: int = 15) -> None:
    x = np.random.rand(64, 32).astype(np.float32)
    w = np.random.rand(32, 16).astype(np.float32)
    n, k, m = rj.dims("n k m")
    shapes = (rj.ShapeDtypeStruct((n, k), "float32"), rj.ShapeDtypeStruct((k, m), "float32"))
    for label, kw, args in (("automatic", {}, (x, w)), ("explicit", {"shapes": shapes}, shapes)):
        times, ops = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            module = rj.jit(hundred_ops, **kw).lower(*args).module   # trace + verify
            times.append(time.perf_counter() - t0)
            ops = len(module.main.bindings)
        print(f"trace+verify {label:9s}: {ops} bindings, median {statistics.median(times) * 1e3:.1f} ms")
    f = rj.jit(hundred_ops)
    f(x, w)
    calls = []
    for b in (3, 17, 64, 100, 255):
        xb = np.random.rand(b, 32).astype(np.float32)
        t0 = time.perf_counter()
        f(xb, w)
        calls.append(time.perf_counter() - t0)
    print(f"calls with 5 new batch sizes: compiles={f.cache_info().compiles}, "
          f"median call {statistics.median(calls) * 1e3:.2f} ms (numpy backend)")
    g = rj.jit(lambda a: a + 1.0)
    a = np.ones((4, 4), np.float32)
    g(a)
    t = []
    for _ in range(2000):
        t0 = time.perf_counter()
        g(a)
        t.append(time.perf_counter() - t0)
    print(f"dispatch overhead (cache hit, 1 op, 4x4): median {statistics.median(t) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
