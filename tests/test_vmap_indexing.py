"""``vmap`` of gathers and updates (``lax.indexing``'s batching rules): dynamic slices and
updates with starts shared or per example (clamped as JAX clamps them), strided slice updates,
scatters with indices shared or per example (negative, out of range: dropped or clipped), and
gathers of per-example indices from per-example arrays, each against a loop over the examples
on every backend, with no per-example loop left in the program."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
from relaxjax.lax import dynamic_slice, dynamic_update_slice

from helpers import BACKENDS

BATCH = st.one_of(st.sampled_from([1, 2, 3, 7]), st.integers(1, 40))


def _clamp(s, m, n):
    return min(max(int(s), 0), n - m)


def _np_dus(x, u, starts):
    o = x.copy()
    lo = [_clamp(s, m, n) for s, m, n in zip(starts, u.shape, x.shape)]
    o[tuple(slice(a, a + m) for a, m in zip(lo, u.shape))] = u
    return o


def _np_scatter(x, i, v, add=False, clip=False):
    o = x.copy()
    n = x.shape[0]
    for j, vv in zip(np.atleast_1d(i), v.reshape((-1,) + x.shape[1:])):
        j = j + n if j < 0 else j
        if clip:
            j = min(max(j, 0), n - 1)
        if 0 <= j < n:
            o[j] = o[j] + vv if add else vv
    return o


# name -> (function of one example, its NumPy form, operands for a batch, in_axes)
CASES = {
    "dynamic_slice, starts per example": (
        lambda x, s, t: dynamic_slice(x, (s, t), (3, 2)),
        lambda x, s, t: x[_clamp(s, 3, x.shape[0]):][:3, _clamp(t, 2, x.shape[1]):][:, :2],
        lambda rng, b: (rng.standard_normal((b, 7, 5)), rng.integers(-3, 10, b), rng.integers(-3, 10, b)),
        (0, 0, 0)),
    "dynamic_slice, shared start": (
        lambda x, s: dynamic_slice(x, (s, 1), (2, 3)),
        lambda x, s: x[_clamp(s, 2, x.shape[0]):][:2, 1:4],
        lambda rng, b: (rng.standard_normal((b, 6, 5)), np.int64(rng.integers(-2, 8))), (0, None)),
    "dynamic_update_slice, starts per example": (
        lambda x, u, s, t: dynamic_update_slice(x, u, (s, t)),
        lambda x, u, s, t: _np_dus(x, u, (s, t)),
        lambda rng, b: (rng.standard_normal((b, 6, 5)), rng.standard_normal((b, 2, 3)),
                        rng.integers(-2, 9, b), rng.integers(-2, 9, b)), (0, 0, 0, 0)),
    "dynamic_update_slice, shared update and start": (
        lambda x, u, s: dynamic_update_slice(x, u, (s, 0)),
        lambda x, u, s: _np_dus(x, u, (s, 0)),
        lambda rng, b: (rng.standard_normal((b, 6, 5)), rng.standard_normal((1, 5)),
                        np.int64(rng.integers(-2, 9))), (0, None, None)),
    "strided slice update": (
        lambda x, v: x.at[1:5:2, ::2].set(v),
        lambda x, v: _set(x, (slice(1, 5, 2), slice(None, None, 2)), v),
        lambda rng, b: (rng.standard_normal((b, 6, 5)), rng.standard_normal((b, 2, 3))), (0, 0)),
    "scatter set, index per example": (
        lambda x, i, v: x.at[i].set(v),
        lambda x, i, v: _np_scatter(x, i, v),
        lambda rng, b: (rng.standard_normal((b, 6, 3)), rng.integers(-8, 9, b), rng.standard_normal((b, 3))),
        (0, 0, 0)),
    "scatter add, indices per example": (
        lambda x, i, v: x.at[i].add(v),
        lambda x, i, v: _np_scatter(x, i, v, add=True),
        lambda rng, b: (rng.standard_normal((b, 6)), rng.integers(-6, 6, (b, 4)), rng.standard_normal((b, 4))),
        (0, 0, 0)),
    "scatter clip, shared array": (
        lambda x, i, v: x.at[i].set(v, mode="clip"),
        lambda x, i, v: _np_scatter(x, i, v, clip=True),
        lambda rng, b: (rng.standard_normal((5, 2)), rng.integers(-9, 9, b), rng.standard_normal((b, 2))),
        (None, 0, 0)),
    "scatter, shared indices": (
        lambda x, i, v: x.at[i].add(v),
        lambda x, i, v: _np_scatter(x, i, v, add=True),
        lambda rng, b: (rng.standard_normal((b, 6)), np.array([1, 1, -1]), rng.standard_normal((b, 3))),
        (0, None, 0)),
    "scatter add along axis 1, indices per example": (
        lambda x, i, v: x.at[:, i].add(v),
        lambda x, i, v: _np_at_axis1(x, i, v, np.add),
        lambda rng, b: (rng.standard_normal((b, 3, 5, 2)), rng.integers(-5, 5, (b, 4)),
                        rng.standard_normal((b, 3, 4, 2))), (0, 0, 0)),
    "scatter max along axis 2, one index per example": (
        lambda x, i, v: x.at[:, :, i].max(v),
        lambda x, i, v: _np_at_axis2(x, i, v),
        lambda rng, b: (rng.standard_normal((b, 2, 3, 5)), rng.integers(-5, 5, b),
                        rng.standard_normal((b, 2, 3))), (0, 0, 0)),
    "gather along axis 1, indices per example": (
        lambda x, i: x[:, i] * 2.0,
        lambda x, i: x[:, i] * 2.0,
        lambda rng, b: (rng.standard_normal((b, 3, 7, 2)), rng.integers(-7, 7, (b, 2, 3))), (0, 0)),
    "gather, indices per example": (
        lambda x, i: x[i] * 2.0,
        lambda x, i: x[i] * 2.0,
        lambda rng, b: (rng.standard_normal((b, 7, 3)), rng.integers(-7, 7, (b, 2, 2))), (0, 0)),
}


def _np_at_axis1(x, i, v, ufunc):
    o = x.copy()
    ufunc.at(o, (slice(None), i), v)
    return o


def _np_at_axis2(x, i, v):
    o = x.copy()
    o[:, :, i] = np.maximum(o[:, :, i], v)
    return o


def _set(x, index, v):
    o = x.copy()
    o[index] = v
    return o


@pytest.mark.parametrize("name", sorted(CASES))
@given(size=BATCH, seed=st.integers(0, 2 ** 16))
@settings(max_examples=6, deadline=None)
def test_vmap_of_gathers_and_updates_matches_a_loop(name, size, seed):
    fun, ref, make, in_axes = CASES[name]
    args = make(np.random.default_rng(seed), size)
    want = np.stack([ref(*[a[t] if ax == 0 else a for a, ax in zip(args, in_axes)]) for t in range(size)])
    for backend in BACKENDS:
        got = rj.jit(rj.vmap(fun, in_axes=in_axes), backend=backend)(*args)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_per_example_loop(name):
    fun, _, make, in_axes = CASES[name]
    args = make(np.random.default_rng(0), 4)
    assert "scan(" not in rj.jit(rj.vmap(fun, in_axes=in_axes)).lower(*args).as_text("optimized")
