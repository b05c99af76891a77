"""A matrix product's epilogue run on its blocks (``backends/llvm/epilogue.py``): the
generated product calls the epilogue once per final block of C, the blocks covering C exactly
once (on one thread and two, K = 0 included); through ``jit``, the program after a generated
product (bias, activation, scaling, residual) runs on its blocks and gives NumPy's results on
every backend; programs that are not element-by-element maps of the product are left alone."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
import relaxjax.nn as nn
from relaxjax.backends.llvm import engine, epilogue, target

from helpers import BACKENDS
from test_gemm_generated import _product

pytestmark = pytest.mark.skipif("avx2" not in target.host_features() or "fma" not in target.host_features(),
                                reason="the generated product needs FMA vectors (AVX2 or AVX-512)")

_EPI = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [(2, 300, 700), (13, 64, 5000), (517, 70, 90), (100, 0, 33), (1, 5, 1)])
def test_the_epilogue_sees_every_element_once_after_it_is_final(threads, m, k, n):
    rng = np.random.default_rng(m + n)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    seen = np.zeros((m, n), np.int64)
    final = []

    def block(_, r0, r1, c0, c1):
        seen[r0:r1, c0:c1] += 1
        final.append(np.array_equal(c[r0:r1, c0:c1], (a[r0:r1].astype(np.float64) @ b[:, c0:c1]).astype(np.float32))
                     or np.allclose(c[r0:r1, c0:c1], a[r0:r1].astype(np.float64) @ b[:, c0:c1], rtol=1e-4, atol=1e-4))
    cb = _EPI(block)
    try:
        engine.set_num_threads(threads)
        for bits in [b_ for b_ in (256, 512) if b_ <= target.vector_bits()]:
            seen[:] = 0
            _product("rj_gemm_s_nn", bits)[1](1, 0, 0, 0, m, n, k, a.ctypes.data, max(k, 1), b.ctypes.data,
                                              n, c.ctypes.data, n, ctypes.cast(cb, ctypes.c_void_p), None)
            assert (seen == 1).all(), (bits, np.unique(seen))
            assert all(final)
    finally:
        engine.set_num_threads(0)


EPILOGUES = {
    "tanh(x @ w + b)": (lambda x, w, b, r: rnp.tanh(x @ w + b), lambda x, w, b, r: np.tanh(x @ w + b)),
    "gelu": (lambda x, w, b, r: nn.gelu(x @ w + b), None),
    "relu * 2 + residual": (lambda x, w, b, r: rnp.maximum(x @ w, 0.0) * 2.0 + r,
                            lambda x, w, b, r: np.maximum(x @ w, 0.0) * 2.0 + r),
    "x @ w.T-like (nt) + b": (lambda x, w, b, r: x @ rnp.swapaxes(rnp.swapaxes(w, 0, 1), 0, 1) + b,
                              lambda x, w, b, r: x @ w + b),
}


@given(m=st.one_of(st.sampled_from([2, 3, 13, 32]), st.integers(2, 32)), n=st.integers(65, 600),
       k=st.sampled_from([1, 7, 64, 333]), name=st.sampled_from(sorted(EPILOGUES)),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_products_with_epilogues_match_numpy(m, n, k, name, dtype, seed):
    fun, ref = EPILOGUES[name]
    rng = np.random.default_rng(seed)
    x, w = rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)
    b, r = rng.uniform(-1, 1, n).astype(dtype), rng.uniform(-1, 1, (m, n)).astype(dtype)
    args64 = [v.astype(np.float64) for v in (x, w, b, r)]
    want = ref(*args64) if ref is not None else rj.jit(fun, backend="numpy")(*args64)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=3e-6 * k)
    for backend in BACKENDS:
        got = rj.jit(fun, backend=backend)(x, w, b, r)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, **tol)


def _pairs(fun, *args):
    exe = rj.jit(fun).lower(*args).compile()._entry.executable
    return epilogue.epilogue_pairs(exe.segments, exe.fn, exe.memory_plan)


def test_which_programs_run_on_the_blocks():
    x, w, b = np.ones((16, 512), np.float32), np.ones((512, 2048), np.float32), np.ones(2048, np.float32)
    if engine.generated_products() and target.vector_bits() >= 512:
        assert "epidone" in rj.jit(lambda x, w, b: rnp.tanh(x @ w + b)).lower(x, w, b).as_text("llvm")
    generated = target.vector_bits() >= 512            # (else every product is BLAS's)
    assert len(_pairs(lambda x, w, b: rnp.tanh(x @ w + b), x, w, b)) == int(generated)
    # a product of known shape the rule never sends to the generated code (one row: a
    # gemv) gets no pair
    S = rj.ShapeDtypeStruct
    assert not _pairs(lambda x, w, b: rnp.tanh(x @ w + b), S((1, 512), "float32"), S((512, 2048), "float32"),
                      S((2048,), "float32"))
    # a reduction over the product's rows, a transposed read and a shifted read: not maps
    assert not _pairs(lambda x, w, b: (x @ w).sum(axis=1), x, w, b)
    assert not _pairs(lambda x, w, b: rnp.roll(x @ w, 1, axis=1), x, w, b)
    sq = np.ones((64, 64), np.float32)
    assert not _pairs(lambda x, w, b: x @ w + (x @ w).T, sq, sq, b)
