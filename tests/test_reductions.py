"""Property tests: reductions of relaxjax.numpy (and the Tracer methods) against NumPy.

Axis int / negative / tuple / None, keepdims, and the result dtype NumPy gives (sum of int32
is int64, mean of ints is float64, any/all are bool, argmax is int64).
"""
from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SIZES, arrays, assert_compiles_once, assert_same, check, shapes

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
PER_OP = settings(max_examples=max(5, settings().max_examples // 2))


class Red(NamedTuple):
    name: str
    rj_fn: Callable          # (x, axis, keepdims, **kw)
    np_fn: Callable
    dtypes: list
    multi_axis: bool = True  # accepts a tuple of axes
    extra: dict | None = None   # kw -> strategy


def _np(name):
    return lambda x, axis, keepdims, **kw: getattr(np, name)(x, axis=axis, keepdims=keepdims, **kw)


def _rj(name):
    return lambda x, axis, keepdims, **kw: getattr(rnp, name)(x, axis=axis, keepdims=keepdims, **kw)


def _method(name):
    return lambda x, axis, keepdims, **kw: getattr(x, name)(axis=axis, keepdims=keepdims, **kw)


REDUCTIONS = [
    Red("sum", _rj("sum"), _np("sum"), DTYPES),
    Red("prod", _rj("prod"), _np("prod"), DTYPES),
    Red("max", _rj("max"), _np("max"), DTYPES),
    Red("min", _rj("min"), _np("min"), DTYPES),
    Red("amax", _rj("amax"), _np("amax"), DTYPES),
    Red("amin", _rj("amin"), _np("amin"), DTYPES),
    Red("mean", _rj("mean"), _np("mean"), DTYPES),
    Red("var", _rj("var"), _np("var"), DTYPES, extra={"ddof": st.integers(0, 2)}),
    Red("std", _rj("std"), _np("std"), DTYPES, extra={"ddof": st.integers(0, 2)}),
    Red("any", _rj("any"), _np("any"), DTYPES),
    Red("all", _rj("all"), _np("all"), DTYPES),
    Red("argmax", _rj("argmax"), _np("argmax"), DTYPES, multi_axis=False),
    Red("argmin", _rj("argmin"), _np("argmin"), DTYPES, multi_axis=False),
    # Tracer methods (the NumPy oracle calls the ndarray method of the same name)
    Red("x.sum", _method("sum"), _method("sum"), DTYPES),
    Red("x.mean", _method("mean"), _method("mean"), DTYPES),
    Red("x.max", _method("max"), _method("max"), DTYPES),
    Red("x.min", _method("min"), _method("min"), DTYPES),
    Red("x.prod", _method("prod"), _method("prod"), DTYPES),
    Red("x.argmax", _method("argmax"), _method("argmax"), DTYPES, multi_axis=False),
    Red("x.argmin", _method("argmin"), _method("argmin"), DTYPES, multi_axis=False),
    Red("x.any", _method("any"), _method("any"), DTYPES),
    Red("x.all", _method("all"), _method("all"), DTYPES),
    Red("x.var", _method("var"), _method("var"), DTYPES, extra={"ddof": st.integers(0, 2)}),
    Red("x.std", _method("std"), _method("std"), DTYPES, extra={"ddof": st.integers(0, 2)}),
]


@st.composite
def axis_args(draw, ndim, multi=True):
    """None, an int (possibly negative) or a tuple of distinct axes (possibly negative/empty)."""
    choices = [st.none(), st.integers(-ndim, ndim - 1)]
    if multi:
        choices.append(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(
            lambda ax: tuple(a - ndim if i % 2 else a for i, a in enumerate(ax))))
    return draw(st.one_of(*choices))


def _tol(dtype, name, x=None):
    """Sums and products in float32 may round differently; variances of float32 doubly so.
    A float32 sum accumulated in order (per vector lane) is within n * eps * sum|x| of the
    exact one, NumPy's pairwise sum closer: large terms that cancel leave that much."""
    if np.dtype(dtype) == np.float32 and name.lstrip("x.") in ("sum", "mean", "var", "std", "prod"):
        bound = 0.0 if x is None else 1.2e-7 * x.size * float(np.abs(x.astype(np.float64)).sum())
        if name.lstrip("x.") == "mean" and x is not None and x.size:
            bound /= x.size
        return dict(rtol=1e-4, atol=max(1e-4, bound))
    return {}


@pytest.mark.parametrize("red", REDUCTIONS, ids=lambda r: r.name)
@given(data=st.data())
@PER_OP
def test_reduction(red, data):
    dtype = data.draw(st.sampled_from(red.dtypes), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    lo, hi = (-2, 2) if red.name.endswith("prod") else (-10, 10)
    x = data.draw(arrays(dtype, shape, lo, hi), label="x")
    axis = data.draw(axis_args(len(shape), red.multi_axis), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    kw = {k: data.draw(s, label=k) for k, s in (red.extra or {}).items()}
    rj_fn = lambda a: red.rj_fn(a, axis, keepdims, **kw)          # noqa: E731
    np_fn = lambda a: red.np_fn(a, axis, keepdims, **kw)          # noqa: E731
    with np.errstate(all="ignore"):      # var with ddof >= count: inf/nan, like NumPy
        check(rj_fn, np_fn, x, **_tol(dtype, red.name, x))


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "var", "std", "any", "all",
                                  "argmax", "argmin"])
@given(dtype=st.sampled_from(DTYPES), shape=shapes(1, 3), data=st.data())
@PER_OP
def test_reduction_defaults(name, dtype, shape, data):
    """No axis argument: reduce everything (function and method spellings)."""
    x = data.draw(arrays(dtype, shape, -3, 3))
    tol = _tol(dtype, name, x)
    check(lambda a: getattr(rnp, name)(a), getattr(np, name), x, **tol)
    check(lambda a: getattr(a, name)(), lambda a: getattr(a, name)(), x, **tol)


@pytest.mark.parametrize("name,src,want", [
    ("sum", "int32", "int64"), ("sum", "bool", "int64"), ("sum", "float32", "float32"),
    ("prod", "int32", "int64"), ("prod", "bool", "int64"),
    ("mean", "int32", "float64"), ("mean", "bool", "float64"), ("mean", "float32", "float32"),
    ("var", "int64", "float64"), ("std", "int32", "float64"), ("var", "float32", "float32"),
    ("max", "int32", "int32"), ("min", "bool", "bool"),
    ("any", "float32", "bool"), ("all", "int64", "bool"),
    ("argmax", "float32", "int64"), ("argmin", "int32", "int64"),
])
def test_reduction_result_dtype(name, src, want):
    x = np.arange(12).reshape(3, 4).astype(src)
    assert getattr(np, name)(x, axis=0).dtype == np.dtype(want)
    for b in BACKENDS:
        for axis in (None, 0, (0, 1)) if not name.startswith("arg") else (None, 1):
            got = rj.jit(lambda a: getattr(rnp, name)(a, axis=axis), backend=b)(x)
            assert_same(got, getattr(np, name)(x, axis=axis))
            assert got.dtype == np.dtype(want)


@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
@given(src=st.sampled_from(DTYPES), dst=st.sampled_from(["float32", "float64", "int64"]),
       shape=shapes(1, 2), data=st.data())
@settings(max_examples=10)
def test_reduction_dtype_argument(name, src, dst, shape, data):
    x = data.draw(arrays(src, shape, -3, 3))
    axis = data.draw(st.one_of(st.none(), st.just(-1)))
    check(lambda a: getattr(rnp, name)(a, axis=axis, dtype=dst),
          lambda a: getattr(np, name)(a, axis=axis, dtype=dst), x, **_tol(dst, name))


def test_nan_propagation():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]])
    for name in ("sum", "max", "min", "mean", "var", "std", "prod", "argmax", "argmin", "any", "all"):
        for axis in (None, 0, 1):
            with np.errstate(all="ignore"):
                check(lambda a: getattr(rnp, name)(a, axis=axis), lambda a: getattr(np, name)(a, axis=axis), x)


def test_argmax_first_occurrence():
    x = np.array([[3, 1, 3, 3], [0, 0, -1, -1]], np.int32)
    for name in ("argmax", "argmin"):
        for axis in (None, 0, 1, -1):
            for keepdims in (False, True):
                check(lambda a: getattr(rnp, name)(a, axis=axis, keepdims=keepdims),
                      lambda a: getattr(np, name)(a, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("ddof", [0, 1, 2, 3])
def test_var_ddof_at_least_count(ddof):
    """ddof >= count: NumPy divides by max(count - ddof, 0) (inf or nan, with a warning)."""
    x = np.array([[1.0, 2.0], [1.0, 1.0], [3.0, 5.0]])
    for axis in (None, 0, 1):
        with np.errstate(all="ignore"):
            check(lambda a: rnp.var(a, axis=axis, ddof=ddof), lambda a: np.var(a, axis=axis, ddof=ddof), x)
            check(lambda a: a.std(axis=axis, ddof=ddof), lambda a: a.std(axis=axis, ddof=ddof), x)


@pytest.mark.parametrize("axis", [5, -4, (0, 0), (0, 3)])
def test_bad_axis_raises(axis):
    x = np.ones((2, 3, 4))
    for name in ("sum", "mean", "max"):
        with pytest.raises(Exception):
            getattr(np, name)(x, axis=axis)
        with pytest.raises((ValueError, TypeError, IndexError)):
            rj.jit(lambda a: getattr(rnp, name)(a, axis=axis))(x)


@given(n=SIZES, m=SIZES)
@settings(max_examples=10)
def test_large_sizes(n, m):
    rng = np.random.default_rng(n * 1000 + m)
    x = rng.standard_normal((n, m))
    for name in ("sum", "mean", "var", "std", "max", "argmin"):
        check(lambda a: getattr(rnp, name)(a, axis=0), lambda a: getattr(np, name)(a, axis=0), x,
              rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("fn", [
    lambda x: rnp.sum(x, axis=0),
    lambda x: (rnp.mean(x, axis=-1, keepdims=True), rnp.var(x, axis=0, ddof=1)),
    lambda x: (x.max(axis=1), x.argmax(axis=0), rnp.std(x), x.any(axis=0)),
], ids=["sum", "mean_var", "max_argmax_std_any"])
def test_compiles_once_for_many_batch_sizes(fn):
    assert_compiles_once(fn, 6, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
def test_empty_reductions(shape):
    """Reductions with an identity give it over empty axes (mean/var: nan); max/argmax raise."""
    x = np.ones(shape)
    for name in ("sum", "prod", "mean", "var", "std", "any", "all"):
        for axis in [None] + list(range(len(shape))):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check(lambda a: getattr(rnp, name)(a, axis=axis), lambda a: getattr(np, name)(a, axis=axis), x)
    for name in ("max", "min", "argmax", "argmin"):
        zero = shape.index(0)
        with pytest.raises(ValueError):
            getattr(np, name)(x, axis=zero)
        with pytest.raises(rj.ShapeError):
            rj.jit(lambda a: getattr(rnp, name)(a, axis=zero))(x)


def test_numpy_integer_axis():
    x = np.arange(24.0).reshape(2, 3, 4)
    for ax in (np.int64(1), np.int32(-1)):
        check(lambda a: rnp.sum(a, axis=ax), lambda a: np.sum(a, axis=ax), x)
        check(lambda a: rnp.argmax(a, axis=ax), lambda a: np.argmax(a, axis=ax), x)


@pytest.mark.parametrize("fn", [lambda a: a.sum(0), lambda a: a.argmax(1), lambda a: a.mean(1),
                                lambda a: a.max(-1), lambda a: a.any(0), lambda a: rnp.sum(a, 0),
                                lambda a: a.sum((0, 1)), lambda a: a.std(0), lambda a: a.prod(1),
                                lambda a: a.min(0, keepdims=True), lambda a: a.var(1, ddof=1)],
                         ids=["sum0", "argmax1", "mean1", "max-1", "any0", "rnp.sum0", "sum01", "std0",
                              "prod1", "min_keepdims", "var_ddof"])
def test_methods_positional_axis(fn):
    x = np.arange(12.0).reshape(3, 4) - 5
    check(fn, fn, x)
