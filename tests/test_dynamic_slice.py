"""lax.dynamic_slice and lax.dynamic_update_slice (JAX's names and semantics: traced start
indices, clamped so the window stays inside) against NumPy slicing on every backend."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SMALL_SIZES, arrays, assert_same

PER_OP = settings(max_examples=10, deadline=None)


def _clamp(starts, sizes, shape):
    return [min(max(s, 0), n - m) for s, m, n in zip(starts, sizes, shape)]


@given(shape=st.lists(SMALL_SIZES, min_size=1, max_size=3).map(tuple), data=st.data())
@PER_OP
def test_dynamic_slice_and_update(shape, data):
    x = data.draw(arrays("float64", shape), label="x")
    sizes = tuple(data.draw(st.integers(0, n), label="size") for n in shape)
    starts = [data.draw(st.integers(-3, n + 3), label="start") for n in shape]
    lo = _clamp(starts, sizes, shape)
    want_slice = x[tuple(slice(s, s + m) for s, m in zip(lo, sizes))]
    update = np.full(sizes, -7.0)
    want_update = x.copy()
    want_update[tuple(slice(s, s + m) for s, m in zip(lo, sizes))] = update
    idx = np.array(starts, np.int32)

    def f(x, idx, update):
        ss = [idx[k] for k in range(len(shape))]               # traced int32 scalars
        return (rj.lax.dynamic_slice(x, ss, sizes), rj.lax.dynamic_update_slice(x, update, ss))
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, idx, update), (want_slice, want_update))
    assert_same(f(x, idx, update), (want_slice, want_update))                # eagerly


def test_symbolic_window_and_one_compile():
    """A window sized from the array's dims (n // 2) slides with a traced start; one compile
    serves every size."""
    f = rj.jit(lambda x, i: rj.lax.dynamic_slice(x, (i, 0), (x.shape[0] // 2, x.shape[1])) * 2.0)
    for n in (2, 3, 10, 101):
        x = np.random.default_rng(n).standard_normal((n, 3))
        for i in (0, 1, n):
            s = min(i, n - n // 2)
            assert_same(f(x, np.int64(i)), x[s:s + n // 2] * 2.0)
    assert f.cache_info().compiles == 1


def test_errors_name_the_argument():
    x = np.ones((3, 4))
    with pytest.raises(rj.ShapeError, match="2 start indices for an array of rank 2|1 start indices"):
        rj.lax.dynamic_slice(x, (0,), (1, 1))
    with pytest.raises(rj.ShapeError, match="size 5 on axis 1 exceeds"):
        rj.lax.dynamic_slice(x, (0, 0), (1, 5))
    with pytest.raises(TypeError, match="start index 0 must be an integer scalar"):
        rj.lax.dynamic_slice(x, (0.5, 0), (1, 1))
    with pytest.raises(TypeError, match="update has dtype float32"):
        rj.lax.dynamic_update_slice(x, np.ones((1, 1), np.float32), (0, 0))


@given(n=st.one_of(st.sampled_from([1, 2, 5]), st.integers(1, 400)), m=st.sampled_from([1, 3, 16, 33]),
       rows=st.sampled_from([1, 2]), shift=st.integers(-3, 3), seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_loop_of_dynamic_update_slices_in_place(n, m, rows, shift, seed):
    """A carry updated by ``dynamic_update_slice`` in a fori_loop is updated in place (one
    buffer, only the slice stored: ``update_region``); starts past the end clamp as in JAX,
    the caller's array is untouched, and a slice update reading another part of the carry
    (``u.at[0].set(u[1])``, not updatable in place) stays right."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m))
    keep = x.copy()
    rows = min(rows, n)
    y = rng.standard_normal((rows, m))

    f = rj.jit(lambda x, y, s: rj.lax.fori_loop(
        0, s, lambda i, o: rj.lax.dynamic_update_slice(o, y * 0.5 + i, (i + shift, 0)), x))
    g = rj.jit(lambda x, s: rj.lax.fori_loop(0, s, lambda i, u: u.at[0].set(u[-1] + 1.0), x))
    steps = n + 2
    want = x.copy()
    for i in range(steps):
        start = min(max(i + shift, 0), n - rows)
        want[start:start + rows] = y * 0.5 + i
    np.testing.assert_allclose(f(x, y, steps), want, rtol=1e-12)
    want = x.copy()
    for _ in range(steps):
        want[0] = want[-1] + 1.0
    np.testing.assert_allclose(g(x, steps), want, rtol=1e-12)
    np.testing.assert_array_equal(x, keep)
