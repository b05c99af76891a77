"""``rj.vmap``: every case against a Python loop of NumPy over the examples, over
hypothesis-drawn batch sizes and example shapes (1, primes), mapped axes and unmapped
arguments, on every backend; per-example gradients against a loop of ``rj.grad``; one
compile for every batch size; the loop fallback (gathers, loops, library calls); errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.lax import fori_loop, while_loop

from helpers import BACKENDS

SIZES = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13]), st.integers(1, 40))
DIMS = st.one_of(st.sampled_from([1, 2, 3, 5, 7]), st.integers(1, 9))


def looped(f_np, args, in_axes):
    """The oracle: NumPy's ``f`` on each example, the results stacked."""
    size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f_np(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, in_axes)])
            for i in range(size)]
    return np.stack(outs)


def check(case, args, in_axes, rtol=1e-10, atol=1e-12):
    want = looped(case(np), args, in_axes)
    for b in BACKENDS:
        got = rj.jit(rj.vmap(case(rnp), in_axes=in_axes), backend=b)(*args)
        assert got.shape == want.shape, (b, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"backend {b}")


# vectorized by the primitives' batching rules: (function of the array module, argument
# shapes as functions of the example dims (m, n), in_axes)
RULED = {
    "unary": (lambda xp: lambda x: xp.tanh(x) * xp.exp(-x), [lambda m, n: (m, n)], (0,)),
    "broadcast": (lambda xp: lambda x, y: x * y + xp.sin(y), [lambda m, n: (n,), lambda m, n: (m, n)], (0, None)),
    "broadcast_both": (lambda xp: lambda x, y: xp.maximum(x, y[:, None]), [lambda m, n: (m, n), lambda m, n: (m,)], (0, 0)),
    "where": (lambda xp: lambda x, y: xp.where(x > 0, x, y), [lambda m, n: (m, n), lambda m, n: (n,)], (0, 0)),
    "reductions": (lambda xp: lambda x: x.sum(axis=0) + x.max(axis=-1).mean() + x.argmax(axis=0),
                   [lambda m, n: (m, n)], (0,)),
    "cumsum_sort": (lambda xp: lambda x: xp.cumsum(x, axis=0) + xp.sort(x, axis=-1), [lambda m, n: (m, n)], (1,)),
    "matmul_left": (lambda xp: lambda x, w: xp.tanh(x @ w), [lambda m, n: (m, n), lambda m, n: (n, 3)], (0, None)),
    "matmul_right": (lambda xp: lambda w, x: w @ x, [lambda m, n: (4, m), lambda m, n: (m, n)], (None, 2)),
    "matmul_both": (lambda xp: lambda x, y: x @ y.T, [lambda m, n: (m, n), lambda m, n: (m, n)], (0, 1)),
    "matvec": (lambda xp: lambda a, v: a @ v, [lambda m, n: (m, n), lambda m, n: (n,)], (None, 0)),
    "layout": (lambda xp: lambda x: xp.concatenate([x.T.reshape(-1), x[1:, ::2].ravel(), xp.zeros(3)]),
               [lambda m, n: (m + 1, n)], (0,)),
    "pad_broadcast": (lambda xp: lambda x: xp.pad(x, ((1, 2), (0, 1))) + xp.broadcast_to(x[:1], (2, x.shape[1])).sum(),
                      [lambda m, n: (m, n)], (-1,)),
    "complex_parts": (lambda xp: lambda x, y: (x + 1j * y).imag * 2 + xp.real(x * (1 + 2j)) + xp.abs(y * 1j),
                      [lambda m, n: (m, n), lambda m, n: (n,)], (0, None)),
    "softmax": (lambda xp: lambda x: xp.exp(x - x.max(axis=-1, keepdims=True))
                / xp.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True),
                [lambda m, n: (m, n)], (0,)),
}


@pytest.mark.parametrize("name", sorted(RULED))
@given(size=SIZES, m=DIMS, n=DIMS, seed=st.integers(0, 2 ** 16))
@settings(max_examples=6, deadline=None)
def test_batching_rules_against_a_loop(name, size, m, n, seed):
    case, shapes, in_axes = RULED[name]
    rng = np.random.default_rng(seed)
    args = []
    for shape_of, ax in zip(shapes, in_axes):
        shape = list(shape_of(m, n))
        if ax is not None:
            shape.insert(ax % (len(shape) + 1), size)
        args.append(rng.standard_normal(shape))
    check(case, args, in_axes)


def test_gathers():
    """Gathers with a rule: a batch gathered by shared indices, a shared table by batched
    indices (an embedding lookup), take_along_axis; both batched: the loop."""
    rng = np.random.default_rng(4)
    table = rng.standard_normal((10, 3))
    for size in (1, 2, 7):
        ids = rng.integers(0, 10, (size, 4))
        check(lambda xp: lambda t, i: t[i] * 2.0, [table, ids], (None, 0))
        x = rng.standard_normal((size, 10, 3))
        check(lambda xp: lambda x, i: xp.take(x, i, axis=0), [x, ids[0]], (0, None))
        check(lambda xp: lambda x, i: xp.take(x, i, axis=1), [x, np.array([2, 0])], (0, None))
        check(lambda xp: lambda t, i: xp.take(t, i, axis=1), [table, rng.integers(0, 3, (size, 2))], (None, 0))
        check(lambda xp: lambda x: xp.take_along_axis(x, xp.argsort(x, axis=0), axis=0), [x], (0,))
        check(lambda xp: lambda x, i: xp.take_along_axis(x, i, axis=1),
              [x, rng.integers(0, 3, (10, 2))], (0, None))
        check(lambda xp: lambda x, i: x[i], [x, ids[:, 0]], (0, 0))


def test_rules_leave_no_loop():
    """A program the rules cover maps without any loop over the batch."""
    f = rj.jit(rj.vmap(lambda x, w, i: rnp.tanh(x @ w[i]).sum(axis=0), in_axes=(0, None, 0)))
    x, w, i = np.ones((5, 3, 4)), np.ones((6, 4, 2)), np.arange(5) % 6
    text = f.lower(x, w, i).as_text("optimized")
    assert "scan" not in text and "matmul" in text


# cases that ran once per example in a loop before their batching rules (gathers, updates,
# loops, linalg calls): still checked against the loop of NumPy
def _newton_sqrt(xp):
    def f(a):
        def body(c):
            x, k = c
            return 0.5 * (x + a / x), k + 1
        if xp is np:
            x, k = a, 0
            while abs(x * x - a) > 1e-12 * a:
                x, k = body((x, k))
            return np.array([x, k])
        x, k = while_loop(lambda c: rnp.abs(c[0] * c[0] - a) > 1e-12 * a, body, (a, 0))
        return rnp.stack([x, k.astype(float)])
    return f


LOOPED = {
    "gather": (lambda xp: lambda x, i: x[i] * 2, lambda rng, b: (rng.standard_normal((b, 6, 3)), rng.integers(0, 6, b)), (0, 0)),
    "at_set": (lambda xp: (lambda x, i: x.at[i].set(-1.0)) if xp is rnp else (lambda x, i: _np_set(x, i, -1.0)),
               lambda rng, b: (rng.standard_normal((b, 5)), rng.integers(0, 5, b)), (0, 0)),
    "fori": (lambda xp: (lambda x: fori_loop(0, 4, lambda i, c: c * x + 1.0, x)) if xp is rnp
             else (lambda x: _np_fori(x)), lambda rng, b: (rng.standard_normal((b, 3)),), (0,)),
    "while": (_newton_sqrt, lambda rng, b: (rng.uniform(0.5, 50, b),), (0,)),
    "solve": (lambda xp: lambda a, y: xp.linalg.solve(a, y),
              lambda rng, b: (rng.standard_normal((b, 4, 4)) + 4 * np.eye(4), rng.standard_normal((b, 4))), (0, 0)),
}


def _np_set(x, i, v):
    y = x.copy()
    y[i] = v
    return y


def _np_fori(x):
    c = x
    for _ in range(4):
        c = c * x + 1.0
    return c


@pytest.mark.parametrize("name", sorted(LOOPED))
@pytest.mark.parametrize("size", [1, 2, 7])
def test_per_example_loop_fallback(name, size):
    case, make, in_axes = LOOPED[name]
    args = make(np.random.default_rng(size), size)
    check(case, args, in_axes, rtol=1e-9, atol=1e-10)


def test_batched_while_loop_runs_each_lane_to_its_own_end():
    """Each example's loop stops when that example is done (trip counts differ)."""
    a = np.array([0.5, 4.0, 1e6, 2.0])
    got = rj.vmap(_newton_sqrt(rnp))(a)
    np.testing.assert_allclose(got[:, 0], np.sqrt(a), rtol=1e-12)
    assert len(set(got[:, 1])) > 1


def mlp_loss(w, x, y):
    return rnp.sum((rnp.tanh(x @ w) - y) ** 2)


def test_per_example_gradients():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3))
    per = rj.jit(rj.vmap(rj.grad(mlp_loss), in_axes=(None, 0, 0)))
    for batch in (5, 1, 2, 13, 64):
        x, y = rng.standard_normal((batch, 4)), rng.standard_normal((batch, 3))
        got = per(w, x, y)
        want = np.stack([rj.grad(mlp_loss)(w, x[i], y[i]) for i in range(batch)])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert per.cache_info().compiles == 1


def test_grad_of_a_mapped_function():
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((6, 2, 4))

    def total(w, x):
        return rj.vmap(lambda xi: rnp.tanh(xi @ w).sum(), in_axes=0)(x).sum()
    got = rj.grad(total)(w, x)
    want = rj.grad(lambda w, x: rnp.tanh(x @ w).sum())(w, x)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_one_compile_for_every_batch_size():
    f = rj.jit(rj.vmap(lambda x, y: rnp.tanh(x) @ y, in_axes=(0, None)))
    rng = np.random.default_rng(2)
    y = rng.standard_normal((3, 2))
    for batch in (5, 2, 97, 300, 1):
        x = rng.standard_normal((batch, 4, 3))
        np.testing.assert_allclose(f(x, y), np.tanh(x) @ y, rtol=1e-12)
    assert f.cache_info().compiles == 1


def test_axes_outputs_and_trees():
    rng = np.random.default_rng(3)
    x, s = rng.standard_normal((3, 5)), rng.standard_normal(3)

    def f(d):
        return {"sum": d["x"].sum() * d["s"], "const": rnp.ones(2)}, d["x"] * 2
    got, twice = rj.vmap(f, in_axes=0, out_axes=(0, 1))(
        {"x": x, "s": s})
    np.testing.assert_allclose(got["sum"], x.sum(axis=1) * s)
    np.testing.assert_allclose(got["const"], np.ones((3, 2)))
    np.testing.assert_allclose(twice, (x * 2).T)
    # out_axes None: a result the same for every example comes back once
    c = rj.vmap(lambda v: (v + 1, rnp.arange(3.0)), out_axes=(0, None))(s)
    np.testing.assert_allclose(c[1], np.arange(3.0))
    # axis_size: nothing mapped
    r = rj.vmap(lambda v: v * 2, in_axes=None, axis_size=4)(np.arange(3.0))
    np.testing.assert_allclose(r, np.tile(np.arange(3.0) * 2, (4, 1)))


def test_errors_name_what_is_wrong():
    x, y = np.ones((3, 2)), np.ones((4, 2))
    with pytest.raises(rj.ShapeError, match=r"argument 1 has size \w+ on axis 0, expected the batch size \w+ "
                       r"\(argument 0's axis 0\).*=4, \w+=3"):
        rj.vmap(lambda a, b: a + b)(x, y)
    with pytest.raises(ValueError, match=r"in_axes 2 for argument 0 of rank 2 is out of range"):
        rj.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match=r"in_axes has 1 entries for 2 arguments"):
        rj.vmap(lambda a, b: a, in_axes=(0,))(x, y)
    with pytest.raises(ValueError, match=r"out_axes is None for output 0, which differs"):
        rj.vmap(lambda a: a * 2, out_axes=None)(x)
    with pytest.raises(ValueError, match=r"no argument is mapped"):
        rj.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(NotImplementedError, match=r"vmap of nonzero"):
        rj.vmap(lambda a: rnp.nonzero(a > 0)[0])(x)


def test_jacobians_compile_once_for_every_size():
    """jacfwd/jacrev map over unit vectors with vmap: the size is symbolic."""
    f = lambda x: rnp.sin(x) * x.sum()
    for jac in (rj.jacfwd, rj.jacrev):
        jitted = rj.jit(jac(f))
        for n in (3, 5, 1, 11):
            x = np.linspace(0.1, 1.0, n)
            want = np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]
            np.testing.assert_allclose(jitted(x), want, rtol=1e-12, atol=1e-12)
        assert jitted.cache_info().compiles == 1, jac.__name__


@given(b=st.sampled_from([1, 2, 5]), n=st.sampled_from([1, 2, 3, 7]), seed=st.integers(0, 999))
@settings(max_examples=12, deadline=None)
def test_linalg_calls_are_one_call_on_the_batch_stack(b, n, seed):
    """linalg's library functions map over stacks of matrices, so vmap calls each once on
    the batch's stack (no per-example loop), batched operand or shared one alike."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((b, n, n)) + n * np.eye(n)
    rhs = rng.standard_normal((b, n, 2))

    def one(a, r):
        q, upper = rnp.linalg.qr(a)
        return (rnp.linalg.solve(a, r), rnp.linalg.det(a), rnp.linalg.eigvalsh(a + a.T),
                rnp.linalg.svd(a, compute_uv=False), q @ upper, rnp.linalg.inv(a))

    def one_np(a, r):
        q, upper = np.linalg.qr(a)
        return (np.linalg.solve(a, r), np.linalg.det(a), np.linalg.eigvalsh(a + a.T),
                np.linalg.svd(a, compute_uv=False), q @ upper, np.linalg.inv(a))

    for axes, args in (((0, 0), (a, rhs)), ((None, 0), (a[0], rhs))):
        f = rj.jit(rj.vmap(one, in_axes=axes))
        got = f(*args)
        for k in range(b):
            want = one_np(*[x if ax is None else x[k] for x, ax in zip(args, axes)])
            for g, w in zip(got, want):
                np.testing.assert_allclose(g[k], w, rtol=1e-9, atol=1e-9)
        text = f.lower(*args).as_text("optimized")
        assert "scan" not in text and text.count('call_library("linalg.solve"') == 1, text
