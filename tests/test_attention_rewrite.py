"""``AttentionCalls``: attention as users write it (``softmax(q @ k.T * c) @ v`` with the
softmax written out or ``nn.softmax``, any batch dims, scales multiplied or divided) runs
as the attention library call, with NumPy's float64 result over hypothesis-drawn shapes on
every backend; what does not match (masks, broadcast batch dims) is left to the products;
a value of the pattern returned too is still computed."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn
import relaxjax.numpy as rnp

from helpers import BACKENDS

LENGTHS = st.sampled_from([1, 2, 7, 9, 48, 49, 97, 128, 131, 200])


def written_out(q, k, v, scale_form):
    s = q @ rnp.swapaxes(k, -1, -2)
    s = {"mul": lambda: s * 0.3, "rmul": lambda: 0.3 * s, "div": lambda: s / 2.5, "none": lambda: s}[scale_form]()
    e = rnp.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def with_nn_softmax(q, k, v, scale_form):
    return nn.softmax(q @ rnp.swapaxes(k, -1, -2) * 0.3, axis=-1) @ v


def reference(q, k, v, scale):
    s = q @ np.swapaxes(k, -1, -2) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@given(batch=st.sampled_from([(), (1,), (3,), (2, 3)]), t=LENGTHS, s=LENGTHS,
       h=st.sampled_from([1, 5, 64]), hv=st.sampled_from([1, 8, 64]),
       form=st.sampled_from(["mul", "rmul", "div", "none", "nn"]),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 99))
@settings(max_examples=30, deadline=None)
def test_written_out_attention_is_one_call(batch, t, s, h, hv, form, dtype, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal(batch + (t, h)), rng.standard_normal(batch + (s, h))
    v = rng.standard_normal(batch + (s, hv))
    scale = {"mul": 0.3, "rmul": 0.3, "nn": 0.3, "div": 0.4, "none": 1.0}[form]
    want = reference(q, k, v, scale)
    fun = with_nn_softmax if form == "nn" else written_out
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    tol = 1e-10 if dtype == "float64" else 2e-5 * np.sqrt(h)
    for b in BACKENDS:
        f = rj.jit(lambda q, k, v: fun(q, k, v, form), backend=b)
        got = np.asarray(f(q, k, v))
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"backend {b}")
        text = f.lower(q, k, v).as_text("optimized")
        assert f'"nn.attention_{"f32" if dtype == "float32" else "f64"}"' in text
        assert "exp" not in text


def test_masked_scores_are_left_to_the_products():
    def masked(q, k, v):
        s = q @ k.T * 0.125
        s = rnp.where(rnp.tri(s.shape[0], s.shape[1], dtype=bool), s, -1e9)
        e = rnp.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((50, 8)) for _ in range(3))
    s = np.where(np.tri(50, 50, dtype=bool), q @ k.T * 0.125, -1e9)
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ v
    for b in BACKENDS:
        f = rj.jit(masked, backend=b)
        np.testing.assert_allclose(f(q, k, v), want, rtol=1e-10, atol=1e-12)
        assert "nn.attention" not in f.lower(q, k, v).as_text("optimized")


def test_broadcast_batch_dims_are_left_to_the_products():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 20, 8)), rng.standard_normal((1, 30, 8)), rng.standard_normal((1, 30, 4))
    for b in BACKENDS:
        f = rj.jit(lambda q, k, v: written_out(q, k, v, "mul"), backend=b)
        np.testing.assert_allclose(f(q, k, v), reference(q, k, v, 0.3), rtol=1e-10, atol=1e-12)
        assert "nn.attention" not in f.lower(q, k, v).as_text("optimized")


def test_weights_returned_too_are_still_computed():
    def both(q, k, v):
        s = q @ k.T * 0.5
        e = rnp.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
        return p @ v, p
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((40, 6)) for _ in range(3))
    s = q @ k.T * 0.5
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    for b in BACKENDS:
        out, weights = rj.jit(both, backend=b)(q, k, v)
        np.testing.assert_allclose(out, p @ v, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(weights, p, rtol=1e-10, atol=1e-12)


def test_one_compile_for_every_length():
    f = rj.jit(lambda q, k, v: written_out(q, k, v, "mul"))
    rng = np.random.default_rng(3)
    for s in (97, 1, 300, 1024):         # (a first call with 1 would specialize to 1)
        q, k, v = (rng.standard_normal((s, 16)).astype(np.float32) for _ in range(3))
        want = reference(*(x.astype(float) for x in (q, k, v)), 0.3)
        np.testing.assert_allclose(f(q, k, v), want, rtol=1e-4, atol=1e-5)
    assert f.cache_info().compiles == 1
