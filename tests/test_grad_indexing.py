"""Derivatives of gathers and updates: ``x[idx]`` (duplicates and negative indices),
``x[i]`` with a traced index in a loop, ``lax.dynamic_slice`` / ``dynamic_update_slice``,
``x.at[idx].add`` / ``.set`` / ``.multiply`` / ``.min`` / ``.max`` (indices out of range
dropped or clipped), ``x.at[a:b].set``, ``take_along_axis``, boolean masks -- gradients
against central finite differences of NumPy in float64 over hypothesis-drawn shapes and
indices, on every backend, and forward mode along a random direction."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj
from relaxjax.lax import dynamic_slice, dynamic_update_slice, fori_loop

from helpers import BACKENDS
from test_grad import numeric_grad

SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7]), st.integers(1, 11))


def check(f, f_np, args, argnums=(0,), rtol=1e-5, atol=1e-6):
    """The gradient against central differences on every backend, and forward mode
    (``jvp``, reverse mode twice) along a random direction of each argument."""
    wants = {k: numeric_grad(f_np, args, k) for k in argnums}
    for b in BACKENDS:
        got = rj.jit(rj.grad(f, argnums=argnums), backend=b)(*args)
        for k, g in zip(argnums, got):
            want = wants[k]
            np.testing.assert_allclose(g, want, rtol=rtol, atol=atol * (1 + np.abs(want).max(initial=0.0)),
                                       err_msg=f"backend {b}, argument {k}")
    rng = np.random.default_rng(len(args))
    for k in argnums:
        t = rng.standard_normal(np.shape(args[k]))

        def along(t, *a, k=k):          # every argument traced, the direction too
            return rj.jvp(lambda x: f(*a[:k], x, *a[k + 1:]), (a[k],), (t,))
        _, tan = rj.jit(along)(t, *args)
        want = float((wants[k] * t).sum())
        np.testing.assert_allclose(tan, want, rtol=rtol, atol=atol * (1 + np.abs(wants[k]).sum() * np.abs(t).max()),
                                   err_msg=f"jvp, argument {k}")


@given(n=SIZES, m=SIZES, axis=st.sampled_from([0, 1]), data=st.data())
@settings(max_examples=20, deadline=None)
def test_gather_with_duplicates_and_negative_indices(n, m, axis, data):
    shape = (n, m)
    d = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-d, d - 1), min_size=1, max_size=7)))
    rng = np.random.default_rng(n * 31 + m)
    x = rng.standard_normal(shape)
    w = rng.standard_normal(np.take(x, idx, axis=axis).shape)
    f = lambda x: np.sum(np.sin(np.take(x, idx, axis=axis)) * w)
    check(f, f, (x,))


@given(n=SIZES, seed=st.integers(0, 99))
@settings(max_examples=10, deadline=None)
def test_traced_index_in_a_loop(n, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(n), rng.standard_normal(2)

    def f(x, w):
        return np.sum(fori_loop(0, n, lambda i, c: np.tanh(c * w + x[i]), np.zeros(2)))

    def f_np(x, w):
        c = np.zeros(2)
        for i in range(n):
            c = np.tanh(c * w + x[i])
        return np.sum(c)
    check(f, f_np, (x, w), (0, 1))


@given(n=st.integers(3, 12), seed=st.integers(0, 99))
@settings(max_examples=10, deadline=None)
def test_dynamic_slice_and_update(n, seed):
    rng = np.random.default_rng(seed)
    x, u = rng.standard_normal((n, 3)), rng.standard_normal((2, 3))
    s = int(rng.integers(0, n))             # clamped to n - 2 like the forward

    def f(x, u):
        i = np.int64(s) * np.ones((), np.int64)
        y = dynamic_update_slice(x, np.sin(u), (i, 0))
        return np.sum(np.cos(dynamic_slice(y * y, (i - 1, 0), (2, 3)))) + np.sum(y * 0.5)

    def f_np(x, u):
        lo = min(max(s, 0), n - 2)
        y = x.copy()
        y[lo:lo + 2] = np.sin(u)
        lo2 = min(max(s - 1, 0), n - 2)
        return np.sum(np.cos((y * y)[lo2:lo2 + 2])) + np.sum(y * 0.5)
    check(f, f_np, (x, u), (0, 1))


@given(n=SIZES, data=st.data(), mode=st.sampled_from(["add", "set"]))
@settings(max_examples=20, deadline=None)
def test_at_updates_with_dropped_indices(n, data, mode):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n)
    if mode == "set":                       # distinct indices (a twice-set index has no derivative)
        idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)))
        idx = np.concatenate([idx, [n + 3]])            # one out of range: dropped
    else:
        idx = np.array(data.draw(st.lists(st.integers(-n, n + 2), min_size=1, max_size=8)))
    u = rng.standard_normal(idx.shape)

    def f(x, u):
        y = getattr(x.at[idx], mode)(np.sin(u) * 2.0)
        return np.sum(np.cos(y) * np.arange(1.0, n + 1))

    def f_np(x, u):
        y = x.copy()
        keep = (idx >= -n) & (idx < n)
        if mode == "add":
            np.add.at(y, idx[keep], (np.sin(u) * 2.0)[keep])
        else:
            y[idx[keep]] = (np.sin(u) * 2.0)[keep]
        return np.sum(np.cos(y) * np.arange(1.0, n + 1))
    check(f, f_np, (x, u), (0, 1))


def test_window_set():
    x, v = np.linspace(0.1, 1.0, 7), np.array([0.3, -0.2, 0.5])
    f = lambda x, v: np.sum(np.sin(x.at[2:5].set(v * x[:3])))

    def f_np(x, v):
        y = x.copy()
        y[2:5] = v * x[:3]
        return np.sum(np.sin(y))
    check(f, f_np, (x, v), (0, 1))


@given(n=SIZES, data=st.data(), mode=st.sampled_from(["multiply", "min", "max"]),
       oob=st.sampled_from(["drop", "clip"]), zeros=st.integers(0, 2), seed=st.integers(0, 999))
@settings(max_examples=30, deadline=None)
def test_multiplying_and_extremal_updates(n, data, mode, oob, zeros, seed):
    """``.at[].multiply/.min/.max`` with repeated indices, indices out of range (dropped or
    clamped) and, for ``multiply``, zero updates (the others' product taken without division
    by them).  Values are distinct (no ties), where the derivative of min/max exists."""
    idx = np.array(data.draw(st.lists(st.integers(-n - 2, n + 2), min_size=1, max_size=8)))
    rng = np.random.default_rng(seed)
    x = rng.permutation(n) * 0.37 - 1.0
    u = rng.permutation(len(idx)) * 0.29 - 0.85          # never equal to an x (sizes <= 11)
    if mode == "multiply":
        u[rng.choice(u.size, min(zeros, u.size), replace=False)] = 0.0
    w = np.arange(1.0, n + 1)

    def f(x, u):
        return np.sum(getattr(x.at[idx], mode)(u, mode=oob) * w)

    def f_np(x, u):
        y = x.copy()
        for j, v in zip(idx, u):
            if oob == "clip":
                j = min(max(j + n if j < 0 else j, 0), n - 1)
            elif not -n <= j < n:
                continue
            y[j] = y[j] * v if mode == "multiply" else min(y[j], v) if mode == "min" else max(y[j], v)
        return np.sum(y * w)
    check(f, f_np, (x, u), (0, 1))


@given(n=SIZES, m=SIZES, k=SIZES, axis=st.sampled_from([0, 1, -1]), lead=st.sampled_from([1, 2]),
       seed=st.integers(0, 999))
@settings(max_examples=20, deadline=None)
def test_take_along_axis_with_broadcasting_duplicates_and_negative_indices(n, m, k, axis, lead, seed):
    """The operand's leading axis is 1 where the indices' is ``lead`` (broadcast: its
    cotangent is summed); indices repeat and count from the end."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, n, m))
    ax = axis % 2 + 1
    d = x.shape[ax]
    ishape = (lead, k, m) if ax == 1 else (lead, n, k)
    idx = rng.integers(-d, d, ishape)
    w = rng.standard_normal(ishape)
    f = lambda x: np.sum(np.cos(np.take_along_axis(x, idx, axis=ax)) * w)
    check(f, f, (x,))


def test_sorting_by_argsort_differentiates_through_the_gather():
    x = np.array([3.0, -1.0, 2.5, 0.5, -4.0])
    w = np.arange(1.0, 6.0)
    g = rj.grad(lambda x: np.sum(np.take_along_axis(x, np.argsort(x), axis=0) * w))(x)
    np.testing.assert_allclose(g, w[np.argsort(np.argsort(x))])     # each element's rank's weight


@given(shape=st.sampled_from([(1,), (7,), (3, 4), (2, 5, 3), (11, 2)]), depth=st.sampled_from([1, 2]),
       seed=st.integers(0, 999))
@settings(max_examples=20, deadline=None)
def test_boolean_mask(shape, depth, seed):
    """``x[mask]``: the selected elements take their cotangents, the others zero (a mask
    over the leading ``depth`` axes; the count is known only at run time)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    mask = rng.random(shape[:depth]) < 0.5

    def f(x):
        y = x[mask]
        return np.sum(np.sin(y) * y)
    check(f, f, (x,))
