"""diagonal, diag, trace, roll, cov and corrcoef against NumPy on every backend, over
hypothesis-drawn shapes (1, primes, larger) and offsets, with NumPy's result dtypes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import SMALL_SIZES, arrays, check

PER_OP = settings(max_examples=8, deadline=None)
OFFSETS = st.integers(-4, 4)


@given(shape=st.lists(SMALL_SIZES, min_size=2, max_size=3).map(tuple), k=OFFSETS,
       dtype=st.sampled_from(["float64", "int32", "bool"]), data=st.data())
@PER_OP
def test_diagonal_and_trace(shape, k, dtype, data):
    x = data.draw(arrays(dtype, shape), label="x")
    ax1, ax2 = data.draw(st.sampled_from([(0, 1), (-1, -2), (0, -1)]), label="axes")
    check(lambda a: rnp.diagonal(a, k, ax1, ax2), lambda a: np.diagonal(a, k, ax1, ax2), x)
    check(lambda a: rnp.trace(a, k, ax1, ax2), lambda a: np.trace(a, k, ax1, ax2), x)


@given(n=SMALL_SIZES, m=SMALL_SIZES, k=OFFSETS, data=st.data())
@PER_OP
def test_diag_both_ways(n, m, k, data):
    v = data.draw(arrays("float32", (n,)), label="v")
    x = data.draw(arrays("int64", (n, m)), label="x")
    check(lambda a: rnp.diag(a, k), lambda a: np.diag(a, k), v)
    check(lambda a: rnp.diag(a, k), lambda a: np.diag(a, k), x)


@given(shape=st.lists(SMALL_SIZES, min_size=1, max_size=3).map(tuple),
       shift=st.integers(-50, 50), data=st.data())
@PER_OP
def test_roll(shape, shift, data):
    x = data.draw(arrays("float64", shape), label="x")
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    check(lambda a: rnp.roll(a, shift, axis), lambda a: np.roll(a, shift, axis), x)
    if len(shape) >= 2:
        check(lambda a: rnp.roll(a, (shift, 1), (0, -1)), lambda a: np.roll(a, (shift, 1), (0, -1)), x)


@given(vars_=SMALL_SIZES, obs=SMALL_SIZES, dtype=st.sampled_from(["float64", "float32", "int32"]),
       rowvar=st.booleans(), ddof=st.sampled_from([None, 0, 1, 2]), data=st.data())
@PER_OP
def test_cov_and_corrcoef(vars_, obs, dtype, rowvar, ddof, data):
    x = data.draw(arrays(dtype, (vars_, obs), -5, 5), label="x")
    tol = dict(rtol=1e-9, atol=1e-9)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")      # NumPy warns where ddof >= observations
        check(lambda a: rnp.cov(a, rowvar=rowvar, ddof=ddof),
              lambda a: np.cov(a, rowvar=rowvar, ddof=ddof), x, **tol)
        check(lambda a: rnp.cov(a[0], a[-1]), lambda a: np.cov(a[0], a[-1]), x, **tol)
        # no constant variable: its correlation is 0/0, whose rounding depends on the
        # summation order (NumPy's pairwise mean may leave a tiny variance, giving 1.0)
        ramp = np.arange(vars_ * obs, dtype=np.float64).reshape(vars_, obs) * 0.37
        y = x.astype(np.float64) + (ramp if rowvar else ramp.T.reshape(vars_, obs))
        check(lambda a: rnp.corrcoef(a, rowvar=rowvar), lambda a: np.corrcoef(a, rowvar=rowvar),
              y, **tol)


def test_one_compile_for_every_size():
    f = rj.jit(lambda x: (rnp.trace(x), rnp.roll(x, 3, axis=0), rnp.cov(x)))
    for n in (2, 3, 17, 256):
        x = np.random.default_rng(n).standard_normal((n, n + 1))
        got = f(x)
        np.testing.assert_allclose(got[0], np.trace(x))
        np.testing.assert_array_equal(got[1], np.roll(x, 3, axis=0))
        np.testing.assert_allclose(got[2], np.cov(x), rtol=1e-10, atol=1e-12)
    assert f.cache_info().compiles == 1


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="at least two dimensions"):
        rnp.diagonal(np.ones(3))
    with pytest.raises(ValueError, match="cannot be the same"):
        rnp.diagonal(np.ones((2, 2)), 0, 1, 1)
    with pytest.raises(ValueError, match="1- or 2-d"):
        rnp.diag(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="same length"):
        rnp.roll(np.ones((2, 2)), (1, 2), 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mkn", [(5, 7, 1), (1, 7, 5), (1, 1, 1), (3, 0, 1), (1, 0, 4), (6, 3, 2), (257, 13, 1)])
def test_matrix_vector_products_and_empty_contractions(dtype, mkn):
    """One column or one row: a BLAS gemv on the CPU (not a gemm of that shape); K == 0
    still writes zeros."""
    M, K, N = mkn
    rng = np.random.default_rng(M * 100 + K * 10 + N)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    x, y = rng.standard_normal(K).astype(dtype), rng.standard_normal(M).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for backend in rj.backends.available_backends():
        f = rj.jit(lambda a, b, x, y: (a @ b, a @ x, y @ a), backend=backend)
        for got, want in zip(f(a, b, x, y), (a @ b, a @ x, y @ a)):
            np.testing.assert_allclose(got, want, **tol)
    text = rj.jit(lambda a, x: a @ x).lower(a, x).as_text("llvm")
    assert "gemv" in text


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 1, 7), (2, 3, 6, 5)])
def test_batched_times_matrix_is_one_gemm(shape):
    """(..., M, K) @ (K, N) flattens its leading dims into the rows of one gemm."""
    rng = np.random.default_rng(len(shape))
    t, w = rng.standard_normal(shape), rng.standard_normal((shape[-1], 3))
    for backend in rj.backends.available_backends():
        np.testing.assert_allclose(rj.jit(lambda t, w: t @ w, backend=backend)(t, w), t @ w, rtol=1e-12, atol=1e-12)
    text = rj.jit(lambda t, w: t @ w).lower(t, w).as_text("llvm")
    assert "gbody" not in text            # no loop of gemms over the batch
