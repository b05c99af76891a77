"""Forward mode (``rj.jvp``) and ``rj.stop_gradient``: tangents against central finite
differences of NumPy in float64 along the tangent, over hypothesis-drawn shapes (1,
primes) and broadcasting, on every backend; pytrees, ``has_aux``, integer outputs; one
compile for every shape; precise errors for tangents that do not fit their primals."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS, SMALL_SIZES
from test_grad import BINARY, DIMS, UNARY, binary_shapes, distinct_values, unary_input


def directional(f, primals, tangents, eps=1e-6):
    """(f(p + eps t) - f(p - eps t)) / 2 eps, NumPy in float64."""
    hi = [np.asarray(p, np.float64) + eps * np.asarray(t) for p, t in zip(primals, tangents)]
    lo = [np.asarray(p, np.float64) - eps * np.asarray(t) for p, t in zip(primals, tangents)]
    return (np.asarray(f(*hi)) - np.asarray(f(*lo))) / (2 * eps)


def check(f, primals, tangents, rtol=1e-5, atol=1e-6):
    want_out = f(*primals)
    want = directional(f, primals, tangents)
    for b in BACKENDS:
        out, tan = rj.jit(lambda p, t: rj.jvp(f, p, t), backend=b)(tuple(primals), tuple(tangents))
        np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12, err_msg=f"backend {b}: value")
        assert tan.shape == np.shape(want) and tan.dtype == np.float64
        np.testing.assert_allclose(tan, want, rtol=rtol, atol=atol * (1 + np.abs(want).max()),
                                   err_msg=f"backend {b}: tangent")


@given(shape=st.lists(DIMS, min_size=0, max_size=3).map(tuple), name=st.sampled_from(sorted(UNARY)),
       seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None)
def test_unary_functions(shape, name, seed):
    rng = np.random.default_rng(seed)
    x = unary_input(name, shape, rng)
    check(UNARY[name][0], (x,), (rng.standard_normal(shape),))


@given(m=DIMS, n=DIMS, name=st.sampled_from(sorted(BINARY)), layout=st.sampled_from(["same", "col_row", "scalar"]),
       seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None)
def test_binary_functions_with_broadcasting(m, n, name, layout, seed):
    rng = np.random.default_rng(seed)
    sx, sy = binary_shapes(m, n, layout)
    x, y = rng.uniform(0.5, 2, sx), rng.uniform(0.5, 2, sy)
    check(BINARY[name], (x, y), (rng.standard_normal(sx), rng.standard_normal(sy)))


@given(shape=st.lists(DIMS, min_size=1, max_size=3).map(tuple), data=st.data(),
       name=st.sampled_from(["sum", "mean", "max", "min"]))
@settings(max_examples=20, deadline=None)
def test_reductions(shape, data, name):
    axis = data.draw(st.sampled_from([None] + list(range(len(shape)))))
    rng = np.random.default_rng(sum(shape))
    x = distinct_values(shape, rng)
    check(lambda x: getattr(np, name)(x, axis=axis), (x,), (rng.standard_normal(shape),))


@given(m=SMALL_SIZES, k=SMALL_SIZES, n=SMALL_SIZES, seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_mlp_layer_and_layout_ops(m, k, n, seed):
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal(n)

    def f(x, w, b):
        h = np.tanh(x @ w + b)
        return np.concatenate([h.T.reshape(n * m), np.pad(x, ((1, 0), (0, 2))).ravel() ** 2])
    check(f, (x, w, b), tuple(rng.standard_normal(np.shape(a)) for a in (x, w, b)))


def test_pytrees_aux_and_integer_outputs():
    rng = np.random.default_rng(0)
    p = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    t = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    x = rng.standard_normal((5, 3))

    def f(p):
        y = x @ p["w"] + p["b"]
        return (np.sin(y), np.argmax(y, axis=1)), np.sum(y)

    (out, idx), (tan, itan), aux = rj.jvp(f, (p,), (t,), has_aux=True)
    want = directional(lambda w, b: np.sin(x @ w + b), (p["w"], p["b"]), (t["w"], t["b"]))
    np.testing.assert_allclose(tan, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(idx, np.argmax(x @ p["w"] + p["b"], axis=1))
    assert itan.dtype == idx.dtype and not itan.any()        # integers have zero tangents
    np.testing.assert_allclose(aux, np.sum(x @ p["w"] + p["b"]))


def test_one_compile_for_every_shape():
    f = rj.jit(lambda x, t: rj.jvp(lambda x: np.exp(x).sum(axis=1) * x[:, 0], (x,), (t,)))
    for n in (5, 1, 2, 3, 7, 64, 257):
        x = np.linspace(-1, 1, n * 3).reshape(n, 3)
        t = np.ones_like(x)
        out, tan = f(x, t)
        np.testing.assert_allclose(tan, directional(lambda x: np.exp(x).sum(axis=1) * x[:, 0], (x,), (t,)),
                                   rtol=1e-6, atol=1e-8)
    assert f.cache_info().compiles == 1


def test_jvp_of_a_gradient_is_a_hessian_vector_product():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4))
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    g = rj.grad(lambda x: np.sum(np.tanh(a @ x) ** 2))
    _, hv = rj.jvp(g, (x,), (v,))
    want = directional(lambda x: 2 * a.T @ (np.tanh(a @ x) * (1 - np.tanh(a @ x) ** 2)), (x,), (v,))
    np.testing.assert_allclose(hv, want, rtol=1e-5, atol=1e-7)


def test_stop_gradient():
    x = np.linspace(0.5, 2, 6)
    for b in BACKENDS:
        g = rj.jit(rj.grad(lambda x: np.sum(x * rj.stop_gradient(x))), backend=b)(x)
        np.testing.assert_allclose(g, x)                           # not 2 x
        _, tan = rj.jit(lambda x, t: rj.jvp(lambda x: x * rj.stop_gradient(np.exp(x)), (x,), (t,)),
                        backend=b)(x, np.ones_like(x))
        np.testing.assert_allclose(tan, np.exp(x))                 # not exp(x) (1 + x)
    tree = {"a": x, "b": (x, None)}
    assert rj.stop_gradient(tree)["a"] is x                        # outside a trace: as it is


def test_tangents_that_do_not_fit_their_primals():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        rj.jvp(lambda x, y: x * y, (x, x), (x,))
    with pytest.raises(ValueError, match="tangent 0 has type f32"):
        rj.jvp(np.sin, (x,), (x.astype(np.float32),))
    with pytest.raises(rj.ShapeError, match="tangent 0 axis 1"):
        rj.jvp(np.sin, (x,), (np.ones((3, 5)),))
    with pytest.raises(ValueError, match="structure"):
        rj.jvp(lambda p: p["a"], ({"a": x},), ({"b": x},))


# ---------------------------------------------------------------------------------------
# custom_vjp
# ---------------------------------------------------------------------------------------

def _scaled_sum(x, y, out):               # a library implementation: out = 2 x + y
    out[...] = 2.0 * x + y


rj.register_library("test_jvp.scaled_sum", cpu=_scaled_sum)


@rj.custom_vjp
def scaled_sum(x, y):
    return rj.call_library("test_jvp.scaled_sum", x, y, out=rj.ShapeDtypeStruct(x.shape, x.dtype))


def _scaled_sum_fwd(x, y):
    return scaled_sum(x, y), None


def _scaled_sum_bwd(res, g):
    return 2.0 * g, g


scaled_sum.defvjp(_scaled_sum_fwd, _scaled_sum_bwd)


@pytest.mark.parametrize("n", [1, 2, 7, 31])
def test_custom_vjp_makes_a_library_call_differentiable(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n), rng.standard_normal(n)

    def loss(x, y):
        return np.sum(np.tanh(scaled_sum(x * 1.5, y)))
    f_np = lambda x, y: np.sum(np.tanh(2.0 * (x * 1.5) + y))
    for b in BACKENDS:
        gx, gy = rj.jit(rj.grad(loss, argnums=(0, 1)), backend=b)(x, y)
        np.testing.assert_allclose(gx, directional_grad(f_np, (x, y), 0), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gy, directional_grad(f_np, (x, y), 1), rtol=1e-5, atol=1e-7)
    _, tan = rj.jvp(lambda x: scaled_sum(x, y), (x,), (np.ones(n),))   # through bwd, transposed
    np.testing.assert_allclose(tan, 2.0 * np.ones(n))
    np.testing.assert_allclose(scaled_sum(x, y), 2.0 * x + y)             # outside a trace: as written


def directional_grad(f, args, k, eps=1e-6):
    x = np.asarray(args[k], np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = list(args), list(args)
        hi[k], lo[k] = x.copy(), x.copy()
        hi[k][i] += eps
        lo[k][i] -= eps
        g[i] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


def test_custom_vjp_rule_is_the_one_used_with_pytrees_and_nondiff_args():
    def clip_gradient(lo, hi, x):
        return x

    f = rj.custom_vjp(clip_gradient, nondiff_argnums=(0, 1))
    f.defvjp(lambda lo, hi, x: (x, None), lambda lo, hi, res, g: (np.clip(g, lo, hi),))
    x = np.linspace(-1, 1, 5)
    g = rj.grad(lambda x: np.sum(f(-0.5, 0.5, x) * np.array([3.0, -2.0, 0.1, 0.4, -0.2])))(x)
    np.testing.assert_allclose(g, [0.5, -0.5, 0.1, 0.4, -0.2])     # the rule's clipping shows

    @rj.custom_vjp
    def both(p):
        return {"s": np.sin(p["a"]), "c": np.cos(p["b"])}
    both.defvjp(lambda p: (both(p), p),
                lambda p, g: ({"a": np.cos(p["a"]) * g["s"], "b": -np.sin(p["b"]) * g["c"]},))
    p = {"a": np.linspace(0, 1, 4), "b": np.linspace(1, 2, 4)}
    g = rj.grad(lambda p: np.sum(both(p)["s"] * 2.0 + both(p)["c"]))(p)
    np.testing.assert_allclose(g["a"], 2.0 * np.cos(p["a"]))
    np.testing.assert_allclose(g["b"], -np.sin(p["b"]))


def test_custom_vjp_errors():
    @rj.custom_vjp
    def f(x):
        return np.sin(x)
    x = np.ones(3)
    with pytest.raises(TypeError, match="defvjp"):
        rj.grad(lambda x: np.sum(f(x)))(x)
    f.defvjp(lambda x: (f(x), x), lambda x, g: g)                  # not a tuple
    with pytest.raises(TypeError, match="tuple of 1 cotangents"):
        rj.grad(lambda x: np.sum(f(x)))(x)
    f.defvjp(lambda x: f(x), lambda x, g: (g,))                      # no residuals
    with pytest.raises(TypeError, match="pair"):
        rj.grad(lambda x: np.sum(f(x)))(x)
    f.defvjp(lambda x: (f(x), x), lambda x, g: (np.sum(g),))         # a scalar for a vector
    with pytest.raises(ValueError, match=r"cotangent 0 has shape \(\); the argument has"):
        rj.grad(lambda x: np.sum(f(x)))(x)


# ---------------------------------------------------------------------------------------
# jacfwd / jacrev (small, concrete sizes)
# ---------------------------------------------------------------------------------------

@given(m=st.integers(1, 4), n=st.integers(1, 3), k=st.integers(1, 4), seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_jacobians_against_finite_differences(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m))
    x = rng.standard_normal((m, n))
    f = lambda x: np.sum(np.tanh(a @ x) * x[0], axis=1)           # (m, n) -> (k,)
    eps = 1e-6
    want = np.zeros((k, m, n))
    for idx in np.ndindex(m, n):
        e = np.zeros((m, n))
        e[idx] = eps
        want[(slice(None),) + idx] = (f(x + e) - f(x - e)) / (2 * eps)
    for b in BACKENDS:
        for jac in (rj.jacrev, rj.jacfwd):
            got = rj.jit(jac(f), backend=b)(x)
            assert got.shape == (k, m, n)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=f"{jac.__name__} on {b}")


def test_hessian_is_jacfwd_of_grad():
    x = np.linspace(0.2, 1.1, 4)
    f = lambda x: np.sum(np.sin(x) * x[0] + x ** 3)
    h = rj.jacfwd(rj.grad(f))(x)
    want = np.diag(-np.sin(x) * x[0] + 6 * x)
    want[0, :] += np.cos(x)
    want[:, 0] += np.cos(x)               # so d2/dx0^2 has 2 cos x0 - x0 sin x0 + 6 x0
    np.testing.assert_allclose(h, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
