"""Gram products ``A @ A.T`` and ``A.T @ A`` run as BLAS syrk (``compile.blas_calls``), alone, with a
fused epilogue, inside ``np.cov`` and a correlation; NumPy is the oracle on every backend,
the printed program shows the syrk and no materialized transpose.  Products that only look
alike (``A @ B.T``, ``A @ A`` of a square A, batched ones) stay gemms."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS, SIZES, assert_same

DIMS = st.one_of(st.sampled_from([0, 1, 2, 3, 7, 13, 64]), st.integers(1, 90))
FORMS = {"nt": lambda a: a @ a.T, "tn": lambda a: a.T @ a,
         "nt_epilogue": lambda a: (a @ np.transpose(a)) * 0.5 + 1.0,
         "tn_epilogue": lambda a: np.maximum(np.swapaxes(a, 0, 1) @ a, 0.25)}


def _text(f, *args) -> str:
    c = rj.jit(f).lower(*args).compile()
    return c.as_text("optimized") + c.as_text("loops")


@given(m=DIMS, k=DIMS, form=st.sampled_from(sorted(FORMS)), dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=40, deadline=None)
def test_gram_products_are_syrk_and_agree_with_numpy(m, k, form, dtype):
    f = FORMS[form]
    a = np.random.default_rng(m * 100 + k).uniform(-1, 1, (m, k)).astype(dtype)
    want = f(a.astype(np.float64))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(a)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)
    text = _text(f, a)
    name = ("s" if dtype == "float32" else "d") + "syrk" + ("_tn" if form.startswith("tn") else "")
    assert f'"blas.{name}"' in text and "gemm" not in text, text
    assert "transpose" not in text, "the transpose is still computed:\n" + text


@given(n=SIZES, m=st.integers(2, 40))
@settings(max_examples=15, deadline=None)
def test_covariance_and_correlation_use_syrk(n, m):
    """``np.cov`` (NumPy's library version, covariance2) and polybench's correlation
    ``d.T @ d`` agree with NumPy; each runs one syrk."""
    data = np.random.default_rng(n).uniform(-1, 1, (n + 1, m))

    def corr(data):
        d = (data - np.mean(data, axis=0)) / np.std(data, axis=0)
        return d.T @ d / data.shape[0]
    for f, want in ((lambda x: np.cov(x.T), np.cov(data.T)), (corr, np.corrcoef(data.T))):
        for b in BACKENDS:
            assert_same(rj.jit(f, backend=b)(data), want, rtol=1e-9, atol=1e-9)
        assert "syrk" in _text(f, data)


@pytest.mark.parametrize("f, args", [
    (lambda a, b: a @ b.T, (np.ones((3, 4)), np.ones((5, 4)))),
    (lambda a: a @ a, (np.arange(9.0).reshape(3, 3),)),
    (lambda a: a @ np.swapaxes(a, -1, -2), (np.arange(24.0).reshape(2, 3, 4),)),
    (lambda a: a.astype(np.int64) @ a.astype(np.int64).T, (np.arange(12.0).reshape(3, 4),)),
])
def test_products_that_are_not_gram_products_stay_gemms(f, args):
    want = f(*args)
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(*args), want)
    assert "syrk" not in _text(f, *args)


def test_a_gram_product_does_not_change_its_operand():
    a = np.random.default_rng(0).uniform(-1, 1, (6, 4))
    keep = a.copy()
    for b in BACKENDS:
        rj.jit(lambda x: x.T @ x, backend=b)(a)
        np.testing.assert_array_equal(a, keep)


@given(m=DIMS, k=DIMS, form=st.sampled_from(["nt", "tn"]), dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=25, deadline=None)
def test_a_gram_product_read_after_its_fused_epilogue_is_whole(m, k, form, dtype):
    """The product is a result of its fused group (a reduction fused into it) and is read
    again by another program: what that program reads is the whole product, not syrk's
    triangle.  (The gradient of ``sum((a @ a.T) ** 2)`` was this program, and was wrong.)"""
    a = np.random.default_rng(m * 100 + k).uniform(-1, 1, (m, k)).astype(dtype)

    def f(a):
        c = FORMS[form](a)
        return c, np.sum(c * c), c * 2.0 + c.T

    c64 = FORMS[form](a.astype(np.float64))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    for b in BACKENDS:
        c, s, d = rj.jit(f, backend=b)(a)
        np.testing.assert_allclose(c, c64, **tol)
        np.testing.assert_allclose(s, np.sum(c64 * c64), rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
        np.testing.assert_allclose(d, c64 * 2.0 + c64.T, **tol)
    n = a.shape[0] if form == "nt" else a.shape[1]
    if n > 1:
        g = rj.grad(lambda a: np.sum(FORMS[form](a) ** 2))(a.astype(np.float64))
        a64 = a.astype(np.float64)
        want = 4 * c64 @ a64 if form == "nt" else 4 * a64 @ c64
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9)
