"""``key_value_seq_lengths`` and ``query_seq_lengths`` of ``nn.dot_product_attention`` (JAX's
names): batch b attends to its first ``lengths[b]`` keys, through the attention library call
that stops its loops there (``nn.attention_lengths_*``; a decode step over a preallocated
cache), on every backend, against NumPy in float64 over hypothesis-drawn shapes (lengths 0,
1, S, past S and negative clamped; the row-by-row and tiled schedules; grouped-query heads);
its gradient against the masked scores'; the errors for bad lengths."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn
import relaxjax.numpy as rnp

from helpers import BACKENDS
from test_attention import reference


def _reference(q, k, v, lengths, scale, causal=False):
    """Batch b attends to its first lengths[b] keys (clamped to [0, S]; none: zeros)."""
    B, T, N, H = q.shape
    out = np.zeros((B, T, N, v.shape[-1]))
    for b in range(B):
        n_keys = int(np.clip(lengths[b], 0, k.shape[1]))
        if n_keys:
            out[b] = reference(q[b], k[b, :n_keys], v[b, :n_keys], scale=scale, is_causal=causal)
    return out


@given(b=st.sampled_from([1, 2, 5]), t=st.sampled_from([1, 3, 8, 9, 50, 97]),
       s=st.sampled_from([1, 7, 127, 128, 129, 300]), heads=st.sampled_from([(1, 1), (4, 4), (6, 2)]),
       h=st.sampled_from([1, 8, 64]), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=30, deadline=None)
def test_key_lengths_match_numpy(b, t, s, heads, h, dtype, seed):
    rng = np.random.default_rng(seed)
    n, kv = heads
    q = rng.standard_normal((b, t, n, h)).astype(dtype)
    k = rng.standard_normal((b, s, kv, h)).astype(dtype)
    v = rng.standard_normal((b, s, kv, h)).astype(dtype)
    lengths = rng.choice([0, 1, s, s + 3, -2, rng.integers(0, s + 1)], b).astype(np.int32)
    want = _reference(*(x.astype(np.float64) for x in (q, k, v)), lengths, 1 / np.sqrt(h))
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    for backend in BACKENDS:
        f = rj.jit(lambda q, k, v, n: nn.dot_product_attention(q, k, v, key_value_seq_lengths=n), backend=backend)
        got = f(q, k, v, lengths)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, **tol)


def test_key_lengths_are_one_library_call_and_the_causal_form_masks():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, n, 2, 8)).astype(np.float32) for n in (5, 40, 40))
    n = np.array([3, 40], np.int32)
    f = rj.jit(lambda q, k, v, n: nn.dot_product_attention(q, k, v, key_value_seq_lengths=n))
    text = f.lower(q, k, v, n).as_text("optimized")
    assert 'call_library("nn.attention_lengths_f32"' in text and "matmul" not in text
    # causal with lengths: the scores, masked by both (zeros where no key is left)
    g = rj.jit(lambda q, k, v, n: nn.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=n))
    n0 = np.array([0, 4], np.int32)
    want = _reference(*(x.astype(np.float64) for x in (q, k, v)), n0, 1 / np.sqrt(8), causal=True)
    np.testing.assert_allclose(g(q, k, v, n0), want, rtol=2e-4, atol=2e-5)


def test_query_lengths_zero_the_rows_past_them():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, n, 2, 4)) for n in (6, 9, 9))
    ql, kl = np.array([0, 6, 2], np.int32), np.array([9, 1, 4], np.int32)
    got = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, query_seq_lengths=ql,
                                                          key_value_seq_lengths=kl))(q, k, v)
    want = _reference(q, k, v, kl, 0.5)
    want[np.arange(6)[None, :] >= ql[:, None]] = 0
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_gradient_with_key_lengths_is_the_masked_scores_gradient():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((3, n, 2, 8)) for n in (2, 30, 30))
    n = np.array([5, 30, 1], np.int32)
    mask = (np.arange(30)[None, :] < n[:, None])[:, None, None, :]

    def loss(**kw):
        return lambda q, k, v: (nn.dot_product_attention(q, k, v, **kw) ** 2).sum()
    got = rj.grad(loss(key_value_seq_lengths=n), argnums=(0, 1, 2))(q, k, v)
    want = rj.grad(loss(mask=mask), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_bad_lengths_say_what_is_wrong():
    q = np.ones((2, 3, 1, 4), np.float32)
    with pytest.raises(TypeError, match="key_value_seq_lengths must be integers"):
        rj.jit(lambda q: nn.dot_product_attention(q, q, q, key_value_seq_lengths=np.ones(2, np.float32)))(q)
    with pytest.raises(ValueError, match="needs rank-4 inputs"):
        rj.jit(lambda q: nn.dot_product_attention(q[0], q[0], q[0], key_value_seq_lengths=np.ones(2, np.int32)))(q)
    with pytest.raises(rj.ShapeError, match="key_value_seq_lengths"):
        rj.jit(lambda q: nn.dot_product_attention(q, q, q, key_value_seq_lengths=np.ones(3, np.int32)),
               shapes=(rj.ShapeDtypeStruct((2, 3, 1, 4), "float32"),))(q)


@given(b=st.sampled_from([1, 3]), t=st.sampled_from([1, 9, 50, 97]), s=st.sampled_from([1, 128, 129]),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_query_and_key_lengths_in_the_kernel(b, t, s, dtype, seed):
    """Both lengths (a padded batch of sequences): one library call that computes only the
    query rows within each batch's length and writes zeros past it."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, t, 2, 16)).astype(dtype)
    k, v = (rng.standard_normal((b, s, 2, 16)).astype(dtype) for _ in range(2))
    kl = rng.integers(0, s + 1, b).astype(np.int32)
    ql = rng.integers(0, t + 1, b).astype(np.int32)
    want = _reference(*(x.astype(np.float64) for x in (q, k, v)), kl, 0.25)
    want[np.arange(t)[None, :] >= ql[:, None]] = 0
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    for backend in BACKENDS:
        f = rj.jit(lambda q, k, v, a, c: nn.dot_product_attention(
            q, k, v, key_value_seq_lengths=a, query_seq_lengths=c), backend=backend)
        np.testing.assert_allclose(f(q, k, v, kl, ql), want, **tol)
    text = f.lower(q, k, v, kl, ql).as_text("optimized")
    assert 'call_library("nn.attention_qlengths' in text


def test_gradient_with_query_lengths():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, n, 2, 4)) for n in (7, 9, 9))
    kl, ql = np.array([9, 3], np.int32), np.array([2, 7], np.int32)
    mask = (np.arange(9)[None, :] < kl[:, None])[:, None, None, :]
    rows = (np.arange(7)[None, :] < ql[:, None])[:, :, None, None]

    def loss(kw):
        def f(q, k, v):
            out = nn.dot_product_attention(q, k, v, **kw)
            return (rnp.where(rows, out, 0.0) ** 2).sum() if "mask" in kw else (out ** 2).sum()
        return f
    got = rj.grad(loss(dict(key_value_seq_lengths=kl, query_seq_lengths=ql)), argnums=(0, 1, 2))(q, k, v)
    want = rj.grad(loss(dict(mask=mask)), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
