"""Products of transposed operands (``a @ b.T``, ``a.T @ b``, ``a.T @ b.T``, and batched
``swapaxes(-1, -2)``) run as one gemm reading the untransposed arrays through CBLAS's
transpose flags (``compile.blas_calls.gemm_call``): no program copies the transpose first.
NumPy in float64 is the oracle on every backend, over hypothesis-drawn sizes with 0, 1 and
primes, one compile per product for every size."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj

from helpers import BACKENDS

DIMS = st.one_of(st.sampled_from([0, 1, 2, 3, 7, 13, 64]), st.integers(1, 70))
T = lambda x: np.swapaxes(x, -1, -2)            # noqa: E731
FORMS = {                                       # name -> (product, a stored shape, b stored shape)
    "nt": (lambda a, b: a @ b.T, lambda m, k, n: (m, k), lambda m, k, n: (n, k)),
    "tn": (lambda a, b: a.T @ b, lambda m, k, n: (k, m), lambda m, k, n: (k, n)),
    "tt": (lambda a, b: a.T @ b.T, lambda m, k, n: (k, m), lambda m, k, n: (n, k)),
    "nt_epilogue": (lambda a, b: np.tanh(a @ b.T) * 0.5 + 1.0, lambda m, k, n: (m, k),
                    lambda m, k, n: (n, k)),
    "batched_nt": (lambda a, b: a @ T(b), lambda m, k, n: (3, m, k), lambda m, k, n: (3, n, k)),
    "batched_tn_broadcast": (lambda a, b: T(a) @ b, lambda m, k, n: (2, 1, k, m),
                             lambda m, k, n: (3, k, n)),
    "batched_nt_matrix": (lambda a, b: a @ b.T, lambda m, k, n: (2, m, k), lambda m, k, n: (n, k)),
}


def _text(f, *args) -> str:
    c = rj.jit(f).lower(*args).compile()
    return c.as_text("optimized")


@given(m=DIMS, k=DIMS, n=DIMS, form=st.sampled_from(sorted(FORMS)),
       dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=60, deadline=None)
def test_transposed_products_agree_with_numpy(m, k, n, form, dtype):
    f, ash, bsh = FORMS[form]
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.uniform(-1, 1, ash(m, k, n)).astype(dtype)
    b = rng.uniform(-1, 1, bsh(m, k, n)).astype(dtype)
    keep = a.copy(), b.copy()
    want = f(a.astype(np.float64), b.astype(np.float64))
    # float32: the dot-product error bound, k * eps * sum |a||b| (|a|, |b| <= 1)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-5, atol=2e-7 * max(k, 1))
    for backend in BACKENDS:
        got = rj.jit(f, backend=backend)(a, b)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)
    np.testing.assert_array_equal(a, keep[0])
    np.testing.assert_array_equal(b, keep[1])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_transposed_operand_is_read_through_the_gemm_flag(form):
    f, ash, bsh = FORMS[form]
    a, b = np.ones(ash(5, 4, 3)), np.ones(bsh(5, 4, 3))
    text = _text(f, a, b)
    name = form.split("_")[-1] if form.startswith("batched") else form[:2]
    name = {"broadcast": "tn", "matrix": "nt"}.get(name, name)
    assert f'"blas.dgemm_{name}"' in text, text
    assert "transpose" not in text, "the transpose is still computed:\n" + text


def test_one_compile_serves_every_size():
    f = rj.jit(lambda q, k: q @ k.T)
    for s in (1, 2, 7, 64, 129):
        q = np.random.default_rng(s).standard_normal((s, 8))
        np.testing.assert_allclose(f(q, q[::-1].copy()), q @ q[::-1].T, rtol=1e-12, atol=1e-12)
    assert f.cache_info().compiles == 1


def test_a_transpose_with_other_readers_is_still_computed():
    """The transpose stays where something else reads it (fused with that reader, the
    product reads the computed one) and both results agree with NumPy."""
    def f(a, b):
        bt = b.T
        return a @ bt, bt + 1.0
    a, b = np.arange(12.0).reshape(3, 4), np.arange(20.0).reshape(5, 4)
    for backend in BACKENDS:
        got = rj.jit(f, backend=backend)(a, b)
        np.testing.assert_allclose(got[0], a @ b.T)
        np.testing.assert_allclose(got[1], b.T + 1.0)
