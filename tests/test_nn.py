"""Property tests: relaxjax.nn against float64 NumPy (and SciPy where available) formulas."""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.nn as rnn
import relaxjax.numpy as rnp
from helpers import SIZES, arrays, assert_compiles_once, assert_same, check, shapes

try:
    from scipy.special import logsumexp as sp_logsumexp
except ImportError:  # pragma: no cover
    sp_logsumexp = None

FLOATS = ["float32", "float64"]
_erf = np.vectorize(math.erf, otypes=[np.float64])


# ----- float64 oracles; the result is cast back to the input dtype -----------------------

def _f64(fn):
    def oracle(x, *args, **kw):
        with np.errstate(all="ignore"):
            out = fn(np.asarray(x, np.float64), *args, **kw)
        return np.asarray(out).astype(np.asarray(x).dtype)
    return oracle


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def np_gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_logsumexp(x, axis=None, keepdims=False):
    if sp_logsumexp is not None:
        return sp_logsumexp(x, axis=axis, keepdims=keepdims)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def np_softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    return x - np_logsumexp(x, axis=axis, keepdims=True)


def np_layer_norm(x, gamma=None, beta=None, axis=-1, eps=1e-5):
    y = (x - x.mean(axis=axis, keepdims=True)) / np.sqrt(x.var(axis=axis, keepdims=True) + eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def np_rms_norm(x, gamma=None, axis=-1, eps=1e-6):
    y = x / np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)
    return y if gamma is None else y * gamma


def _norm_tol(x, axis=-1, eps=1e-5, gamma=None):
    """Tolerance for layer norm against a float64 oracle: x - mean(x) carries rounding error of
    order eps(dtype) * max|x|, which 1/sqrt(var + eps) amplifies when rows are nearly constant."""
    x64 = np.asarray(x, np.float64)
    base = _tol(x.dtype)
    if x64.size == 0:
        return base
    var = float(x64.var(axis=axis).min())
    g = float(np.max(np.abs(gamma))) if gamma is not None and np.size(gamma) else 1.0
    cond = 32 * np.finfo(x.dtype).eps * float(np.max(np.abs(x64))) * g / np.sqrt(var + eps)
    return dict(rtol=base["rtol"], atol=base["atol"] + cond)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-10, atol=1e-12)


class Act(NamedTuple):
    name: str
    rj_fn: Callable
    np_fn: Callable


ACTIVATIONS = [
    Act("relu", rnn.relu, lambda x: np.maximum(x, 0)),
    Act("sigmoid", rnn.sigmoid, _f64(np_sigmoid)),
    Act("silu", rnn.silu, _f64(lambda x: x * np_sigmoid(x))),
    Act("swish", rnn.swish, _f64(lambda x: x * np_sigmoid(x))),
    Act("gelu_tanh", lambda x: rnn.gelu(x, approximate=True), _f64(np_gelu_tanh)),
    Act("gelu_default", lambda x: rnn.gelu(x), _f64(np_gelu_tanh)),
    Act("gelu_erf", lambda x: rnn.gelu(x, approximate=False), _f64(np_gelu_erf)),
]


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
@given(dtype=st.sampled_from(FLOATS), shape=shapes(1, 3), data=st.data())
def test_activation(act, dtype, shape, data):
    x = data.draw(arrays(dtype, shape, -30, 30), label="x")
    check(act.rj_fn, act.np_fn, x, **_tol(dtype))


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_extremes(act, dtype):
    """Large |x|: no NaN from overflow; inf and nan inputs behave like the formula."""
    x = np.array([-1e4, -100.0, -30.0, -1.0, -0.0, 0.0, 1e-8, 1.0, 30.0, 100.0, 1e4], dtype)
    with np.errstate(all="ignore"):
        check(act.rj_fn, act.np_fn, x, **_tol(dtype))
    y = np.array([np.inf, -np.inf, np.nan], dtype)
    with np.errstate(all="ignore"):
        want = act.np_fn(y)
    got = rj.jit(act.rj_fn)(y)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_activation_int_input():
    """relu keeps ints; the float activations promote ints like NumPy's float functions."""
    i = np.arange(-3, 4, dtype=np.int32)
    check(rnn.relu, lambda x: np.maximum(x, 0), i)
    assert rj.jit(rnn.sigmoid)(i).dtype == np.float64
    assert rj.jit(lambda x: rnn.gelu(x, approximate=False))(i).dtype == np.float64


@st.composite
def array_and_axis(draw, dtypes=FLOATS, lo=-20, hi=20, min_dims=1):
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    shape = draw(shapes(min_dims, 3), label="shape")
    x = draw(arrays(dtype, shape, lo, hi), label="x")
    axis = draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    return x, axis


@given(xa=array_and_axis())
def test_softmax(xa):
    x, axis = xa
    check(lambda a: rnn.softmax(a, axis=axis), _f64(lambda a: np_softmax(a, axis)), x, **_tol(x.dtype))
    out = rj.jit(lambda a: rnn.softmax(a, axis=axis))(x)
    np.testing.assert_allclose(out.sum(axis=axis), 1.0, rtol=1e-5)


@given(xa=array_and_axis())
def test_log_softmax(xa):
    x, axis = xa
    check(lambda a: rnn.log_softmax(a, axis=axis), _f64(lambda a: np_log_softmax(a, axis)), x,
          **_tol(x.dtype))


def test_softmax_default_axis_and_large_logits():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e4, 0.0, 1e4]])
    check(rnn.softmax, _f64(np_softmax), x)
    check(rnn.log_softmax, _f64(np_log_softmax), x)
    check(lambda a: rnn.softmax(a, axis=0), _f64(lambda a: np_softmax(a, 0)), x)


@given(data=st.data())
def test_logsumexp(data):
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dtype, shape, -50, 50), label="x")
    nd = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1),
                               st.lists(st.integers(-nd, nd - 1), min_size=1, unique_by=lambda a: a % nd).map(tuple)),
                     label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    check(lambda a: rnn.logsumexp(a, axis=axis, keepdims=keepdims),
          _f64(lambda a: np_logsumexp(a, axis=axis, keepdims=keepdims)), x, **_tol(dtype))


def test_logsumexp_infinities():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 0.0], [1e308, 1e308]])
    with np.errstate(all="ignore"):
        check(lambda a: rnn.logsumexp(a, axis=1), lambda a: np_logsumexp(a, axis=1), x)
        check(lambda a: rnn.logsumexp(a, axis=-1, keepdims=True),
              lambda a: np_logsumexp(a, axis=-1, keepdims=True), x)


@given(data=st.data())
def test_layer_norm(data):
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dtype, shape, -10, 10), label="x")
    which = data.draw(st.sampled_from(["none", "gamma", "both"]), label="affine")
    eps = data.draw(st.sampled_from([1e-5, 1e-3]), label="eps")
    gamma = data.draw(arrays(dtype, shape[-1:], -2, 2), label="gamma")
    beta = data.draw(arrays(dtype, shape[-1:], -2, 2), label="beta")
    tol = _norm_tol(x, eps=eps, gamma=gamma if which != "none" else None)
    if which == "none":
        check(lambda a: rnn.layer_norm(a, eps=eps), _f64(lambda a: np_layer_norm(a, eps=eps)), x, **tol)
    elif which == "gamma":
        check(lambda a, g: rnn.layer_norm(a, g, eps=eps),
              _f64(lambda a, g: np_layer_norm(a, g, eps=eps)), x, gamma, **tol)
    else:
        check(lambda a, g, b: rnn.layer_norm(a, g, b, eps=eps),
              _f64(lambda a, g, b: np_layer_norm(a, g, b, eps=eps)), x, gamma, beta, **tol)
    # well-conditioned rows: the float32 result also matches a float64 oracle
    if dtype == "float32" and shape[-1] > 1:
        x64 = x.astype(np.float64) + np.linspace(-5, 5, shape[-1])
        x32 = x64.astype(np.float32)
        check(lambda a: rnn.layer_norm(a, eps=eps), _f64(lambda a: np_layer_norm(a, eps=eps)), x32,
              rtol=1e-4, atol=1e-4)


@given(xa=array_and_axis(min_dims=2))
@settings(max_examples=15)
def test_layer_norm_axis(xa):
    x, axis = xa
    check(lambda a: rnn.layer_norm(a, axis=axis),
          _f64(lambda a: np_layer_norm(a, axis=axis)), x, **_norm_tol(x, axis=axis))


@given(data=st.data())
def test_rms_norm(data):
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dtype, shape, -10, 10), label="x")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    check(lambda a: rnn.rms_norm(a, axis=axis), _f64(lambda a: np_rms_norm(a, axis=axis)), x,
          **_tol(dtype))
    gshape = tuple(1 if i != axis % len(shape) else d for i, d in enumerate(shape))
    gamma = data.draw(arrays(dtype, gshape, -2, 2), label="gamma")
    check(lambda a, g: rnn.rms_norm(a, g, axis=axis),
          lambda a, g: _f64(lambda a: np_rms_norm(a, g.astype(np.float64), axis=axis))(a), x, gamma,
          **_tol(dtype))


@given(n=SIZES, d=SIZES)
@settings(max_examples=10)
def test_large_rows(n, d):
    rng = np.random.default_rng(n * 1000 + d)
    x = rng.standard_normal((n, d)).astype(np.float32) * 5
    tol = _tol(np.float32)
    check(rnn.softmax, _f64(np_softmax), x, **tol)
    check(lambda a: rnn.layer_norm(a), _f64(np_layer_norm), x, rtol=1e-4, atol=1e-4)
    check(lambda a: rnn.logsumexp(a, axis=-1), _f64(lambda a: np_logsumexp(a, axis=-1)), x, **tol)


@pytest.mark.parametrize("fn", [
    lambda x: rnn.softmax(x),
    lambda x: rnn.layer_norm(x) + rnn.gelu(x, approximate=False),
    lambda x: rnn.logsumexp(rnn.silu(x), axis=-1),
], ids=["softmax", "layer_norm_gelu", "logsumexp_silu"])
def test_compiles_once_for_many_batch_sizes(fn):
    assert_compiles_once(fn, 12, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_against_eager_numpy_for_drawn_signature_shapes(dtype):
    """relaxjax.testing.check_against: layer_norm and rms_norm with a symbolic signature
    (rows n, features d, gamma/beta of d) on every backend vs. the same code run on NumPy."""
    from relaxjax.testing import check_against
    n, d = rj.dims("n d")
    sig = [rj.ShapeDtypeStruct((n, d), dtype), rj.ShapeDtypeStruct((d,), dtype),
           rj.ShapeDtypeStruct((d,), dtype)]
    check_against(lambda x, g, b: rnn.layer_norm(x, g, b), shapes=sig, backend="all", explicit=True,
                  max_examples=10)
    check_against(lambda x, g, b: rnn.rms_norm(x, g) + b, shapes=sig, backend="all", explicit=True,
                  max_examples=10)
