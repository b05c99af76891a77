"""NumPy programs run unchanged inside @jit: NumPy's own functions (np.sum, np.concatenate,
np.where, np.linalg.norm, ...) and ufunc methods (np.add.outer, np.maximum.reduce,
np.multiply.accumulate) on traced arrays dispatch to relaxjax.numpy (NEP 18 and NEP 13),
on every backend, against NumPy; what relaxjax.numpy lacks is an error naming it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SIZES, SMALL_SIZES, arrays, assert_same

PROGRAMS = {
    "sum/mean/max": lambda x: (np.sum(x, axis=0), np.mean(x), np.max(x, axis=1, keepdims=True)),
    "concatenate/stack": lambda x: (np.concatenate([x, 2 * x], axis=1), np.stack([x, x])),
    "where/clip": lambda x: (np.where(x > 0, x, 0.0), np.clip(x, -1.0, 1.0)),
    "cumsum/diff": lambda x: (np.cumsum(x, axis=1), np.diff(x, axis=0), np.cumprod(x[:, :2] / 8)),
    "reshape/transpose": lambda x: (np.reshape(x, (-1,)), np.transpose(x), np.swapaxes(x, 0, 1)),
    "dot/matmul/outer": lambda x: (np.dot(x, x.T), np.matmul(x.T, x), np.outer(x[0], x[-1])),
    "zeros_like/full_like": lambda x: (np.zeros_like(x) + x, np.full_like(x, 2.0) * x),
    "ufunc methods": lambda x: (np.add.outer(x[0], x[-1]), np.maximum.reduce(x),
                                np.multiply.accumulate(x / 8, axis=1), np.add.reduce(x, axis=None),
                                np.minimum.accumulate(x), np.less.outer(x[0], x[0])),
    "linalg.norm": lambda x: (np.linalg.norm(x), np.linalg.norm(x, axis=1)),
    "array methods": lambda x: (x.diagonal(), x.trace(), x.dot(x.T), x.copy() * 2, x.conj(),
                                x.cumprod(axis=1) / 4.0 ** x.shape[1], np.ptp(x, axis=0), np.conj(x)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
@given(n=SIZES, m=SMALL_SIZES, data=st.data())
@settings(max_examples=6, deadline=None)
def test_numpy_functions_on_traced_arrays(name, n, m, data):
    x = data.draw(arrays("float64", (n, m), -4, 4), label="x")
    fn = PROGRAMS[name]
    want = fn(x)
    for b in BACKENDS:
        assert_same(rj.jit(fn, backend=b)(x), want, rtol=1e-10, atol=1e-10)


def test_relaxjax_numpy_ufunc_methods_eagerly():
    a, b = np.arange(3.0), np.arange(4) % 2 == 0
    assert_same(rnp.add.outer(a, b), np.add.outer(a, b))
    assert_same(rnp.logical_or.reduce(b), np.logical_or.reduce(b))
    assert_same(rnp.add.accumulate(np.arange(5, dtype=np.int32)),
                np.add.accumulate(np.arange(5, dtype=np.int32)))


def test_what_is_missing_is_named():
    x = np.ones((2, 3))
    with pytest.raises(NotImplementedError, match="numpy.unique on traced arrays"):
        rj.jit(lambda x: np.unique(x))(x)
    with pytest.raises(NotImplementedError, match=r"numpy.subtract.accumulate on traced arrays"):
        rj.jit(lambda x: np.subtract.accumulate(x))(x)
    out = np.empty(3)
    with pytest.raises(TypeError, match=r"numpy.sum\(\.\.\., out=\.\.\.\) is not supported"):
        rj.jit(lambda x: np.sum(x, axis=0, out=out))(x)
