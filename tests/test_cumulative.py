"""cumsum, cumprod (function and method spellings) and diff against NumPy on every backend:
axis int / negative / None (flattened), dtype=, the result dtypes NumPy gives (ints
accumulate in int64, bools count), and one compile across sizes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, arrays, assert_same, check, shapes
from test_grad import numeric_grad

DTYPES = ["float32", "float64", "int32", "int64", "bool", "float16"]
PER_OP = settings(max_examples=max(5, settings().max_examples // 2))


def _tol(dtype, name):
    """Running sums and products in float32 round like NumPy's, step by step; float16's
    intermediate rounding may differ by an ulp per step."""
    d = np.dtype(dtype)
    if d == np.float16:
        return dict(rtol=2e-2, atol=2e-2)
    if d == np.float32:
        return dict(rtol=1e-5, atol=1e-5)
    return {}


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(data=st.data())
@PER_OP
def test_cumulative(name, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    lo, hi = (-1.5, 1.5) if name == "cumprod" else (-10, 10)
    x = data.draw(arrays(dtype, shape, lo, hi), label="x")
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    with np.errstate(all="ignore"):
        check(lambda a: getattr(rnp, name)(a, axis=axis),
              lambda a: getattr(np, name)(a, axis=axis), x, **_tol(dtype, name))
        check(lambda a: getattr(a, name)(axis=axis),
              lambda a: getattr(a, name)(axis=axis), x, eager=False, **_tol(dtype, name))


@pytest.mark.parametrize("name,src,want", [
    ("cumsum", "int32", "int64"), ("cumsum", "bool", "int64"), ("cumsum", "float32", "float32"),
    ("cumprod", "int8", "int64"), ("cumprod", "float16", "float16"),
])
def test_cumulative_result_dtype(name, src, want):
    x = (np.arange(12).reshape(3, 4) % 3).astype(src)
    for b in BACKENDS:
        got = rj.jit(lambda a: getattr(rnp, name)(a, axis=1), backend=b)(x)
        assert got.dtype == np.dtype(want)
        assert_same(got, getattr(np, name)(x, axis=1))
        got = rj.jit(lambda a: getattr(rnp, name)(a, axis=0, dtype="float64"), backend=b)(x)
        assert_same(got, getattr(np, name)(x, axis=0, dtype="float64"))


@given(data=st.data())
@PER_OP
def test_diff(data):
    dtype = data.draw(st.sampled_from(["float64", "int32", "bool"]), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dtype, shape), label="x")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    n = data.draw(st.integers(0, 3), label="n")
    check(lambda a: rnp.diff(a, n, axis=axis), lambda a: np.diff(a, n, axis=axis), x)


def test_cumsum_compiles_once_across_sizes():
    f = rj.jit(lambda x: rnp.cumsum(x, axis=0) + rnp.cumsum(x, axis=1))
    for n in (1, 2, 3, 17, 257, 4099):
        x = np.random.default_rng(n).standard_normal((n, 5))
        assert_same(f(x), np.cumsum(x, axis=0) + np.cumsum(x, axis=1))
    assert f.cache_info().compiles == 1


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="order must be a non-negative int"):
        rnp.diff(np.ones(3), -1)
    with pytest.raises(ValueError, match="at least one dimensional"):
        rnp.diff(np.float64(1.0))
    with pytest.raises(Exception, match="axis 2 is out of bounds"):
        rnp.cumsum(np.ones((2, 3)), axis=2)


@given(shape=st.sampled_from([(1,), (7,), (3, 5), (2, 1, 13)]), data=st.data(),
       op=st.sampled_from(["maximum", "minimum"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_running_extremum_gradient_matches_finite_differences(shape, data, op, seed):
    """cummax/cummin's rule: each output's cotangent goes to the element where the running
    extremum was last reached (distinct values: finite differences are exact there)."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(shape), rng.standard_normal(shape)
    f = lambda x: (getattr(rnp, op).accumulate(x, axis=axis) * w).sum()          # noqa: E731
    f_np = lambda x: (getattr(np, op).accumulate(x, axis=axis) * w).sum()        # noqa: E731
    want = numeric_grad(f_np, (x,), 0)
    np.testing.assert_allclose(rj.grad(f)(x), want, rtol=1e-6, atol=1e-8)


def test_running_extremum_gradient_of_ties_goes_to_the_later_element():
    x = np.array([1.0, 3.0, 3.0, 2.0, 5.0])
    g = rj.grad(lambda x: rnp.maximum.accumulate(x).sum())(x)
    np.testing.assert_array_equal(g, [1.0, 1.0, 2.0, 0.0, 1.0])     # every output's 1, once


@given(shape=st.sampled_from([(1,), (2,), (7,), (3, 5), (2, 1, 13), (31,)]), data=st.data(),
       zeros=st.integers(0, 2), seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_cumprod_gradient_and_jvp_match_finite_differences(shape, data, zeros, seed):
    """cumprod's rule runs the recurrence from the end (no division): zeros in x are exact.
    The product is multilinear in x, so central differences are exact up to rounding."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(seed)
    x, w, t = (rng.uniform(-1.5, 1.5, shape) for _ in range(3))
    x.reshape(-1)[rng.choice(x.size, min(zeros, x.size), replace=False)] = 0.0
    f = lambda x: (rnp.cumprod(x, axis=axis) * w).sum()          # noqa: E731
    f_np = lambda x: (np.cumprod(x, axis=axis) * w).sum()        # noqa: E731
    want = numeric_grad(f_np, (x,), 0)
    np.testing.assert_allclose(rj.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    _, tangent = rj.jit(lambda x, t: rj.jvp(f, (x,), (t,)))(x, t)
    np.testing.assert_allclose(tangent, (f_np(x + 1e-6 * t) - f_np(x - 1e-6 * t)) / 2e-6, rtol=1e-6, atol=1e-8)
