"""Growing caches (``compile/growing_caches.py``, ``relaxjax.growing``): a donated cache
that a concatenation extends along an inner axis, as Relax's decode step grows its KV cache
at any batch size, is kept in an array with room.  The step writes only the new positions,
attention reads the cache where it is (key lengths), and the caller gets views; results are
NumPy's (float64 oracle) on every backend, whatever the batch, steps and growth, and a
cache the caller did not give up is never written."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import nn

from helpers import BACKENDS


def _step(q, k, v, kc, vc):
    """One decode step: grow both caches by the new positions, attend over them."""
    kc = rnp.concatenate([kc, k], axis=1)
    vc = rnp.concatenate([vc, v], axis=1)
    return nn.dot_product_attention(q, kc, vc), kc, vc


def _attention64(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", w, v)


@given(batch=st.sampled_from([1, 2, 3, 7, 16]), heads=st.sampled_from([1, 3]),
       head_dim=st.sampled_from([1, 8, 13]), start=st.integers(0, 5),
       news=st.lists(st.integers(1, 3), min_size=1, max_size=12), seed=st.integers(0, 2 ** 16))
@example(batch=7, heads=3, head_dim=13, start=0, news=[1] * 40, seed=0).via("a decode from an empty cache")
@settings(max_examples=12, deadline=None)
def test_a_growing_cache_decodes_as_numpy(batch, heads, head_dim, start, news, seed):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    for backend in BACKENDS:
        step = rj.jit(_step, donate_argnums=(3, 4), backend=backend)
        kc = rng.standard_normal((batch, start, heads, head_dim)).astype(f32)
        vc = rng.standard_normal((batch, start, heads, head_dim)).astype(f32)
        k_all, v_all, in_place = kc.copy(), vc.copy(), 0
        for n in news:
            q, k, v = (rng.standard_normal((batch, n, heads, head_dim)).astype(f32) for _ in range(3))
            prev = kc
            out, kc, vc = step(q, k, v, kc, vc)
            k_all, v_all = np.concatenate([k_all, k], 1), np.concatenate([v_all, v], 1)
            np.testing.assert_array_equal(kc, k_all)
            np.testing.assert_array_equal(vc, v_all)
            np.testing.assert_allclose(out, _attention64(q, k_all, v_all), rtol=2e-5, atol=2e-6)
            in_place += bool(prev.size) and np.shares_memory(kc, prev)
        assert step.cache_info().compiles == 1
        if backend == "llvm" and len(news) >= 8:
            assert in_place >= len(news) // 2, (in_place, news)        # written where it was


def test_the_rewrite_shows_in_the_optimized_ir():
    b, t, n = rj.dim("b"), rj.dim("t", min=0), rj.dim("n")
    x = rj.ShapeDtypeStruct
    step = rj.jit(_step, donate_argnums=(3, 4),
                  shapes=(x((b, n, 2, 8), "float32"),) * 3 + (x((b, t, 2, 8), "float32"),) * 2)
    text = step.lower(*[np.zeros((3, 1, 2, 8), np.float32)] * 3,
                      *[np.zeros((3, 5, 2, 8), np.float32)] * 2).as_text("optimized")
    assert "kc: f32[b, n + t + t_room, 2, 8]" in text and "nn.attention_lengths_f32" in text
    assert "concatenate" not in text
    plain = rj.jit(_step, shapes=step.shapes)            # nothing donated: left as written
    assert "t_room" not in plain.lower(*[np.zeros((3, 1, 2, 8), np.float32)] * 3,
                                       *[np.zeros((3, 5, 2, 8), np.float32)] * 2).as_text("optimized")


def test_a_cache_used_twice_or_not_ours_is_copied_first(tmp_path):
    """Two steps from one cache (a caller branching instead of giving it up) each see the
    cache as it was; a donated view of the caller's own larger array is read, never
    written past its end; caches of one group with different room are given one length; a
    NumPy subclass (a memmap) is copied into a plain array."""
    rng = np.random.default_rng(0)
    step = rj.jit(_step, donate_argnums=(3, 4))
    shape = (2, 1, 1, 4)
    kc = vc = np.zeros((2, 0, 1, 4), np.float32)
    for _ in range(3):
        _, kc, vc = step(*(rng.standard_normal(shape).astype(np.float32) for _ in range(3)), kc, vc)
    base_k, base_v = kc.copy(), vc.copy()
    new = [[rng.standard_normal(shape).astype(np.float32) for _ in range(3)] for _ in range(2)]
    a = step(*new[0], kc, vc)
    b = step(*new[1], kc, vc)                             # the same caches again
    for (q, k, v), (out, ka, va) in zip(new, (a, b)):
        np.testing.assert_array_equal(ka, np.concatenate([base_k, k], 1))
        np.testing.assert_array_equal(va, np.concatenate([base_v, v], 1))
        np.testing.assert_allclose(out, _attention64(q, ka, va), rtol=2e-5, atol=2e-6)
    big = rng.standard_normal((2, 10, 1, 4)).astype(np.float32)
    keep = big.copy()
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    _, k2, v2 = step(q, k, v, big[:, :4], a[2])          # mine / the driver's, lengths differ
    np.testing.assert_array_equal(big, keep)
    np.testing.assert_array_equal(k2, np.concatenate([keep[:, :4], k], 1))
    np.testing.assert_array_equal(v2, np.concatenate([a[2], v], 1))
    mapped = np.memmap(tmp_path / "cache.dat", np.float32, "w+", shape=(2, 3, 1, 4))   # a subclass
    mapped[:] = 1.0
    _, k3, _ = step(q, k, v, mapped, mapped.copy())
    np.testing.assert_array_equal(k3, np.concatenate([np.ones((2, 3, 1, 4), np.float32), k], 1))


def test_a_growing_cache_loads_from_the_persistent_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXJAX_CACHE_DIR", str(tmp_path))
    shape = (3, 1, 2, 4)
    outs = []
    for _ in range(2):                                     # compiled, then loaded
        step = rj.jit(_step, donate_argnums=(3, 4))
        kc = vc = np.zeros((3, 0, 2, 4), np.float32)
        r = np.random.default_rng(1)
        for _ in range(6):
            out, kc, vc = step(*(r.standard_normal(shape).astype(np.float32) for _ in range(3)), kc, vc)
        outs.append((out, kc))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert outs[1][1].shape == (3, 6, 2, 4) and not outs[1][1].flags.c_contiguous


def test_a_growing_cache_on_the_cuda_emulator():
    """The CUDA backend's code (its attention with key lengths over the physical arrays),
    run by its CPU emulator: batch 3, caches from empty, one compile."""
    rng = np.random.default_rng(4)
    step = rj.jit(_step, donate_argnums=(3, 4), backend="cuda-emulated")
    kc = vc = np.zeros((3, 0, 2, 8))
    k_all = v_all = kc
    for n in (1, 2, 1, 1, 3):
        q, k, v = (rng.standard_normal((3, n, 2, 8)) for _ in range(3))
        out, kc, vc = step(q, k, v, kc, vc)
        k_all, v_all = np.concatenate([k_all, k], 1), np.concatenate([v_all, v], 1)
        np.testing.assert_array_equal(kc, k_all)
        np.testing.assert_allclose(out, _attention64(q, k_all, v_all), rtol=1e-10, atol=1e-12)
    assert step.cache_info().compiles == 1


def _step_by_hand(q, k, v, kc, vc):
    """A decode step as a NumPy user writes it, torch's layout (b, heads, t, hd)."""
    kc = rnp.concatenate([kc, k], axis=2)
    vc = rnp.concatenate([vc, v], axis=2)
    s = q @ rnp.swapaxes(kc, -1, -2) / math.sqrt(q.shape[-1])
    e = rnp.exp(s - rnp.max(s, axis=-1, keepdims=True))
    return (e / rnp.sum(e, axis=-1, keepdims=True)) @ vc, kc, vc


@given(batch=st.sampled_from([1, 2, 5]), heads=st.sampled_from([1, 4]), start=st.integers(0, 3),
       steps=st.integers(1, 12), seed=st.integers(0, 2 ** 16))
@settings(max_examples=6, deadline=None)
def test_attention_written_by_hand_over_caches_of_heads_first(batch, heads, start, steps, seed):
    """The attention found in the user's own softmax (``AttentionCalls``) over caches laid
    out (b, heads, t, hd), grown along axis 2: read in place too (heads merged into the
    batch of the library call), equal to NumPy float64."""
    rng = np.random.default_rng(seed)
    for backend in BACKENDS:
        step = rj.jit(_step_by_hand, donate_argnums=(3, 4), backend=backend)
        kc = rng.standard_normal((batch, heads, start, 16)).astype(np.float32)
        vc = rng.standard_normal((batch, heads, start, 16)).astype(np.float32)
        k_all, v_all = kc.copy(), vc.copy()
        for _ in range(steps):
            q, k, v = (rng.standard_normal((batch, heads, 1, 16)).astype(np.float32) for _ in range(3))
            out, kc, vc = step(q, k, v, kc, vc)
            k_all, v_all = np.concatenate([k_all, k], 2), np.concatenate([v_all, v], 2)
            np.testing.assert_array_equal(vc, v_all)
            want = _attention64(*(x.swapaxes(1, 2) for x in (q, k_all, v_all))).swapaxes(1, 2)
            np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
        if backend == "llvm":
            main = step.compiled_modules()[0].main
            assert "nn.attention_lengths_f32" in str(main) and "growing" in main.attrs


def _two_logs(a, x, b, y):
    """Two caches of independent lengths (two groups), one read by a reduction too."""
    a = rnp.concatenate([a, x], axis=2)
    b = rnp.concatenate([b, y], axis=1)
    return a.sum(axis=2), a, b


@given(rows=st.integers(1, 4), width=st.sampled_from([1, 3]), steps=st.lists(st.tuples(
       st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=15), seed=st.integers(0, 2 ** 16))
@settings(max_examples=10, deadline=None)
def test_caches_of_independent_lengths_and_other_readers(rows, width, steps, seed):
    """Two caches growing by different amounts per call (int64 along axis 2 of rank 3,
    float64 along axis 1), one also summed over its grown axis: every result NumPy's,
    one compile, on every backend."""
    rng = np.random.default_rng(seed)
    r, ta, na, tb, nb = (rj.dim(n, min=0) for n in ("r", "ta", "na", "tb", "nb"))
    x_ = rj.ShapeDtypeStruct
    shapes = (x_((r, width, ta), "int64"), x_((r, width, na), "int64"), x_((r, tb, 5), "float64"),
              x_((r, nb, 5), "float64"))
    for backend in BACKENDS:
        f = rj.jit(_two_logs, donate_argnums=(0, 2), backend=backend, shapes=shapes)
        a, b = np.zeros((rows, width, 0), np.int64), np.zeros((rows, 0, 5))
        want_a, want_b = a.copy(), b.copy()
        for na, nb in steps:
            x = rng.integers(-9, 9, (rows, width, na))
            y = rng.standard_normal((rows, nb, 5))
            s, a, b = f(a, x, b, y)
            want_a, want_b = np.concatenate([want_a, x], 2), np.concatenate([want_b, y], 1)
            np.testing.assert_array_equal(a, want_a)
            np.testing.assert_array_equal(b, want_b)
            np.testing.assert_array_equal(s, want_a.sum(axis=2))
        assert f.cache_info().compiles == 1
        groups = f.compiled_modules()[0].main.attrs["growing"]
        assert len(groups) == 2
