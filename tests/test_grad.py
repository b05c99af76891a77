"""Reverse mode (``rj.grad``, ``rj.value_and_grad``, ``rj.vjp``): every primitive with a rule
against central finite differences of NumPy in float64, over hypothesis-drawn shapes (1,
primes) and broadcasting, on every backend; one compile for every shape; clear errors for
what has no rule yet."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS, SMALL_SIZES

DIMS = st.one_of(st.sampled_from([1, 2, 3, 5, 7]), st.integers(1, 9))


def numeric_grad(f, args, k, eps=1e-6):
    """Central differences of scalar ``f`` in argument ``k`` (NumPy, float64)."""
    x = np.array(args[k], dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        a, b = list(args), list(args)
        a[k], b[k] = hi, lo
        g[i] = (f(*a) - f(*b)) / (2 * eps)
    return g


def check(f, args, argnums=(0,), rtol=1e-5, atol=1e-6):
    for b in BACKENDS:
        got = rj.jit(rj.grad(f, argnums=argnums), backend=b)(*args)
        for k, g in zip(argnums, got):
            want = numeric_grad(f, args, k)
            assert g.shape == np.shape(args[k]) and g.dtype == np.float64
            np.testing.assert_allclose(g, want, rtol=rtol, atol=atol * (1 + np.abs(want).max()),
                                       err_msg=f"backend {b}, argument {k}")


UNARY = {
    "exp": (np.exp, -2, 2), "expm1": (np.expm1, -2, 2), "exp2": (np.exp2, -2, 2),
    "log": (np.log, 0.5, 3), "log2": (np.log2, 0.5, 3), "log10": (np.log10, 0.5, 3),
    "log1p": (np.log1p, -0.5, 3), "sqrt": (np.sqrt, 0.5, 3), "sin": (np.sin, -3, 3),
    "cos": (np.cos, -3, 3), "tan": (np.tan, -1, 1), "tanh": (np.tanh, -2, 2),
    "sinh": (np.sinh, -2, 2), "cosh": (np.cosh, -2, 2), "arcsin": (np.arcsin, -0.8, 0.8),
    "arccos": (np.arccos, -0.8, 0.8), "arctan": (np.arctan, -2, 2),
    "arcsinh": (np.arcsinh, -2, 2), "arccosh": (np.arccosh, 1.5, 3),
    "arctanh": (np.arctanh, -0.8, 0.8), "reciprocal": (np.reciprocal, 0.5, 2),
    "abs": (np.abs, 0.2, 2), "negative": (np.negative, -2, 2), "square": (np.square, -2, 2),
    "floor": (np.floor, 0.2, 0.8),
}


def unary_input(name: str, shape: tuple, rng) -> np.ndarray:
    """An input inside UNARY[name]'s domain (both signs for abs, none at its kink)."""
    _, lo, hi = UNARY[name]
    return rng.uniform(lo, hi, shape) * (np.sign(rng.uniform(-1, 1, shape)) if name == "abs" else 1)


def binary_shapes(m: int, n: int, layout: str) -> tuple:
    """Operand shapes broadcasting as ``layout`` says: same, a column against a row, a scalar."""
    return {"same": ((m, n), (m, n)), "col_row": ((m, 1), (n,)), "scalar": ((m, n), ())}[layout]


def distinct_values(shape: tuple, rng) -> np.ndarray:
    """Float values of ``shape`` with no two equal (no ties for max, min, sort)."""
    return rng.permutation(np.arange(np.prod(shape), dtype=float)).reshape(shape) / 7.0


@given(shape=st.lists(DIMS, min_size=0, max_size=3).map(tuple), name=st.sampled_from(sorted(UNARY)),
       seed=st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_unary_functions(shape, name, seed):
    fn = UNARY[name][0]
    rng = np.random.default_rng(seed)
    x = unary_input(name, shape, rng)
    r = rng.standard_normal(shape)
    check(lambda x, r: np.sum(fn(x) * r), (x, r))


BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "power": np.power, "maximum": np.maximum, "minimum": np.minimum, "arctan2": np.arctan2}


@given(m=DIMS, n=DIMS, name=st.sampled_from(sorted(BINARY)), layout=st.sampled_from(["same", "col_row", "scalar"]),
       seed=st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_binary_functions_with_broadcasting(m, n, name, layout, seed):
    rng = np.random.default_rng(seed)
    sx, sy = binary_shapes(m, n, layout)
    x, y = rng.uniform(0.5, 2, sx), rng.uniform(0.5, 2, sy)
    fn = BINARY[name]
    r = rng.standard_normal(np.broadcast_shapes(sx, sy))
    check(lambda x, y, r: np.sum(fn(x, y) * r), (x, y, r), argnums=(0, 1))


@given(shape=st.lists(DIMS, min_size=1, max_size=3).map(tuple), data=st.data(),
       name=st.sampled_from(["sum", "mean", "max", "min"]))
@settings(max_examples=30, deadline=None)
def test_reductions(shape, data, name):
    axis = data.draw(st.sampled_from([None] + list(range(len(shape)))))
    rng = np.random.default_rng(sum(shape))
    x = distinct_values(shape, rng)
    fn = getattr(np, name)
    r = rng.standard_normal(np.shape(fn(x, axis=axis)))
    check(lambda x, r: np.sum(fn(x, axis=axis) * r), (x, r))


@given(m=SMALL_SIZES, n=SMALL_SIZES, axis=st.sampled_from([0, 1]), seed=st.integers(0, 99))
@settings(max_examples=20, deadline=None)
def test_cumsum_and_strided_slices(m, n, axis, seed):
    rng = np.random.default_rng(seed)
    x, r = rng.standard_normal((m, n)), rng.standard_normal((m, n))

    def f(x, r):
        c = np.cumsum(np.sin(x) * r, axis=axis)
        return np.sum(c * c) + np.sum(x[::2, ::-3] ** 2) + np.sum(x[1::3] * 2.0)
    check(f, (x, r), argnums=(0, 1))


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), data=st.data(),
       zeros=st.integers(0, 2))
@settings(max_examples=25, deadline=None)
def test_prod_with_zeros(shape, data, zeros):
    """Each element's cotangent is the product of the others: no division, so zeros (one
    or two in a reduced line) take the right one."""
    axes = data.draw(st.sampled_from([None] + list(range(len(shape))) +
                                     ([(0, len(shape) - 1)] if len(shape) > 1 else [])))
    rng = np.random.default_rng(sum(shape) + zeros)
    x = rng.uniform(0.5, 1.5, shape)
    x.flat[rng.choice(x.size, min(zeros, x.size), replace=False)] = 0.0
    r = rng.standard_normal(np.shape(np.prod(x, axis=axes)))
    check(lambda x, r: np.sum(np.prod(x, axis=axes) * r), (x, r))


@given(shape=st.lists(DIMS, min_size=1, max_size=3).map(tuple), data=st.data())
@settings(max_examples=20, deadline=None)
def test_sort(shape, data):
    axis = data.draw(st.sampled_from(list(range(len(shape)))))
    rng = np.random.default_rng(sum(shape))
    x = distinct_values(shape, rng)
    w = rng.standard_normal(shape)
    check(lambda x, w: np.sum(np.sort(x, axis=axis) * w), (x, w))


def test_a_tied_maximum_shares_its_cotangent():
    g = rj.grad(lambda x: np.max(x))(np.array([1.0, 3.0, 3.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5, 0.0])


@given(m=SMALL_SIZES, n=SMALL_SIZES, seed=st.integers(0, 99))
@settings(max_examples=20, deadline=None)
def test_layout_ops(m, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))

    def f(x):
        t = x.T.reshape(n * m)
        parts = np.concatenate([x[: max(m - 1, 1)], x[-1:] * 2.0], axis=0)
        padded = np.pad(x, ((1, 2), (0, 1)))
        b = np.broadcast_to(x[:, :1], (m, n))
        return np.sum(np.sin(t)) + np.sum(parts ** 2) + np.sum(padded * 3.0) + np.sum(b * x)
    check(f, (x,))


@given(m=SMALL_SIZES, k=SMALL_SIZES, n=SMALL_SIZES,
       batch=st.sampled_from([((), ()), ((3,), ()), ((2, 1), (4, 1, 1))]))
@settings(max_examples=25, deadline=None)
def test_matmul_with_batch_broadcasting(m, k, n, batch):
    rng = np.random.default_rng(m + 10 * k + 100 * n)
    a, b = rng.standard_normal(batch[0] + (m, k)), rng.standard_normal(batch[1] + (k, n))
    r = rng.standard_normal(np.broadcast_shapes(batch[0], batch[1]) + (m, n))
    check(lambda a, b, r: np.sum((a @ b) * r), (a, b, r), argnums=(0, 1))


def test_where_and_dtype_conversion():
    x = np.linspace(-2, 2, 8)                  # (0, the branch point, left out)
    check(lambda x: np.sum(np.where(x > 0, x ** 2, np.exp(x))), (x,))
    for b in BACKENDS:                         # through float32 and back: cos(x) to float32's precision
        g = rj.jit(rj.grad(lambda x: np.sum(np.sin(x).astype(np.float32)).astype(np.float64)),
                   backend=b)(x)
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, np.cos(x), rtol=1e-6)


def test_constants_built_inside_need_no_rule():
    """A mask from an arange and a constant from dims take no cotangent."""
    x = np.linspace(0.5, 2.0, 7)
    check(lambda x: np.sum(np.where(np.arange(x.shape[0]) % 2 == 0, x ** 3, np.cos(x))) / x.shape[0], (x,))


def mlp_loss(params, x, y):
    h = np.tanh(x @ params["w1"] + params["b1"])
    p = h @ params["w2"] + params["b2"]
    return np.mean((p - y) ** 2)


def test_mlp_gradient_pytrees_and_one_compile_for_every_batch_size():
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((4, 8)), "b1": rng.standard_normal(8),
              "w2": rng.standard_normal((8, 3)), "b2": rng.standard_normal(3)}
    vg = rj.value_and_grad(mlp_loss)
    for batch in (5, 1, 2, 3, 7, 64, 257):
        x, y = rng.standard_normal((batch, 4)), rng.standard_normal((batch, 3))
        value, grads = vg(params, x, y)
        np.testing.assert_allclose(value, mlp_loss(params, x, y), rtol=1e-12)
        for name in params:
            def f(p, name=name):
                return mlp_loss({**params, name: p}, x, y)
            np.testing.assert_allclose(grads[name], numeric_grad(f, (params[name],), 0),
                                       rtol=1e-5, atol=1e-7)
    jitted = rj.jit(rj.grad(mlp_loss))
    for batch in (5, 1, 2, 3, 7, 64, 257):
        jitted(params, rng.standard_normal((batch, 4)), rng.standard_normal((batch, 3)))
    assert jitted.cache_info().compiles == 1


def test_aux_argnums_and_vjp():
    x, y = np.arange(1.0, 4.0), np.arange(2.0, 5.0)
    (value, aux), g = rj.value_and_grad(lambda x, y: (np.sum(x * y), x + 1), argnums=(0, 1),
                                        has_aux=True)(x, y)
    np.testing.assert_allclose(value, np.sum(x * y))
    np.testing.assert_allclose(aux, x + 1)
    np.testing.assert_allclose(g[0], y)
    np.testing.assert_allclose(g[1], x)

    @rj.jit
    def pullback(x, ct):
        out, fn = rj.vjp(lambda v: np.sin(v) * 2.0, x)
        return out, fn(ct)[0]
    out, gx = pullback(x, y)
    np.testing.assert_allclose(out, np.sin(x) * 2)
    np.testing.assert_allclose(gx, 2 * np.cos(x) * y)


def test_what_has_no_rule_says_so():
    x = np.arange(1.0, 5.0)
    with pytest.raises(TypeError, match="float scalar"):
        rj.grad(lambda x: x * 2.0)(x)
    with pytest.raises(TypeError, match="only floating-point inputs"):
        rj.grad(lambda i: np.sum(i * 2.0))(np.arange(4))
    with pytest.raises(NotImplementedError, match="complex values is not implemented.*imag"):
        rj.grad(lambda x: np.sum(np.imag(x * 1j)))(x)       # not a zero gradient: an error
    with pytest.raises(TypeError, match="inside a trace"):
        rj.vjp(np.sin, x)
