"""Time-step loops: relaxjax's ``fori_loop`` and ``scan`` (native on LLVM, and through the
host driver) against the same loop in NumPy, on a quiet machine and with another process
burning a core.

Two stencils, written as NumPy users write them (the heat equation's explicit step on a 2-D
grid, as in NPBench's heat-3d and jacobi-2d, here in 2-D; and 1-D Jacobi), each over a small,
a middle and a large grid; and a recurrence along a signal (a first-order IIR filter,
``y[t] = a y[t-1] + (1 - a) x[t]``, a ``scan``; in NumPy a Python loop over the samples).
Medians of repeated calls, after a warm-up call (the compile).

    python benchmarks/loops.py              # quiet, then busy
    python benchmarks/loops.py --no-busy
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import lax
from relaxjax.backends.llvm import native_loop


def heat_step(xp, a):
    inner = (0.125 * (a[2:, 1:-1] - 2.0 * a[1:-1, 1:-1] + a[:-2, 1:-1])
             + 0.125 * (a[1:-1, 2:] - 2.0 * a[1:-1, 1:-1] + a[1:-1, :-2]) + a[1:-1, 1:-1])
    return xp.pad(inner, 1) + a * (1.0 - xp.pad(xp.ones_like(inner), 1))


def jacobi_step(xp, a):
    return xp.concatenate([a[:1], (a[:-2] + a[1:-1] + a[2:]) / 3.0, a[-1:]])


def numpy_loop(step):
    def run(a, steps):
        for _ in range(int(steps)):
            a = step(np, a)
        return a
    return run


def relaxjax_loop(step):
    return lambda a, steps: lax.fori_loop(0, steps, lambda t, a: step(rnp, a), a)


CASES = [("heat 2-D", heat_step, [(32, 32), (256, 256), (1024, 1024)], 200),
         ("jacobi 1-D", jacobi_step, [(64,), (4096,), (1 << 20,)], 400)]


def _median(fn, reps: int = 7) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _burn(stop):
    x = 0
    while not stop.is_set():
        x += 1


def _host_driven(fn, time_it) -> float:
    """``time_it(jitted fn)`` with every loop on the host driver (no native plan)."""
    plan = native_loop.NativeLoop.plan
    native_loop.NativeLoop.plan = staticmethod(lambda *a: None)
    try:
        return time_it(rj.jit(fn))
    finally:
        native_loop.NativeLoop.plan = plan


def run(label: str) -> list:
    rows = []
    for name, step, shapes, steps in CASES:
        native = rj.jit(relaxjax_loop(step))
        for shape in shapes:
            a = np.random.default_rng(0).random(shape)
            t = max(2, steps // max(1, int(np.prod(shape)) // 65536))
            k = np.int64(t)
            want = numpy_loop(step)(a, t)
            assert np.allclose(native(a, k), want)
            t_np = _median(lambda: numpy_loop(step)(a, t))
            t_nat = _median(lambda: native(a, k))
            t_host = _host_driven(relaxjax_loop(step), lambda f: _median(lambda: f(a, k)))
            rows.append((label, name, "x".join(map(str, shape)), t, t_np / t * 1e6, t_nat / t * 1e6,
                         t_host / t * 1e6, t_np / t_nat))
    return rows


def iir_numpy(x, a):
    y, prev = np.empty_like(x), 0.0
    for t in range(x.shape[0]):
        prev = a * prev + (1.0 - a) * x[t]
        y[t] = prev
    return y


def iir_relaxjax(x, a):
    def step(prev, xt):
        new = a * prev + (1.0 - a) * xt
        return new, new
    return lax.scan(step, 0.0, x)[1]


def run_scan(label: str) -> list:
    rows = []
    native = rj.jit(iir_relaxjax)
    for n in (1000, 100_000, 1_000_000):
        x = np.random.default_rng(0).random(n)
        want = iir_numpy(x[:20000], 0.9)
        assert np.allclose(native(x, 0.9)[:20000], want)
        # (NumPy's Python loop timed on at most 20 000 samples, per sample)
        m = min(n, 20000)
        t_np = _median(lambda: iir_numpy(x[:m], 0.9), reps=3) / m
        t_nat = _median(lambda: native(x, 0.9)) / n
        t_host = _host_driven(iir_relaxjax, lambda f: _median(lambda: f(x[:m], 0.9), reps=3)) / m
        rows.append((label, "IIR filter (scan)", str(n), n, t_np * 1e6, t_nat * 1e6, t_host * 1e6, t_np / t_nat))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-busy", action="store_true")
    args = ap.parse_args()
    rows = run("quiet") + run_scan("quiet")
    if not args.no_busy:
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        p = ctx.Process(target=_burn, args=(stop,), daemon=True)
        p.start()
        try:
            rows += run("busy") + run_scan("busy")
        finally:
            stop.set()
            p.join(5)
            p.kill()
    print("| machine | loop | grid | steps | NumPy us/step | relaxjax native us/step | "
          "relaxjax host-driven us/step | NumPy / native |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3g} | {r[5]:.3g} | {r[6]:.3g} | {r[7]:.3g}x |")


if __name__ == "__main__":
    main()
