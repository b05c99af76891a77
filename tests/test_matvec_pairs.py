"""Two matrix-vector products of one matrix (``A @ x`` and ``y @ A``, as in BiCG and mvt) run
as one pass over ``A`` (``compile.matvec_pairs``): NumPy is the oracle on every backend over
drawn shapes (1, primes, sizes that are not multiples of the row blocks), the printed program
shows the pair and no gemm; products that depend on each other stay apart."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS, SIZES

FORMS = {
    "mvt": lambda x1, x2, y1, y2, A: (x1 + A @ y1, x2 + y2 @ A),
    "bicg": lambda x1, x2, y1, y2, A: (y2 @ A, A @ y1),
    "between": lambda x1, x2, y1, y2, A: (np.tanh(A @ y1) * 2.0, (x2 - 1.0) + y2 @ A),
}


@given(m=SIZES, n=SIZES, form=st.sampled_from(sorted(FORMS)), dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=30, deadline=None)
def test_matvec_pairs_read_the_matrix_once_and_agree_with_numpy(m, n, form, dtype):
    rng = np.random.default_rng(m * 1000 + n)
    x1, y2 = rng.uniform(-1, 1, m).astype(dtype), rng.uniform(-1, 1, m).astype(dtype)
    x2, y1 = rng.uniform(-1, 1, n).astype(dtype), rng.uniform(-1, 1, n).astype(dtype)
    A = rng.uniform(-1, 1, (m, n)).astype(dtype)
    f = FORMS[form]
    want = f(*(v.astype(np.float64) for v in (x1, x2, y1, y2, A)))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=2e-4, atol=2e-4 * (1 + max(m, n) ** 0.5))
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(x1, x2, y1, y2, A)
        for g, w in zip(got, want):
            assert g.dtype == np.dtype(dtype) and g.shape == w.shape
            np.testing.assert_allclose(g.astype(np.float64), w, **tol)
    text = rj.jit(f).lower(x1, x2, y1, y2, A).compile().as_text("optimized")
    if m > 1 and n > 1:
        assert "matvec_pair" in text and "gemm" not in text, text


@given(m=SIZES, n=SIZES, dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=25, deadline=None)
def test_a_product_fed_back_reads_the_matrix_once_and_agrees_with_numpy(m, n, dtype):
    """polybench's atax, ``(A @ x) @ A`` = A^T A x: one chained pass over A's rows."""
    rng = np.random.default_rng(m * 1000 + n)
    A, x = rng.uniform(-1, 1, (m, n)).astype(dtype), rng.uniform(-1, 1, n).astype(dtype)
    f = lambda A, x: (A @ x) @ A        # noqa: E731
    want = f(A.astype(np.float64), x.astype(np.float64))
    tol = dict(rtol=1e-10, atol=1e-10 * (1 + m)) if dtype == "float64" else \
        dict(rtol=2e-4, atol=2e-4 * (1 + m))
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(A, x)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)
    text = rj.jit(f).lower(A, x).compile().as_text("optimized")
    if m > 1 and n > 1:
        assert "matvec_chain" in text and "gemm" not in text, text


def test_a_product_transformed_before_it_is_fed_back_stays_two_products():
    f = lambda A, x: np.tanh(A @ x) @ A        # noqa: E731
    A = np.random.default_rng(1).uniform(-1, 1, (7, 5))
    x = np.arange(5.0)
    np.testing.assert_allclose(rj.jit(f)(A, x), f(A, x), rtol=1e-12)
    text = rj.jit(f).lower(A, x).compile().as_text("optimized")
    assert "matvec_chain" not in text and text.count("gemm") == 2, text
