"""Concurrency and memory: one jitted function called from many threads with mixed shapes
gives NumPy's results; calling it many thousands of times does not grow memory."""
from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.nn as rnn
import relaxjax.numpy as rnp
from relaxjax.backends import available_backends

THREADS, CALLS = 8, 200


def block(x, w, b):
    # a gemm with a fused epilogue, a row-wise softmax (reduction kernels), a dim as a value
    h = rnp.tanh(x @ w + b)
    return rnn.softmax(h, axis=-1) * 2.0, rnp.sum(h, axis=0) / x.shape[0]


def block_np(x, w, b):
    h = np.tanh(x @ w + b)
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) * 2.0, h.sum(0) / x.shape[0]


def _inputs(rng, n, k, m, dtype):
    return (rng.standard_normal((n, k)).astype(dtype), rng.standard_normal((k, m)).astype(dtype),
            rng.standard_normal(m).astype(dtype))


def _hammer(f, shapes_for_thread, dtype, rtol, atol):
    """Call ``f`` from THREADS threads, CALLS times each, every result checked against NumPy;
    returns the errors (as strings)."""
    errors: list = []
    start = threading.Barrier(THREADS)

    def work(t):
        rng = np.random.default_rng(t)
        sizes = shapes_for_thread(t)
        try:
            start.wait()
            for i in range(CALLS):
                n, k, m = sizes[i % len(sizes)]
                args = _inputs(rng, n, k, m, dtype)
                got = f(*args)
                want = block_np(*args)
                for g, w in zip(got, want):
                    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        except Exception as e:        # reported by the main thread
            errors.append(f"thread {t}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


# mixed shapes: sizes 1, small, and some large enough for the
# parallel (OpenMP) path and the output pool (kernels touching >= 131072 elements, >= 256 KiB results)
SIZES = [(1, 3, 4), (2, 3, 4), (5, 7, 3), (17, 8, 16), (64, 16, 33), (2100, 8, 64), (1, 1, 1), (3, 1, 5)]


def _per_thread(t):
    return SIZES[t % len(SIZES):] + SIZES[:t % len(SIZES)]


@pytest.mark.parametrize("backend,dtype", [(b, d) for b in available_backends() for d in ("float32", "float64")
                                           if b == "llvm" or d == "float64"])
def test_automatic_mode_from_many_threads(backend, dtype):
    f = rj.jit(block, backend=backend)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    errors = _hammer(f, _per_thread, dtype, **tol)
    assert not errors, "\n".join(errors[:5])
    info = f.cache_info()
    # one entry per size-0/1 specialization: n == 1 or not, k == 1 or not, m == 1 or not
    assert info.entries <= 4, info


def test_explicit_mode_from_many_threads_compiles_once():
    n, k, m = rj.dims("n k m")
    S = rj.ShapeDtypeStruct
    f = rj.jit(block, shapes=(S((n, k), "float32"), S((k, m), "float32"), S((m,), "float32")))
    errors = _hammer(f, _per_thread, "float32", rtol=1e-4, atol=1e-5)
    assert not errors, "\n".join(errors[:5])
    info = f.cache_info()
    assert info.compiles == 1 and info.entries == 1 and info.misses == 1, info


def test_threads_with_different_dtypes_and_ranks_share_one_jitted_function():
    """Fast dispatch is keyed by (dtype, rank): threads calling with float32 and float64
    arguments at once must each get an entry compiled for their own dtypes."""
    f = rj.jit(lambda x: rnp.sum(rnp.tanh(x) * 3.0, axis=-1))
    errors: list = []
    start = threading.Barrier(THREADS)

    def work(t):
        dtype = np.float32 if t % 2 else np.float64
        rank = 1 + t % 3
        rng = np.random.default_rng(t)
        try:
            start.wait()
            for i in range(CALLS):
                shape = tuple(int(s) for s in rng.integers(2, 9, rank))
                x = rng.standard_normal(shape).astype(dtype)
                got = f(x)
                want = np.sum(np.tanh(x) * dtype(3.0), axis=-1)
                assert np.asarray(got).dtype == want.dtype, (got.dtype, want.dtype)
                np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
        except Exception as e:
            errors.append(f"thread {t}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, "\n".join(errors[:5])
    assert f.cache_info().compiles == 6, f.cache_info()       # 2 dtypes x 3 ranks, once each


def test_a_miss_in_another_thread_does_not_register_its_entry_for_this_dtype():
    """Regression: the fast-dispatch table was filled from the cache key of the *last* slow
    call (``Jitted._last_key``, shared by all threads).  A float64 call finishing while a
    float32 call was tracing put the float64 entry under the float32 key, and later float32
    calls ran the float64 kernel on float32 data."""
    tracing = threading.Event()
    release = threading.Event()

    def fn(x):
        if threading.current_thread().name == "slow-tracer" and not tracing.is_set():
            tracing.set()
            release.wait(1.0)          # with the fix the other thread waits for this trace
        return x * 2.0
    f = rj.jit(fn)
    x32 = np.arange(6, dtype=np.float32).reshape(2, 3)
    x64 = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("a", f(x32)), name="slow-tracer")
    t.start()
    assert tracing.wait(10)
    out["b"] = f(x64)                  # a miss with another dtype while the first one traces
    release.set()
    t.join()
    for x, o in [(x32, out["a"]), (x64, out["b"]), (x32, f(x32)), (x64, f(x64))]:
        assert o.dtype == x.dtype and np.array_equal(o, x * 2), (o.dtype, o)
    assert f.cache_info().compiles == 2


# ----- memory ------------------------------------------------------------------------------------

def _traced_growth(fn, calls: int) -> int:
    """Bytes allocated (as seen by tracemalloc, NumPy's data included) that are still alive
    after ``calls`` calls of ``fn`` following a warm-up."""
    for _ in range(100):
        fn()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(calls):
            fn()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before


@pytest.mark.parametrize("backend", available_backends())
def test_memory_stays_flat_over_many_calls(backend):
    calls = 800 if backend == "llvm" else 200
    n, k, m = rj.dims("n k m")
    S = rj.ShapeDtypeStruct
    fa = rj.jit(block, backend=backend)
    fe = rj.jit(block, backend=backend, shapes=(S((n, k), "float32"), S((k, m), "float32"),
                                                S((m,), "float32")))
    rng = np.random.default_rng(0)
    # small results (np.empty), a large one (>= 256 KiB: from the output pool, returned when
    # the result dies), n = 1 (another automatic-mode entry)
    sets = [_inputs(rng, *s, "float32") for s in [(3, 4, 5), (40, 8, 16), (1100, 8, 64), (1, 2, 3)]]
    i = [0]

    def call():
        args = sets[i[0] % len(sets)]
        i[0] += 1
        fa(*args)
        fe(*args)
    growth = _traced_growth(call, calls)
    # a leak of one small array per call would be calls * ~130 bytes; of a result, far more
    assert growth < 32 * 1024, f"{growth} bytes still allocated after {calls} calls"


def test_memory_check_detects_a_leak():
    """The measurement above does see a leak of one small array per call."""
    leaked = []
    f = rj.jit(lambda x: x * 2.0)
    x = np.ones(4, np.float32)

    def call():
        leaked.append(f(x))
    growth = _traced_growth(call, 500)
    assert growth > 32 * 1024
