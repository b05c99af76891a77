"""The attention library call (``nn.attention_*``: ``dot_product_attention`` without bias
or mask) against a float64 NumPy reference, at lengths around the kernel's query and key
blocks (96; 128 or 64) and its row-by-row limit (8), head sizes 1 to 130, grouped-query
heads, causal masking, float32 and float64, on every backend; its gradient against central
finite differences; no keys; one compile for every pair of lengths."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn

from helpers import BACKENDS
from test_attention import reference

# lengths at the blocks' edges (1, the row-by-row limit 8, 9, the query block 96, the key
# blocks 64 and 128), primes and larger
LENGTHS = st.sampled_from([1, 2, 7, 8, 9, 31, 63, 64, 65, 95, 96, 97, 127, 128, 129, 193, 257, 300])


@given(batch=st.sampled_from([(), (1,), (2,)]), t=LENGTHS, s=LENGTHS,
       heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
       h=st.sampled_from([1, 3, 16, 64, 80, 130]), causal=st.booleans(),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 99))
@settings(max_examples=30, deadline=None)
def test_against_numpy(batch, t, s, heads, h, causal, dtype, seed):
    rng = np.random.default_rng(seed)
    n, kv = heads
    q = rng.standard_normal(batch + (t, n, h))
    k, v = rng.standard_normal(batch + (s, kv, h)), rng.standard_normal(batch + (s, kv, h))
    want = reference(q, k, v, is_causal=causal)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    # float32: the dot products' error bound (about h * eps of the terms' magnitudes)
    tol = 1e-10 if dtype == "float64" else 4e-6 * np.sqrt(h) + 2e-6
    for b in BACKENDS:
        f = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=causal), backend=b)
        got = np.asarray(f(q, k, v))
        assert got.dtype == np.dtype(dtype) and got.shape == q.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"backend {b}")


@pytest.mark.parametrize("causal", [False, True])
def test_value_head_size_of_its_own(causal):
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((200, 4, 24)), rng.standard_normal((150, 2, 24))
    v = rng.standard_normal((150, 2, 40))
    for b in BACKENDS:
        got = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=causal), backend=b)(q, k, v)
        np.testing.assert_allclose(got, reference(q, k, v, is_causal=causal), rtol=1e-10, atol=1e-12)


def test_no_keys_gives_zeros():
    q, k, v = np.ones((5, 2, 8)), np.ones((0, 2, 8)), np.ones((0, 2, 8))
    for b in BACKENDS:
        got = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v), backend=b)(q, k, v)
        assert got.shape == (5, 2, 8) and not np.any(got)


def test_scores_are_never_formed():
    f = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))
    q = np.ones((300, 2, 16), np.float32)
    text = f.lower(q, q, q).as_text("optimized")
    assert 'call_library("nn.attention_causal_f32"' in text
    assert "matmul" not in text and "exp" not in text


@pytest.mark.parametrize("causal", [False, True])
def test_gradient_against_finite_differences(causal):
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((11, 2, 5)), rng.standard_normal((13, 1, 5))
    v, w = rng.standard_normal((13, 1, 5)), rng.standard_normal((11, 2, 5))

    def loss(q, k, v):
        return (nn.dot_product_attention(q, k, v, is_causal=causal) * w).sum()
    grads = rj.grad(loss, argnums=(0, 1, 2))(q, k, v)
    value = rj.jit(loss)
    eps = 1e-6
    for i, x in enumerate((q, k, v)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            args = [q, k, v]
            up, down = x.copy(), x.copy()
            up[idx] += eps
            down[idx] -= eps
            args[i] = up
            f1 = float(value(*args))
            args[i] = down
            num[idx] = (f1 - float(value(*args))) / (2 * eps)
        np.testing.assert_allclose(grads[i], num, rtol=1e-6, atol=1e-7, err_msg=f"argument {i}")


def test_one_compile_for_every_pair_of_lengths_and_batch():
    f = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v))
    rng = np.random.default_rng(0)
    for b, t, s in ((1, 1, 1), (2, 100, 300), (3, 9, 1), (1, 257, 97)):
        q = rng.standard_normal((b, t, 2, 16)).astype(np.float32)
        k, v = (rng.standard_normal((b, s, 2, 16)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(f(q, k, v), reference(q.astype(float), k.astype(float), v.astype(float)),
                                   rtol=2e-5, atol=2e-5)
    assert f.cache_info().compiles == 1


def test_layouts_that_do_not_fit():
    q = np.ones((2, 5, 2, 8))
    with pytest.raises(rj.ShapeError, match="batch axis 0 of query and key"):
        nn.dot_product_attention(q, np.ones((3, 5, 2, 8)), np.ones((3, 5, 2, 8)))
    with pytest.raises(rj.ShapeError, match="head size"):
        nn.dot_product_attention(q, np.ones((2, 5, 2, 4)), np.ones((2, 5, 2, 4)))
    with pytest.raises(rj.ShapeError, match="sequence length"):
        nn.dot_product_attention(q, np.ones((2, 5, 2, 8)), np.ones((2, 6, 2, 8)))


@pytest.mark.parametrize("bits", [256, 128])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
def test_narrower_vector_widths(bits, dtype, causal):
    """The kernel as AVX2 and SSE hosts get it (this host runs their instructions too):
    other micro-tiles and the exponent-bits ``exp``; called through the library ABI."""
    import ctypes
    from relaxjax.backends.llvm import attention
    from relaxjax.backends.llvm.engine import CompiledModule, prepare_process
    from relaxjax.library import NATIVE_SIGNATURE
    prepare_process()
    letter = "s" if dtype == "float32" else "d"
    module = CompiledModule(attention.attention_text(letter, causal, bits), [])
    kernel = NATIVE_SIGNATURE(module.address(attention.symbol(letter, causal)))
    rng = np.random.default_rng(bits)
    for b, t, n, h, s, kv, hv in ((2, 97, 4, 64, 131, 2, 64), (1, 5, 2, 3, 7, 1, 5), (1, 200, 1, 16, 300, 1, 24)):
        q, k = rng.standard_normal((b, t, n, h)), rng.standard_normal((b, s, kv, h))
        v = rng.standard_normal((b, s, kv, hv))
        want = reference(q, k, v, scale=0.3, is_causal=causal)
        arrays = [x.astype(dtype) for x in (q, k, v)] + [np.array(0.3, dtype), np.empty((b, t, n, hv), dtype)]
        shapes = [d for x in arrays for d in x.shape]
        assert kernel((ctypes.c_void_p * 5)(*[x.ctypes.data for x in arrays]), (ctypes.c_int64 * len(shapes))(*shapes),
                      (ctypes.c_int64 * 5)(*[x.ndim for x in arrays]), 5) == 0
        tol = 1e-10 if dtype == "float64" else 4e-6 * np.sqrt(h) + 2e-6
        np.testing.assert_allclose(arrays[4], want, rtol=tol, atol=tol)
