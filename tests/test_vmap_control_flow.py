"""``vmap`` of the control-flow primitives (``lax.control_flow_batching``): loops and
``cond`` run once for the batch, against a Python loop over the examples (NumPy, float64),
over hypothesis-drawn batch sizes (1, primes) on every backend; a ``while_loop`` (or a
``fori_loop`` with a trip count per example) runs until every example is done, each example
keeping its own carry; one compile serves every batch size; per-example gradients through
a loop."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.lax import cond, fori_loop, scan, switch, while_loop

from helpers import BACKENDS

BATCH = st.one_of(st.sampled_from([1, 2, 3, 7, 13]), st.integers(1, 64))


def _newton(a, x0):
    """sqrt(a) from x0 by Newton's method, and the steps it took (differs per example)."""
    def body(c):
        x, k = c
        return (x + a / x) / 2, k + 1
    return while_loop(lambda c: rnp.abs(c[0] * c[0] - a) > 1e-12 * a, body, (x0, 0))


def _newton_np(a, x0):
    x, k = x0, 0
    while abs(x * x - a) > 1e-12 * a:
        x, k = (x + a / x) / 2, k + 1
    return x, k


# name -> (function of one example, the same in NumPy, operands for a batch, in_axes)
CASES = {
    "fori, batched carry and capture": (
        lambda x, w: fori_loop(0, 5, lambda i, c: rnp.tanh(c @ w) + x * i, x),
        lambda x, w: _fori_np(x, w), lambda rng, b: (rng.standard_normal((b, 4)), rng.standard_normal((4, 4))),
        (0, None)),
    "fori, batched weights only": (
        lambda x, w: fori_loop(0, 3, lambda i, c: c @ w, x),
        lambda x, w: x @ w @ w @ w, lambda rng, b: (rng.standard_normal(4), rng.standard_normal((b, 4, 4)) / 2),
        (None, 0)),
    "fori, trip count per example": (
        lambda n, x: fori_loop(0, n, lambda i, c: c * 0.5 + i, x),
        lambda n, x: _halving_np(n, x), lambda rng, b: (rng.integers(0, 9, b), rng.standard_normal((b, 3))),
        (0, 0)),
    "while, own end per example": (
        _newton, _newton_np, lambda rng, b: (rng.uniform(0.5, 1e4, b), np.ones(b)), (0, 0)),
    "while, shared start": (
        _newton, _newton_np, lambda rng, b: (rng.uniform(0.5, 1e4, b), np.float64(3.0)), (0, None)),
    "scan, batched xs": (
        lambda c0, xs: scan(lambda c, x: (c * 0.9 + x, c.sum()), c0, xs),
        lambda c0, xs: _scan_np(c0, xs), lambda rng, b: (rng.standard_normal((b, 3)), rng.standard_normal((b, 6, 3))),
        (0, 0)),
    "scan, shared xs, reverse": (
        lambda c0, xs: scan(lambda c, x: (c * 0.9 + x, c * x), c0, xs, reverse=True),
        lambda c0, xs: _scan_np(c0, xs, reverse=True, y=lambda c, x: c * x),
        lambda rng, b: (rng.standard_normal((b, 3)), rng.standard_normal((5, 3))), (0, None)),
    "cond per example": (
        lambda x: cond(x.sum() > 0, lambda v: v * 2.0, lambda v: -v + 1.0, x),
        lambda x: x * 2.0 if x.sum() > 0 else -x + 1.0, lambda rng, b: (rng.standard_normal((b, 3)),), (0,)),
    "cond shared predicate": (
        lambda p, x: cond(p > 0, lambda v: v * 2.0, lambda v: -v, x),
        lambda p, x: x * 2.0 if p > 0 else -x, lambda rng, b: (np.float64(rng.choice([-1.0, 1.0])),
                                                               rng.standard_normal((b, 3))), (None, 0)),
    "switch per example, clamped": (
        lambda i, x: switch(i, [lambda v: v + 1.0, lambda v: v * 3.0, lambda v: rnp.sin(v)], x),
        lambda i, x: [x + 1.0, x * 3.0, np.sin(x)][min(max(i, 0), 2)],
        lambda rng, b: (rng.integers(-2, 5, b).astype(np.int32), rng.standard_normal((b, 2))), (0, 0)),
}


def _fori_np(x, w):
    c = x
    for i in range(5):
        c = np.tanh(c @ w) + x * i
    return c


def _halving_np(n, x):
    c = x
    for i in range(n):
        c = c * 0.5 + i
    return c


def _scan_np(c0, xs, reverse=False, y=lambda c, x: c.sum()):
    c, ys = c0, []
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in order:
        ys.append(y(c, xs[t]))
        c = c * 0.9 + xs[t]
    if reverse:
        ys.reverse()
    return c, np.stack(ys)


def _loop_of_examples(ref, args, in_axes, size):
    outs = []
    for t in range(size):
        ex = [a[t] if ax == 0 else a for a, ax in zip(args, in_axes)]
        outs.append(ref(*ex))
    return outs


@pytest.mark.parametrize("name", sorted(CASES))
@given(size=BATCH, seed=st.integers(0, 2 ** 16))
@settings(max_examples=6, deadline=None)
def test_vmap_of_control_flow_matches_a_loop(name, size, seed):
    fun, ref, make, in_axes = CASES[name]
    args = make(np.random.default_rng(seed), size)
    want = _loop_of_examples(ref, args, in_axes, size)
    for backend in BACKENDS:
        got = rj.jit(rj.vmap(fun, in_axes=in_axes), backend=backend)(*args)
        if isinstance(got, tuple):
            for j, g in enumerate(got):
                np.testing.assert_allclose(g, np.stack([np.asarray(w[j]) for w in want]), rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_allclose(got, np.stack(want), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_loop_runs_once_for_the_batch(name):
    """No per-example ``lax.map`` (a scan) around the loop: the traced mapped program holds
    the example's loops twice (the one-example trace, dead code, and the batched one) and
    no scan the example does not have."""
    fun, _, make, in_axes = CASES[name]
    args = make(np.random.default_rng(0), 4)
    text = rj.jit(rj.vmap(fun, in_axes=in_axes)).lower(*args).as_text()
    one = rj.jit(fun).lower(*[a[0] if ax == 0 else a for a, ax in zip(args, in_axes)]).as_text()
    assert text.count("scan(") == 2 * one.count("scan("), text
    count = lambda t: sum(t.count(f"= {k}(") for k in ("fori_loop", "while_loop", "scan", "cond"))
    if name.startswith(("cond per", "switch per")):   # every branch runs, then a select
        assert count(text) == count(one) and "select(" in text, text
    else:
        assert count(text) == 2 * count(one), text


def test_per_example_trip_counts_end_each_example_on_its_own():
    a = np.array([0.5, 4.0, 1e6, 2.0, 9.0])
    x, k = rj.vmap(_newton)(a, np.ones(5))
    np.testing.assert_allclose(x, np.sqrt(a), rtol=1e-12)
    np.testing.assert_array_equal(k, [_newton_np(v, 1.0)[1] for v in a])
    assert len(set(k.tolist())) > 1


def test_one_compile_for_every_batch_size():
    f = rj.jit(rj.vmap(_newton))
    rng = np.random.default_rng(5)
    for b in (3, 1, 17, 64):
        a = rng.uniform(1, 100, b)
        np.testing.assert_allclose(f(a, np.ones(b))[0], np.sqrt(a), rtol=1e-12)
    assert f.cache_info().compiles == 1


def test_per_example_gradients_through_a_loop():
    """``vmap(grad(.))`` of a loss computed by a fori_loop: each example's gradient, as
    the jitted grad gives it one example at a time."""
    def loss(w, x):
        h = fori_loop(0, 3, lambda i, c: rnp.tanh(c @ w), x)
        return rnp.sum(h ** 2)
    rng = np.random.default_rng(6)
    w, xs = rng.standard_normal((4, 4)) / 2, rng.standard_normal((7, 4))
    got = rj.jit(rj.vmap(rj.grad(loss), in_axes=(None, 0)))(w, xs)
    g = rj.jit(rj.grad(loss))
    np.testing.assert_allclose(got, np.stack([g(w, x) for x in xs]), rtol=1e-10, atol=1e-12)
