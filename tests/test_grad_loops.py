"""Derivatives through loops: ``grad`` (and ``jvp``) of ``fori_loop`` and ``scan`` against
the unrolled loop's central finite differences in float64, over hypothesis-drawn trip
counts (0, 1, primes) and shapes, on every backend: carries, the values the body captures
(a physics parameter), scanned ``xs`` and stacked ``ys``, ``reverse``, integer carries,
symbolic trip counts compiled once, traced bounds."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import relaxjax as rj
from relaxjax.lax import fori_loop, scan, while_loop

from helpers import BACKENDS
from test_grad import numeric_grad

STEPS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7]), st.integers(1, 12))
WIDTH = st.one_of(st.sampled_from([1, 2, 3, 5]), st.integers(1, 9))


def check(f, f_np, args, argnums, rtol=1e-5, atol=1e-6):
    for b in BACKENDS:
        got = rj.jit(rj.grad(f, argnums=argnums), backend=b)(*args)
        for k, g in zip(argnums, got):
            want = numeric_grad(f_np, args, k)
            assert g.shape == np.shape(args[k])
            np.testing.assert_allclose(g, want, rtol=rtol, atol=atol * (1 + np.abs(want).max(initial=0.0)),
                                       err_msg=f"backend {b}, argument {k}")


@given(steps=STEPS, n=WIDTH, seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_fori_loop_carry_and_captured_parameter(steps, n, seed):
    """A damped oscillator stepped in time: the gradient of the end state's energy with
    respect to the initial state and the captured stiffness and damping."""
    rng = np.random.default_rng(seed)
    x0, v0 = rng.standard_normal(n), rng.standard_normal(n)
    k, c = rng.uniform(0.5, 2.0, n), np.float64(rng.uniform(0.05, 0.3))
    dt = 0.1

    def step(state, k, c):
        x, v = state
        a = -k * np.sin(x) - c * v
        return x + dt * v, v + dt * a

    def f(x0, v0, k, c):
        x, v = fori_loop(0, steps, lambda i, s: step(s, k, c), (x0, v0))
        return np.sum(x ** 2 + v ** 2)

    def f_np(x0, v0, k, c):
        s = (x0, v0)
        for _ in range(steps):
            s = step(s, k, c)
        return np.sum(s[0] ** 2 + s[1] ** 2)
    check(f, f_np, (x0, v0, k, c), (0, 1, 2, 3))


@given(steps=STEPS, n=WIDTH, reverse=st.booleans(), seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_scan_xs_ys_and_reverse(steps, n, reverse, seed):
    rng = np.random.default_rng(seed)
    h0, w = rng.standard_normal(n), rng.standard_normal((n, n)) * 0.5
    xs = rng.standard_normal((steps, n))

    def cell(h, x, w):
        h = np.tanh(h @ w + x)
        return h, np.sum(h * x)

    def f(h0, w, xs):
        h, ys = scan(lambda h, x: cell(h, x, w), h0, xs, reverse=reverse)
        return np.sum(h ** 2) + np.sum(ys * np.arange(1.0, steps + 1))

    def f_np(h0, w, xs):
        h, ys = h0, []
        for x in (xs[::-1] if reverse else xs):
            h, y = cell(h, x, w)
            ys.append(y)
        ys = ys[::-1] if reverse else ys
        return np.sum(h ** 2) + np.sum(np.array(ys, dtype=float) * np.arange(1.0, steps + 1))
    check(f, f_np, (h0, w, xs), (0, 1, 2))


def test_scan_without_xs():
    x = np.linspace(0.2, 1.0, 3)

    def f(x):
        c, ys = scan(lambda c, _: (np.sin(c) * 1.5, c * c), x, None, length=5)
        return np.sum(c) + np.sum(ys * np.arange(1.0, 6.0)[:, None])

    def f_np(x):
        c, ys = x, []
        for _ in range(5):
            c, y = np.sin(c) * 1.5, c * c
            ys.append(y)
        return np.sum(c) + np.sum(np.array(ys) * np.arange(1.0, 6.0)[:, None])
    check(f, f_np, (x,), (0,))


def test_integer_carry_and_the_loop_index():
    x = np.linspace(0.2, 1.0, 4)

    def f(x):
        y, count = fori_loop(1, 4, lambda i, s: (s[0] * i + np.sin(s[0]), s[1] + 1), (x, 0))
        return np.sum(y) * 1.0

    def f_np(x):
        y = x
        for i in range(1, 4):
            y = y * i + np.sin(y)
        return np.sum(y)
    check(f, f_np, (x,), (0,))


def test_symbolic_trip_count_compiles_once():
    g = rj.jit(rj.grad(lambda x, a: np.sum(fori_loop(0, x.shape[0], lambda i, c: np.sin(c) * a, x)),
                       argnums=(0, 1)))
    for n in (3, 1, 2, 5, 8):
        x, a = np.linspace(0.1, 0.9, n), np.float64(1.3)

        def f_np(x, a):
            c = x
            for _ in range(n):
                c = np.sin(c) * a
            return np.sum(c)
        gx, ga = g(x, a)
        np.testing.assert_allclose(gx, numeric_grad(f_np, (x, a), 0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ga, numeric_grad(f_np, (x, a), 1), rtol=1e-5, atol=1e-7)
    assert g.cache_info().compiles == 1


def test_jvp_through_a_loop():
    x, t = np.linspace(0.1, 0.9, 5), np.linspace(1.0, -1.0, 5)

    def f(x):
        return fori_loop(0, 4, lambda i, c: np.sin(c) + 0.5 * c, x)

    def f_np(x):
        for _ in range(4):
            x = np.sin(x) + 0.5 * x
        return x
    eps = 1e-6
    _, tan = rj.jvp(f, (x,), (t,))
    np.testing.assert_allclose(tan, (f_np(x + eps * t) - f_np(x - eps * t)) / (2 * eps), rtol=1e-6, atol=1e-8)


@given(n=WIDTH, scale=st.floats(0.0, 3.0), shrink=st.floats(0.3, 0.9), seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_while_loop_with_a_data_dependent_trip_count(n, scale, shrink, seed):
    """Shrink until small: the trip count (0 included) depends on the data; the gradient is
    the unrolled loop's for that count (finite differences small enough not to change it)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 1.0, n) * scale
    a = np.float64(shrink)

    def f(x, a):
        c, k = while_loop(lambda s: np.sum(s[0] ** 2) > 0.05, lambda s: (s[0] * a + 0.01 * np.sin(s[0]), s[1] + 1),
                          (x, 0))
        return np.sum(np.cos(c) * np.arange(1.0, n + 1))

    def f_np(x, a):
        c = x
        while np.sum(c ** 2) > 0.05:
            c = c * a + 0.01 * np.sin(c)
        return np.sum(np.cos(c) * np.arange(1.0, n + 1))

    def trips(x, a):
        c, k = x, 0
        while np.sum(c ** 2) > 0.05:
            c, k = c * a + 0.01 * np.sin(c), k + 1
        return k
    eps, k = 1e-6, trips(x, a)
    # clear of a trip-count boundary, where the function jumps
    assume(all(trips(x + d * eps * e, a) == k for e in np.eye(n) for d in (-1, 1)))
    assume(all(trips(x, a + d * eps) == k for d in (-1, 1)))
    check(f, f_np, (x, a), (0, 1))


def test_while_loop_gradient_compiles_once():
    """Newton's square root of a parameter, iterated to convergence: the derivative of the
    converged value with respect to the parameter is 1 / (2 sqrt(p))."""
    def newton(p):
        r, _ = while_loop(lambda s: (s[1] < 50) & (np.max(np.abs(s[0] * s[0] - p)) > 1e-12),
                          lambda s: (0.5 * (s[0] + p / s[0]), s[1] + 1), (p + 1.0, 0))
        return np.sum(r)
    g = rj.jit(rj.grad(newton))
    for n in (1, 4, 7):
        p = np.linspace(0.5, 9.0, n)
        np.testing.assert_allclose(g(p), 0.5 / np.sqrt(p), rtol=1e-6)
    assert g.cache_info().compiles == 1


@given(n=WIDTH, shift=st.floats(-2.0, 2.0), seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_cond_and_switch_take_the_branch_that_ran(n, shift, seed):
    rng = np.random.default_rng(seed)
    x, a = rng.standard_normal(n) + shift, np.float64(rng.uniform(0.5, 2.0))
    w = rng.standard_normal(n)
    branches = [lambda v, a: np.sin(v) * a * w, lambda v, a: v ** 2 + a, lambda v, a: np.exp(v * 0.1) * a * a]

    def pick(x):
        return 0 if np.sum(x) > 1.0 else 1 if np.sum(x) > -1.0 else 2

    def f(x, a):
        i = (np.sum(x) <= 1.0).astype(np.int32) + (np.sum(x) <= -1.0).astype(np.int32)
        y = rj.lax.switch(i, branches, x, a)
        z = rj.lax.cond(np.sum(x) > 0.0, lambda v: v * a, lambda v: v - a, y)
        return np.sum(z * np.arange(1.0, n + 1))

    def f_np(x, a):
        y = branches[pick(x)](x, a)
        z = y * a if np.sum(x) > 0.0 else y - a
        return np.sum(z * np.arange(1.0, n + 1))
    eps = 1e-6
    assume(all(pick(x + d * eps * e) == pick(x) and (np.sum(x + d * eps * e) > 0) == (np.sum(x) > 0)
               for e in np.eye(n) for d in (-1, 1)))
    check(f, f_np, (x, a), (0, 1))


@given(lo=st.integers(-3, 6), trips=st.integers(-2, 9), n=WIDTH, seed=st.integers(0, 99),
       itype=st.sampled_from(["int32", "int64"]))
@settings(max_examples=15, deadline=None)
def test_fori_loop_with_traced_bounds(lo, trips, n, seed, itype):
    """Bounds that are values (JAX differentiates no such loop): the carries stacked along a
    run-time length, as a while_loop's are; the index enters the body; an empty range
    (upper <= lower) passes the cotangent through.  One compile for every trip count."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    hi = lo + trips

    def f(x, w, lo, hi):
        return np.sum(fori_loop(lo, hi, lambda i, c: np.sin(c) * w + i * 0.1, x))

    def f_np(x, w, lo, hi):
        c = x
        for i in range(int(lo), int(hi)):
            c = np.sin(c) * w + i * 0.1
        return np.sum(c)
    check(f, f_np, (x, w, np.dtype(itype).type(lo), np.dtype(itype).type(hi)), (0, 1))
    g = rj.jit(rj.grad(f))
    for t in (0, 3, 7):
        g(x, w, np.dtype(itype).type(lo), np.dtype(itype).type(lo + t))
    assert g.cache_info().compiles == 1


@pytest.mark.parametrize("k", [0, 1, 5, 13, -2])
def test_iota_count_has_a_run_time_length(k):
    """``lax.iota_count(n)``: arange of a traced count (what stacks a while_loop's carries)."""
    for b in BACKENDS:
        f = rj.jit(lambda n, x: rj.lax.iota_count(n) * 2 + x, backend=b)
        got = f(np.int64(k), np.int64(1))
        np.testing.assert_array_equal(got, np.arange(max(k, 0)) * 2 + 1)
        assert got.dtype == np.int64
    np.testing.assert_array_equal(rj.lax.iota_count(k), np.arange(max(k, 0)))
