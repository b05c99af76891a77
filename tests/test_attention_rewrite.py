"""``AttentionCalls``: attention as users write it (``softmax(q @ k.T * c) @ v`` with the
softmax written out or ``nn.softmax``, any batch dims, scales multiplied or divided) runs
as the attention library call, with NumPy's float64 result over hypothesis-drawn shapes on
every backend, causal masks as users spell them as the causal call; what does not match
(other masks, broadcast batch dims) is left to the products;
a value of the pattern returned too is still computed."""
from __future__ import annotations

import numpy as np
import pytest
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


def _causal(form: str, s, scale):
    """``s`` (..., T, S) masked causally (key j <= query i) and scaled, spelled as users do."""
    t, n = s.shape[-2], s.shape[-1]
    f32 = s.dtype
    if form == "tri -inf":
        return rnp.where(rnp.tri(t, n, dtype=bool), s, -rnp.inf) * scale
    if form == "tril == 0, -1e9":
        return rnp.where(rnp.tril(rnp.ones((t, n), f32)) == 0, -1e9, s * scale)
    if form == "arange >=":
        keep = rnp.arange(t)[:, None] >= rnp.arange(n)[None, :]
        return rnp.where(keep, s * scale, -rnp.inf)
    if form == "triu added":
        return s * scale + rnp.triu(rnp.full((t, n), -rnp.inf, f32), k=1)
    if form == "finfo.min added":
        return (s + (1 - rnp.tri(t, n, dtype=f32)) * np.finfo(f32).min) * scale
    raise AssertionError(form)


def _causal_reference(q, k, v, scale):
    s = q @ np.swapaxes(k, -1, -2) * scale
    s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@given(batch=st.sampled_from([(), (1,), (2, 3)]), t=LENGTHS, s=LENGTHS, h=st.sampled_from([1, 8, 64]),
       form=st.sampled_from(["tri -inf", "tril == 0, -1e9", "arange >=", "triu added", "finfo.min added"]),
       softmax=st.sampled_from(["written", "nn"]), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None)
def test_causal_masks_as_users_write_them_are_one_causal_call(batch, t, s, h, form, softmax, dtype, seed):
    """``where(tri, s, -inf)``, ``where(tril(ones) == 0, -1e9, s)``, an ``arange`` comparison,
    ``triu(full(-inf), 1)`` or ``finfo.min`` added, before or after the scale: one call of
    the causal attention (key j <= query i, top-left for T != S), NumPy's numbers."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(batch + (n, h)) for n in (t, s, s))
    want = _causal_reference(q, k, v, 0.25)
    q, k, v = (x.astype(dtype) for x in (q, k, v))

    def attention(q, k, v):
        z = _causal(form, q @ rnp.swapaxes(k, -1, -2), 0.25)
        if softmax == "nn":
            return nn.softmax(z, axis=-1) @ v
        e = rnp.exp(z - z.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    tol = 1e-10 if dtype == "float64" else 2e-5 * np.sqrt(h)
    for b in BACKENDS:
        f = rj.jit(attention, backend=b)
        np.testing.assert_allclose(f(q, k, v), want, rtol=tol, atol=tol, err_msg=f"backend {b}")
        text = f.lower(q, k, v).as_text("optimized")
        assert f'"nn.attention_causal_{"f32" if dtype == "float32" else "f64"}"' in text, text


@pytest.mark.parametrize("form", ["anti-causal", "off by one", "data", "small negative", "bias",
                                  "negative scale"])
def test_other_masks_are_left_to_the_products(form):
    """Masks that are not the causal pattern, or masks read from data, are formed in full
    as written (and give NumPy's numbers)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((50, 8)) for _ in range(3))
    data = rng.standard_normal((50, 50)) > 0
    data[:, 0] = True
    scale = -0.125 if form == "negative scale" else 0.125
    keep = {"anti-causal": np.triu(np.ones((50, 50), bool)), "off by one": np.tri(50, 50, -1, dtype=bool),
            "data": data}.get(form, np.tri(50, 50, dtype=bool))
    keep[:, 0] |= form == "off by one"                      # no row fully masked
    fill = -1.0 if form == "small negative" else -1e9

    def masked(q, k, v, m):
        s = q @ k.T * scale
        if form == "bias":
            s = s + rnp.tri(50, 50) * 0.5
        elif form == "data":
            s = rnp.where(m, s, fill)
        else:
            s = rnp.where(rnp.asarray(keep), s, fill)
        e = rnp.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    s = q @ k.T * scale
    s = s + np.tri(50, 50) * 0.5 if form == "bias" else np.where(keep, s, fill)
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ v
    for b in BACKENDS:
        f = rj.jit(masked, backend=b)
        np.testing.assert_allclose(f(q, k, v, data), want, rtol=1e-10, atol=1e-12)
        assert "nn.attention" not in f.lower(q, k, v, data).as_text("optimized")


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


@given(t=LENGTHS, heads=st.sampled_from([1, 3]), batch=st.sampled_from([1, 2]), seed=st.integers(0, 99))
@settings(max_examples=8, deadline=None)
def test_a_causal_mask_argument_is_the_causal_call(t, heads, batch, seed):
    """``nn.dot_product_attention(q, k, v, mask=tri)`` (its scores path: q, k, v transposed
    heads first, the keys' transposes merged) runs as ``is_causal=True`` does: the call on
    the arrays as given, no transposes, same numbers."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, t, heads, 16)) for _ in range(3))
    want = _causal_reference(*(x.swapaxes(1, 2) for x in (q, k, v)), 0.25).swapaxes(1, 2)
    for b in BACKENDS:
        f = rj.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, mask=rnp.tri(q.shape[1], dtype=bool)),
                   backend=b)
        np.testing.assert_allclose(f(q, k, v), want, rtol=1e-10, atol=1e-12, err_msg=f"backend {b}")
        text = f.lower(q, k, v).as_text("optimized")
        assert '"nn.attention_causal_f64"' in text and "transpose" not in text     # in its layout


@given(batch=st.sampled_from([1, 2]), heads=st.sampled_from([1, 4]), t=LENGTHS, s=LENGTHS,
       causal=st.booleans(), dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 99))
@settings(max_examples=12, deadline=None)
def test_attention_in_einsum_is_one_call(batch, heads, t, s, causal, dtype, seed):
    """JAX-style attention in einsum (``bqhd,bkhd->bhqk``, softmax, ``bhqk,bkhd->bqhd``: the
    keys transposed (0, 2, 3, 1)), causal or not: one call on q, k, v as given, NumPy's
    numbers."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, n, heads, 16)) for n in (t, s, s))
    qh, kh, vh = (x.swapaxes(1, 2) for x in (q, k, v))
    want = (_causal_reference(qh, kh, vh, 0.25) if causal else reference(qh, kh, vh, 0.25)).swapaxes(1, 2)
    q, k, v = (x.astype(dtype) for x in (q, k, v))

    def attention(q, k, v):
        z = rnp.einsum("bqhd,bkhd->bhqk", q, k) / 4.0
        if causal:
            z = rnp.where(rnp.tri(z.shape[-2], z.shape[-1], dtype=bool), z, -rnp.inf)
        return rnp.einsum("bhqk,bkhd->bqhd", nn.softmax(z, axis=-1), v)
    tol = 1e-10 if dtype == "float64" else 1e-4
    name = f'"nn.attention{"_causal" if causal else ""}_{"f32" if dtype == "float32" else "f64"}", q, k, v'
    n_q, n_kv = rj.dim("n_q"), rj.dim("n_kv")
    # batch and heads fixed, as a model's are
    shapes = [rj.ShapeDtypeStruct((batch, n, heads, 16), dtype) for n in (n_q, n_kv, n_kv)]
    for b in BACKENDS:
        f = rj.jit(attention, backend=b, shapes=shapes)
        np.testing.assert_allclose(f(q, k, v), want, rtol=tol, atol=tol, err_msg=f"backend {b}")
        text = f.lower(q, k, v).as_text("optimized")
        assert name in text and "transpose" not in text, text


def _masked_reference(q, k, v, scale, keep, fill):
    s = np.where(keep, q @ np.swapaxes(k, -1, -2) * scale, fill)
    with np.errstate(invalid="ignore"):            # -inf everywhere: NaN, as written
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v


def _key_length_mask(form: str, s, bound):
    """``s`` (B, N, T, S) masked to its first keys as users write it; ``bound`` a scalar
    position or (B,) lengths.  Returns (masked scores, the NumPy keep mask's maker, fill)."""
    n = s.shape[-1]
    j = rnp.arange(n)
    if form == "<= pos, -1e9":
        return rnp.where(j <= bound, s, -1e9), lambda j, b: j <= b, -1e9
    if form == "> pos dropped, finfo.min":
        return rnp.where(j > bound, np.finfo(s.dtype).min, s), lambda j, b: j <= b, np.finfo(s.dtype).min
    if form == "pos >= j, -inf":
        return rnp.where(bound >= j, s, -rnp.inf), lambda j, b: j <= b, -np.inf
    if form == "lengths < , -inf":
        keep = j[None, :] < bound[:, None]
        return rnp.where(keep[:, None, None, :], s, -rnp.inf), lambda j, b: j[None, :] < b[:, None], -np.inf
    if form == "lengths > j, -1e9, 3-d":
        keep = bound[:, None, None] > j
        return rnp.where(keep[:, None], s, -1e9), lambda j, b: j[None, :] < b[:, None], -1e9
    raise AssertionError(form)


@given(batch=st.sampled_from([1, 2, 5]), heads=st.sampled_from([1, 3]), t=st.sampled_from([1, 2, 7, 49]),
       s=LENGTHS, form=st.sampled_from(["<= pos, -1e9", "> pos dropped, finfo.min", "pos >= j, -inf",
                                        "lengths < , -inf", "lengths > j, -1e9, 3-d"]),
       dtype=st.sampled_from(["float32", "float64"]), bound_type=st.sampled_from(["int32", "int64"]),
       data=st.data())
@settings(max_examples=30, deadline=None)
def test_key_length_masks_as_users_write_them_are_the_lengths_call(batch, heads, t, s, form, dtype,
                                                                   bound_type, data):
    """``where(arange(S) <= pos, s, -1e9)`` (decode over a preallocated cache), padding masks
    from per-sequence lengths, dropped or kept, any fill: one ``nn.attention_lengths`` call,
    NumPy's numbers -- also where a sequence keeps no key (positions below 0: uniform
    weights for a finite fill, NaN for -inf, as written) or every key (past the end)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    q, k, v = (rng.standard_normal((batch, heads, n, 8)) for n in (t, s, s))
    per_sequence = form.startswith("lengths")
    top, bottom = int(np.iinfo(bound_type).max), int(np.iinfo(bound_type).min)
    bounds = st.one_of(st.sampled_from([-1, 0, s - 1, s, top, bottom]), st.integers(-2, s + 2))
    bound = np.array(data.draw(st.lists(bounds, min_size=batch, max_size=batch)) if per_sequence
                     else data.draw(bounds), bound_type)
    masked, keep, fill = _key_length_mask(form, rnp.zeros((1, 1, 1, s), dtype), bound)
    keep = keep(np.arange(s), bound)
    want = _masked_reference(q, k, v, 0.25, keep[:, None, None, :] if per_sequence else keep, fill)
    q, k, v = (x.astype(dtype) for x in (q, k, v))

    def attention(q, k, v, bound):
        z = _key_length_mask(form, q @ rnp.swapaxes(k, -1, -2) * 0.25, bound)[0]
        e = rnp.exp(z - z.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    tol = 1e-10 if dtype == "float64" else 2e-5
    for b in BACKENDS:
        f = rj.jit(attention, backend=b)
        got = f(q, k, v, bound)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"backend {b}")
        text = f.lower(q, k, v, bound).as_text("optimized")
        assert f'"nn.attention_lengths_{"f32" if dtype == "float32" else "f64"}"' in text, text
        assert "exp" not in text


@given(batch=st.sampled_from([1, 3]), heads=st.sampled_from([1, 4]), s=LENGTHS, seed=st.integers(0, 99))
@settings(max_examples=8, deadline=None)
def test_a_key_length_mask_argument_is_the_lengths_call(batch, heads, s, seed):
    """``nn.dot_product_attention(q, k, v, mask=arange(S) < lengths)`` (jax.nn's layout, its
    scores path transposing heads first): the lengths call on the arrays as given; a
    sequence with no keys gets jax.nn's uniform weights."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, n, heads, 16)) for n in (1, s, s))
    lengths = rng.integers(0, s + 1, batch).astype(np.int32)
    keep = (np.arange(s)[None, :] < lengths[:, None])[:, None, None, :]
    want = _masked_reference(*(x.swapaxes(1, 2) for x in (q, k, v)), 0.25, keep, -1e300).swapaxes(1, 2)

    def attention(q, k, v, lengths):
        mask = rnp.arange(k.shape[1])[None, :] < lengths[:, None]
        return nn.dot_product_attention(q, k, v, mask=mask[:, None, None, :])
    for b in BACKENDS:
        f = rj.jit(attention, backend=b)
        np.testing.assert_allclose(f(q, k, v, lengths), want, rtol=1e-10, atol=1e-12, err_msg=f"backend {b}")
        text = f.lower(q, k, v, lengths).as_text("optimized")
        assert '"nn.attention_lengths_f64", q, k, v' in text, text


@pytest.mark.parametrize("form", ["per query", "float bound", "two bounds", "and causal"])
def test_other_key_masks_are_left_to_the_products(form):
    """Bounds that vary along the queries, bounds that are not integers, and key masks
    combined with another are formed in full as written."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, n, 8)) for n in (6, 20, 20))
    bound = {"per query": np.arange(6)[:, None] + 3, "float bound": np.float64(7.5)}.get(form, np.int64(9))

    def masked(q, k, v, bound):
        j = rnp.arange(20)
        keep = {"per query": lambda: j < bound, "float bound": lambda: j < bound,
                "two bounds": lambda: (j < bound) & (j > 2),
                "and causal": lambda: (j < bound) & rnp.tri(6, 20, dtype=bool)}[form]()
        s = rnp.where(keep, q @ rnp.swapaxes(k, -1, -2), -1e9)
        e = rnp.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    j = np.arange(20)
    keep = {"per query": j < bound, "float bound": j < bound, "two bounds": (j < 9) & (j > 2),
            "and causal": (j < 9) & np.tri(6, 20, dtype=bool)}[form]
    want = _masked_reference(q, k, v, 1.0, keep, -1e9)
    for b in BACKENDS:
        f = rj.jit(masked, backend=b)
        np.testing.assert_allclose(f(q, k, v, bound), want, rtol=1e-10, atol=1e-12)
        assert "nn.attention" not in f.lower(q, k, v, bound).as_text("optimized")


def test_key_length_masks_on_the_cuda_emulator():
    """The CUDA backend's code for a key-length mask (its key-lengths attention, twice for a
    finite fill, and the select), run by its CPU emulator: positions before, inside and
    past the cache, NumPy's numbers."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2, 3, n, 8)) for n in (1, 20, 20))

    def attention(q, k, v, pos):
        s = rnp.where(rnp.arange(k.shape[2]) <= pos, q @ rnp.swapaxes(k, -1, -2) * 0.25, -1e9)
        return nn.softmax(s, axis=-1) @ v
    f = rj.jit(attention, backend="cuda-emulated")
    for pos in (-1, 0, 7, 19, 40):
        want = _masked_reference(q, k, v, 0.25, np.arange(20) <= pos, -1e9)
        np.testing.assert_allclose(f(q, k, v, np.int32(pos)), want, rtol=1e-10, atol=1e-12)
    assert f.cache_info().compiles == 1
    assert '"nn.attention_lengths_f64"' in f.lower(q, k, v, np.int32(0)).as_text("optimized")
