"""Complex matrix products run as one complex gemm (BLAS zgemm / cgemm) on the packed
(re, im) layout, and layout ops and sums between them stay packed; a transpose moving runs of
axes runs over the runs merged.  NumPy is the oracle on every backend over drawn shapes (1,
0, primes, broadcast batches) and permutations."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS, SMALL_SIZES


def _cplx(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@given(m=SMALL_SIZES, k=st.one_of(st.just(0), SMALL_SIZES), n=SMALL_SIZES,
       batch=st.sampled_from([((), ()), ((3,), ()), ((2, 1), (5, 1, 1)), ((4,), (4,))]),
       dtype=st.sampled_from(["complex128", "complex64"]))
@settings(max_examples=30, deadline=None)
def test_complex_matmul_is_one_complex_gemm_and_agrees_with_numpy(m, k, n, batch, dtype):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    ba, bb = batch
    a = _cplx(rng, ba + (m, k), dtype)
    b = _cplx(rng, bb + (k, n), dtype)
    want = a.astype(np.complex128) @ b.astype(np.complex128)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "complex128" else dict(rtol=1e-4, atol=1e-4 * (1 + k))
    for be in BACKENDS:
        got = rj.jit(lambda x, y: x @ y, backend=be)(a, b)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol)
    text = rj.jit(lambda x, y: x @ y).lower(a, b).compile().as_text("optimized")
    letter = "z" if dtype == "complex128" else "c"
    assert f"blas.{letter}gemm" in text and "dgemm" not in text and "sgemm" not in text, text


def test_layout_ops_between_complex_products_stay_packed():
    """A transpose, a reshape, a slice, a sum and an add between products: no part is
    split out and packed again (no concatenate in the program)."""
    def f(a, b, c, d):
        x = np.transpose(a, (1, 0, 2)).reshape(a.shape[1], -1) @ b
        return (x.T[1:] @ c).sum(axis=0) + d
    rng = np.random.default_rng(7)
    a, b = _cplx(rng, (3, 4, 5), "complex128"), _cplx(rng, (15, 6), "complex128")
    c, d = _cplx(rng, (4, 2), "complex128"), _cplx(rng, (2,), "complex128")
    for be in BACKENDS:
        np.testing.assert_allclose(rj.jit(f, backend=be)(a, b, c, d), f(a, b, c, d), rtol=1e-12)
    text = rj.jit(f).lower(a, b, c, d).compile().as_text("optimized")
    assert text.count("blas.zgemm") == 2 and "concatenate" not in text, text


@given(shape=st.lists(SMALL_SIZES, min_size=2, max_size=5).map(tuple), data=st.data())
@settings(max_examples=40, deadline=None)
def test_transposes_agree_with_numpy(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    for be in BACKENDS:
        np.testing.assert_array_equal(rj.jit(lambda v: np.transpose(v, perm), backend=be)(x),
                                      np.transpose(x, perm))


def test_a_transpose_of_runs_moves_the_runs():
    """(x0, x1, x2, x3, x4) -> (x2, x3, x4, x0, x1) is a 2-D transpose of (x0 x1, x2 x3 x4)."""
    x = np.arange(2 * 3 * 4 * 5 * 6.0).reshape(2, 3, 4, 5, 6)
    f = rj.jit(lambda v: np.transpose(v, (2, 3, 4, 0, 1)))
    np.testing.assert_array_equal(f(x), np.transpose(x, (2, 3, 4, 0, 1)))
    text = f.lower(x).compile().as_text("optimized")
    assert "f64[v0 * v1, v2 * v3 * v4] = reshape" in text, text
