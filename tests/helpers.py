"""Shared test utilities: NumPy is the oracle for every backend."""
from __future__ import annotations

import os

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import relaxjax as rj
from relaxjax.backends import available_backends

# RELAXJAX_TEST_BACKENDS=cuda (comma-separated names) runs the suite's backend loops on those
# alone: a lent GPU's call checks the cuda backend while CI covers the others
BACKENDS = [b for b in available_backends()
            if b in os.environ.get("RELAXJAX_TEST_BACKENDS", b).split(",")] or available_backends()

# sizes: 1, small primes, powers of two and larger odd sizes
SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 8, 13, 31, 64, 127, 257]), st.integers(1, 300))
SMALL_SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13]), st.integers(1, 40))


def shapes(min_dims=1, max_dims=3, sizes=SMALL_SIZES):
    return st.lists(sizes, min_size=min_dims, max_size=max_dims).map(tuple)


def arrays(dtype, shape, lo=-10.0, hi=10.0):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":                   # (re, im) parts drawn as floats of the part dtype
        part = arrays(np.dtype(f"float{dtype.itemsize * 4}"), shape, lo, hi)
        return st.tuples(part, part).map(lambda p: (p[0] + 1j * p[1]).astype(dtype))
    if dtype.kind == "f":
        elems = st.floats(lo, hi, allow_nan=False, width=dtype.itemsize * 8)
    elif dtype.kind == "b":
        elems = st.booleans()
    else:
        elems = st.integers(int(max(lo, np.iinfo(dtype).min)), int(min(hi, np.iinfo(dtype).max)))
    return hnp.arrays(dtype, shape, elements=elems)


def tolerance(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return dict(rtol=1e-2, atol=1e-2)
    if dtype in (np.float32, np.complex64):
        return dict(rtol=2e-5, atol=1e-5)
    if dtype in (np.float64, np.complex128):
        return dict(rtol=1e-12, atol=1e-12)
    return dict(rtol=0, atol=0)


def assert_same(got, want, **tol):
    """Same pytree structure, shapes and dtypes, values close (NaN == NaN)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, **tol)
        return
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            assert_same(got[k], want[k], **tol)
        return
    if hasattr(got, "__cuda_array_interface__") and hasattr(got, "get"):
        got = got.get()                     # a CuPy result (the cuda backend): to the host
    if isinstance(want, (int, float, bool)) and not isinstance(want, np.generic):
        assert got == want, (got, want)
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"shape {g.shape} != {w.shape}"
    assert g.dtype == w.dtype, f"dtype {g.dtype} != {w.dtype}"
    t = tol or tolerance(w.dtype)
    if w.dtype.kind in "fc":
        np.testing.assert_allclose(g, w, equal_nan=True, **t)
    else:
        np.testing.assert_array_equal(g, w)


def check(rj_fn, np_fn, *args, backends=None, eager=True, **tol):
    """``rj_fn`` jitted on every backend (and run eagerly) matches ``np_fn`` on NumPy."""
    want = np_fn(*args)
    for b in backends or BACKENDS:
        got = rj.jit(rj_fn, backend=b)(*args)
        assert_same(got, want, **tol)
    if eager:
        assert_same(rj_fn(*args), want, **tol)
    return want


_JITS: dict = {}


def check_reuse(key, rj_fn, np_fn, *args, **tol):
    """``check`` plus one jitted function per ``key`` reused across examples, so later examples
    run an entry traced for other sizes (the symbolic shapes must generalise)."""
    want = check(rj_fn, np_fn, *args, **tol)
    f = _JITS.setdefault((rj_fn.__code__.co_filename, key), rj.jit(rj_fn))
    assert_same(f(*args), want, **tol)


def xs(min_dims=1, max_dims=3, dtype="float64", sizes=SMALL_SIZES):
    """Arrays of random rank and shape."""
    return shapes(min_dims, max_dims, sizes).flatmap(lambda s: arrays(dtype, s))


def assert_compiles_once(fn, row_len, sizes=(2, 3, 5, 17, 64, 257), **tol):
    """``rj.jit(fn)`` matches ``fn`` run eagerly on float64 (n, row_len) inputs for every n in
    ``sizes`` and compiles once for all of them."""
    f = rj.jit(fn)
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal((n, row_len))
        assert_same(f(x), fn(x), **tol)
    assert f.cache_info().compiles == 1


# chunk sizes a Dask grid is cut into: 1, primes, and a remainder
CHUNK_SIZES = st.sampled_from([1, 2, 3, 5, 7, 11, 13])


@st.composite
def ragged_chunks(draw, size: int, most: int = 5) -> tuple:
    """Chunk sizes covering ``size``: up to ``most`` drawn ones, then what is left (ragged)."""
    out = []
    for c in draw(st.lists(CHUNK_SIZES, max_size=most)):
        if sum(out) + c >= size:
            break
        out.append(c)
    return tuple(out) + (size - sum(out),)
