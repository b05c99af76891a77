"""``relaxjax.nn.dot_product_attention`` with ``jax.nn``'s layout and semantics, against a
NumPy reference in float64 over hypothesis-drawn batch dims, query and key lengths (1,
primes), grouped-query heads, masks, biases, causal masking and scales, on every backend;
one compile for every pair of lengths; errors for shapes that do not fit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn

from helpers import BACKENDS

LENGTHS = st.one_of(st.sampled_from([1, 2, 3, 7, 13]), st.integers(1, 40))


def reference(q, k, v, bias=None, mask=None, scale=None, is_causal=False):
    n, kv = q.shape[-2], k.shape[-2]
    k, v = np.repeat(k, n // kv, axis=-2), np.repeat(v, n // kv, axis=-2)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("...tnh,...snh->...nts", q, k) * scale
    if bias is not None:
        s = s + bias
    keep = np.ones(s.shape[-2:], bool) if mask is None else mask
    if is_causal:
        keep = keep & np.tril(np.ones(s.shape[-2:], bool))
    s = np.where(keep, s, -0.7 * np.finfo(s.dtype).max)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("...nts,...snh->...tnh", p, v)


@given(batch=st.sampled_from([(), (1,), (2,), (2, 3)]), t=LENGTHS, s=LENGTHS,
       heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]), h=st.sampled_from([1, 4, 8]),
       extras=st.sampled_from(["none", "mask", "bias", "causal", "all"]), seed=st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_against_numpy(batch, t, s, heads, h, extras, seed):
    rng = np.random.default_rng(seed)
    n, kv = heads
    q = rng.standard_normal(batch + (t, n, h))
    k, v = rng.standard_normal(batch + (s, kv, h)), rng.standard_normal(batch + (s, kv, h))
    kw = {}
    if extras in ("mask", "all"):
        kw["mask"] = rng.random((t, s)) < 0.7
    if extras in ("bias", "all"):
        kw["bias"] = rng.standard_normal((n, t, s))
    if extras in ("causal", "all"):
        kw["is_causal"] = True
    if extras == "all":
        kw["scale"] = 0.3
    want = reference(q, k, v, **kw)
    arrays = {name: kw.pop(name) for name in ("mask", "bias") if name in kw}
    for b in BACKENDS:
        f = rj.jit(lambda q, k, v, arrays: nn.dot_product_attention(q, k, v, **arrays, **kw), backend=b)
        got = f(q, k, v, arrays)
        assert got.shape == q.shape[:-1] + (h,)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"backend {b}")


def test_one_compile_for_every_pair_of_lengths():
    f = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))
    rng = np.random.default_rng(0)
    for t, s in ((5, 9), (2, 2), (7, 3), (11, 17), (4, 4)):
        q = rng.standard_normal((t, 2, 8)).astype(np.float32)
        k, v = (rng.standard_normal((s, 2, 8)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(f(q, k, v), reference(q.astype(float), k.astype(float), v.astype(float),
                                                         is_causal=True), rtol=1e-4, atol=1e-5)
    assert f.cache_info().compiles == 1


def test_shapes_that_do_not_fit():
    q, k = np.ones((3, 4, 8)), np.ones((5, 3, 8))
    with pytest.raises(ValueError, match="key/value head count dividing"):
        nn.dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="same rank >= 3"):
        nn.dot_product_attention(np.ones((3, 8)), np.ones((5, 8)), np.ones((5, 8)))
