"""Products of transposed operands (``a @ b.T``, ``a.T @ b``, ``a.T @ b.T``, and batched
``swapaxes(-1, -2)``) run as one gemm reading the untransposed arrays through CBLAS's
transpose flags (``compile.blas_calls.gemm_call``): no program copies the transpose first.
NumPy in float64 is the oracle on every backend, over hypothesis-drawn sizes with 0, 1 and
primes, one compile per product for every size."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

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
    _agrees_with_numpy(*FORMS[form], m, k, n, dtype)


def _agrees_with_numpy(f, ash, bsh, m, k, n, dtype, traced=None):
    """``traced or f`` jitted on operands of shapes ``ash(m, k, n)``, ``bsh(m, k, n)`` gives
    NumPy's float64 result of ``f`` on every backend and leaves its operands as they were;
    returns the operands."""
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.uniform(-1, 1, ash(m, k, n)).astype(dtype)
    b = rng.uniform(-1, 1, bsh(m, k, n)).astype(dtype)
    keep = a.copy(), b.copy()
    want = f(a.astype(np.float64), b.astype(np.float64))
    # float32: the dot-product error bound, k * eps * sum |a||b| (|a|, |b| <= 1)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-5, atol=2e-7 * max(k, 1))
    for backend in BACKENDS:
        got = rj.jit(traced or f, backend=backend)(a, b)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)
    np.testing.assert_array_equal(a, keep[0])
    np.testing.assert_array_equal(b, keep[1])
    return a, b


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


# operands transposed with their batch axes moved too (ProductTransposes): (product, a shape,
# b shape, the gemm form, the copy left: the perm of the transpose the program still runs)
PERMUTED = {
    "einsum bqhd,bkhd->bhqk": (lambda q, k: np.einsum("bqhd,bkhd->bhqk", q, k),
                               lambda m, k, n: (2, m, 3, k), lambda m, k, n: (2, n, 3, k), "nt"),
    "heads first, keys swapped": (lambda q, k: np.swapaxes(q, 1, 2) @ np.swapaxes(np.swapaxes(k, 1, 2), -1, -2),
                                  lambda m, k, n: (2, m, 3, k), lambda m, k, n: (2, n, 3, k), "nt"),
    "3-d (1, 2, 0)": (lambda a, b: a @ np.transpose(b, (1, 2, 0)),
                      lambda m, k, n: (4, m, k), lambda m, k, n: (n, 4, k), "nt"),
    "left (0, 2, 3, 1)": (lambda a, b: np.transpose(a, (0, 2, 3, 1)) @ b,
                          lambda m, k, n: (2, k, 3, m), lambda m, k, n: (2, 3, k, n), "tn"),
}


@given(m=DIMS, k=DIMS, n=DIMS, form=st.sampled_from(sorted(PERMUTED)),
       dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=30, deadline=None)
def test_operands_transposed_with_their_batch_axes_read_rows_and_the_gemm_flag(m, k, n, form, dtype):
    """A transpose that moves batch axes and swaps the matrix axes (attention's keys stored
    (b, S, heads, hd): ``einsum("bqhd,bkhd->bhqk")``) becomes a copy that moves whole rows and
    the gemm's transpose flag, not a copy whose innermost axis is strided: NumPy's numbers
    on every backend, the flag in the optimized program."""
    f, ash, bsh, flag = PERMUTED[form]
    traced = {"einsum bqhd,bkhd->bhqk": lambda q, k: rj.numpy.einsum("bqhd,bkhd->bhqk", q, k)}.get(form)
    a, b = _agrees_with_numpy(f, ash, bsh, m, k, n, dtype, traced)
    text = rj.jit(traced or f).lower(a, b).as_text("optimized")
    assert f'gemm_{flag}"' in text, text


def test_a_permuted_transpose_returned_too_is_not_split():
    def f(a, b):
        bt = np.transpose(b, (1, 2, 0))
        return a @ bt, bt
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 3, 5)), rng.standard_normal((6, 4, 5))
    for backend in BACKENDS:
        got = rj.jit(f, backend=backend)(a, b)
        np.testing.assert_allclose(got[0], f(a, b)[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(got[1], f(a, b)[1])
    assert "gemm_nt" not in rj.jit(f).lower(a, b).as_text("optimized")


# operands the LLVM backend reads in place through a view (``blas_calls.rows_view``): their
# transpose keeps the last axis last; (product, a shape, b shape) with heads h = 3
_sw = np.swapaxes
VIEWS = {
    "scores, heads first": (lambda q, k: _sw(q, 1, 2) @ _sw(_sw(k, 1, 2), -1, -2),
                            lambda m, k, n: (2, m, 3, k), lambda m, k, n: (2, n, 3, k)),
    "values, heads first": (lambda p, v: p @ _sw(v, 1, 2),
                            lambda m, k, n: (2, 3, m, k), lambda m, k, n: (2, k, 3, n)),
    "left, batch moved": (lambda a, b: _sw(a, 0, 1) @ b, lambda m, k, n: (m, 4, k), lambda m, k, n: (4, k, n)),
    "left, one matrix right": (lambda a, w: _sw(a, 0, 1) @ w, lambda m, k, n: (m, 4, k), lambda m, k, n: (k, n)),
    "right broadcast": (lambda a, b: a @ _sw(b, 0, 1), lambda m, k, n: (1, m, k), lambda m, k, n: (k, 3, n)),
    "epilogue": (lambda a, b: np.tanh(_sw(a, 0, 1) @ b) * 0.5 + 1.0,
                 lambda m, k, n: (m, 4, k), lambda m, k, n: (4, k, n)),
    "left, batch moved and swapped": (lambda a, b: _sw(_sw(a, 0, 1), -1, -2) @ b,
                                      lambda m, k, n: (k, 4, m), lambda m, k, n: (4, k, n)),
}


@given(m=DIMS, k=DIMS, n=DIMS, form=st.sampled_from(sorted(VIEWS)),
       dtype=st.sampled_from(["float64", "float32"]))
@settings(max_examples=40, deadline=None)
# one column, one row: a matrix-vector product whose vector is a view's strided column
@example(m=5, k=7, n=1, form="values, heads first", dtype="float64")
@example(m=1, k=7, n=5, form="left, batch moved and swapped", dtype="float64")
@example(m=1, k=7, n=1, form="scores, heads first", dtype="float32")
def test_products_read_transposed_operands_in_place(m, k, n, form, dtype):
    """Operands transposed with their last axis kept last (heads moved before the sequence,
    batch axes moved) are read where they are stored -- each product's pointer and its rows'
    stride given to BLAS, the matrix-vector cases included -- on the LLVM backend, which
    says so in the optimized program (``views=``); NumPy's numbers on every backend."""
    f, ash, bsh = VIEWS[form]
    a, b = _agrees_with_numpy(f, ash, bsh, m, k, n, dtype)
    text = rj.jit(f, backend="llvm").lower(a, b).as_text("optimized")
    assert "views=" in text and "transpose" not in text.split("call_library")[0], text


def test_a_backend_without_strided_operands_copies_the_view():
    """The CUDA backend (run by its emulator) passes operands as arrays: the view is copied
    row by row (its own program), the product reads it through the flag, NumPy's numbers."""
    f, ash, bsh = VIEWS["scores, heads first"]
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(ash(5, 8, 7)), rng.standard_normal(bsh(5, 8, 7))
    j = rj.jit(f, backend="cuda-emulated")
    np.testing.assert_allclose(j(a, b), f(a, b), rtol=1e-12, atol=1e-12)
    text = j.lower(a, b).as_text("optimized")
    assert "views=" not in text and "gemm_nt" in text, text
