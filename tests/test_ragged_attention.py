"""Attention over packed sequences without padding (varlen attention, issue 20):
``ragged.dot_product_attention`` and ``nn.dot_product_attention_varlen`` as one library call
(``nn.attention_varlen*``) on the packed values and the offsets.  Hypothesis-drawn batches
of lengths (empty sequences, all equal, one of ~300 among short ones), grouped-query heads,
head sizes 1 to 80, causal or not, float32 and float64, on every backend against a
per-sequence float64 NumPy loop; one compile for every batch; the program's text (the
call, no padding); the gradient against central differences; the errors; the native
kernel at narrower vector widths; the CUDA kernel on the CPU emulator and through NVRTC."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn
from relaxjax import ragged
from relaxjax.backends.cuda import emulated_device
from relaxjax.backends.cuda.attention import attention_kernel, flash_attention_varlen, varlen_blocks_kernel

from helpers import BACKENDS
from test_attention import reference


def per_sequence(q, k, v, lengths, scale, causal):
    """softmax(q k^T * scale) v for each sequence on its own, float64 (the oracle)."""
    out = np.zeros(q.shape[:2] + (v.shape[-1],))
    start = 0
    for n in lengths:
        s = slice(start, start + n)
        start += n
        if n:
            out[s] = reference(q[s], k[s], v[s], scale=scale, is_causal=causal)
    return out


def packed(rng, lengths, heads, h, hv, dtype="float64"):
    """Ragged q, k, v over ``lengths`` (q with the query heads, k and v the key/value heads)."""
    n, kv = heads
    t = int(sum(lengths))
    vals = [rng.standard_normal((t, n, h)), rng.standard_normal((t, kv, h)), rng.standard_normal((t, kv, hv))]
    return [ragged.from_lengths(x.astype(dtype), lengths) for x in vals]


def cross_oracle(q, k, v, lq, lk, scale, causal):
    """Query sequence b of ``lq`` against key/value sequence b of ``lk``, float64."""
    out = np.zeros(q.shape[:2] + (v.shape[-1],))
    a = b = 0
    for n, m in zip(lq, lk):
        if n and m:
            out[a:a + n] = reference(q[a:a + n], k[b:b + m], v[b:b + m], scale=scale, is_causal=causal)
        a, b = a + n, b + m
    return out


def cross_packed(rng, lq, lk, heads, h, hv, dtype="float64"):
    n, kv = heads
    q = ragged.from_lengths(rng.standard_normal((sum(lq), n, h)).astype(dtype), lq)
    k, v = (ragged.from_lengths(rng.standard_normal((sum(lk), kv, d)).astype(dtype), lk) for d in (h, hv))
    return q, k, v


LENGTHS = st.one_of(
    st.lists(st.integers(0, 60), min_size=1, max_size=6),                          # zeros among them
    st.tuples(st.integers(1, 50), st.integers(1, 5)).map(lambda p: [p[0]] * p[1]),  # all equal
    st.tuples(st.lists(st.integers(0, 12), min_size=1, max_size=5), st.integers(290, 310),
              st.integers(0, 5)).map(lambda p: p[0][:p[2]] + [p[1]] + p[0][p[2]:]))  # one long one
_JITTED: dict = {}


def _attention_fn(causal: bool, cross: bool):
    """Keys and values over the query's sequences (its offsets, as when the three come from
    one projection), or (``cross``) over sequences of their own."""
    if cross:
        return lambda q, k, v: ragged.dot_product_attention(q, k, v, is_causal=causal)
    return lambda q, k, v: ragged.dot_product_attention(q, q.with_values(k.values), q.with_values(v.values),
                                                        is_causal=causal)


def _attention(backend: str, causal: bool, cross: bool = False):
    """One jitted function per backend and mask, reused across examples (as a model would)."""
    key = (backend, causal, cross)
    if key not in _JITTED:
        _JITTED[key] = rj.jit(_attention_fn(causal, cross), backend=backend)
    return _JITTED[key]


@given(lengths=LENGTHS, heads=st.sampled_from([(1, 1), (2, 1), (4, 2)]), h=st.sampled_from([1, 16, 64, 80]),
       causal=st.booleans(), dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_matches_attention_per_sequence(lengths, heads, h, causal, dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = packed(rng, lengths, heads, h, h, dtype)
    want = per_sequence(*(x.values.astype(np.float64) for x in (q, k, v)), lengths, 1 / np.sqrt(h), causal)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    for backend in BACKENDS:
        got = _attention(backend, causal)(q, k, v)
        assert isinstance(got, ragged.RaggedArray) and got.values.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.offsets, q.offsets)
        np.testing.assert_allclose(got.values, want, **tol)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_compile_for_every_batch(backend, cross):
    f = rj.jit(_attention_fn(True, cross), backend=backend)
    rng = np.random.default_rng(3)
    # all empty first: the packed rows' dim is then traced as >= 0 (automatic mode), not >= 1
    for lq, lk in (([0, 0], [0, 0]), ([5, 0, 49], [3, 8, 0]), ([1], [300]), ([97, 3, 3, 0, 12], [2, 40, 0, 12, 1])):
        lk = lk if cross else lq
        q, k, v = cross_packed(rng, lq, lk, (4, 2), 16, 16)
        np.testing.assert_allclose(f(q, k, v).values, cross_oracle(q.values, k.values, v.values, lq, lk, 0.25, True),
                                   rtol=1e-10, atol=1e-10)
    assert f.cache_info().compiles == 1


def test_the_program_is_one_varlen_call_without_padding():
    rng = np.random.default_rng(0)
    q, k, v = packed(rng, [3, 0, 7], (2, 1), 8, 8, "float32")
    # keys and values over the query's sequences (its offsets): attention within each
    f = rj.jit(lambda q, k, v: ragged.dot_product_attention(q, q.with_values(k.values), q.with_values(v.values),
                                                            max_len=16))     # max_len: ignored
    lowered = f.lower(q, k, v)
    traced, optimized = lowered.as_text(), lowered.as_text("optimized")
    assert 'call_library("nn.attention_varlen_f32", q_values, k_values, v_values' in traced
    assert optimized.count("call_library(") == 1 and "nn.attention_varlen_f32" in optimized
    for text in (traced, optimized):     # to_padded gathers rows (take) from the values with a zero row appended
        assert "take" not in text and "concatenate" not in text and "call_tir" not in text
    causal = rj.jit(lambda q: ragged.dot_product_attention(q, q, q, is_causal=True)).lower(q)
    assert "nn.attention_varlen_causal_f32" in causal.as_text("optimized")


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_gradient_matches_central_differences(causal, cross):
    """d/d(q, k, v, scale) of sum(w * out), along random directions, against the NumPy
    oracle's central differences (the scale traced); ``cross``: keys over sequences of their
    own, one of them empty under 9 queries (their rows are zeros, whatever q is)."""
    rng = np.random.default_rng(5)
    lq = [4, 0, 9, 1]
    lk = [6, 3, 0, 11] if cross else lq
    q, k, v = (x.values for x in cross_packed(rng, lq, lk, (4, 2), 8, 5))
    oq, ok = (np.concatenate([[0], np.cumsum(x)]) for x in (lq, lk))
    w = rng.standard_normal((14, 4, 5))

    def loss(q, k, v, c):
        return (w * nn.dot_product_attention_varlen(q, k, v, oq, key_offsets=ok if cross else None, scale=c,
                                                    is_causal=causal)).sum()
    args = [q, k, v, np.array(0.4)]
    grads = rj.grad(loss, argnums=(0, 1, 2, 3))(*args)
    for i, g in enumerate(grads):
        d = rng.standard_normal(args[i].shape)
        eps = 1e-5

        def at(x):
            a = list(args)
            a[i] = x
            return (w * cross_oracle(*a[:3], lq, lk, float(a[3]), causal)).sum()
        fd = (at(args[i] + eps * d) - at(args[i] - eps * d)) / (2 * eps)
        np.testing.assert_allclose(np.sum(np.asarray(g) * d), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_offsets_and_layouts_raise(backend):
    x = np.zeros((5, 2, 4))
    f = rj.jit(lambda q, k, v, o: nn.dot_product_attention_varlen(q, k, v, o), backend=backend)
    for offsets in ([0, 3, 2, 5], [0, 2, 4], [1, 5], [0, 2, 6]):
        with pytest.raises(ValueError, match="offsets must run from 0 to the number of packed rows"):
            f(x, x, x, np.array(offsets))
    np.testing.assert_array_equal(f(x, x, x, np.array([0, 2, 5])), np.zeros((5, 2, 4)))
    with pytest.raises(ValueError, match="3 query heads need a key/value head count dividing it"):
        nn.dot_product_attention_varlen(np.zeros((5, 3, 4)), x, x, np.array([0, 5]))
    with pytest.raises(TypeError, match="float32 or float64 inputs"):
        nn.dot_product_attention_varlen(*[x.astype(np.float16)] * 3, np.array([0, 5]))
    with pytest.raises(ValueError, match="packed as"):
        nn.dot_product_attention_varlen(x[None], x[None], x[None], np.array([0, 5]))
    with pytest.raises(rj.ShapeError, match="packed rows"):
        nn.dot_product_attention_varlen(x, x[:4], x[:4], np.array([0, 5]))
    r = ragged.from_lengths(x, [2, 3])
    with pytest.raises(TypeError, match="must be ragged arrays"):
        ragged.dot_product_attention(r, x, r)
    with pytest.raises(ValueError, match="key and value hold different sequences"):
        ragged.dot_product_attention(r, ragged.from_lengths(x, [3, 2]), r)


@pytest.mark.parametrize("bits,dtype,causal", [(256, "float32", True), (128, "float64", False)])
def test_native_kernel_at_narrower_vector_widths(bits, dtype, causal):
    """The native function as AVX2 and SSE hosts get it, through the library ABI: long and
    empty sequences, the row-by-row (<= 8 queries) and the tiled schedules."""
    from relaxjax.backends.llvm import attention
    from relaxjax.backends.llvm.engine import CompiledModule, prepare_process
    from relaxjax.library import NATIVE_SIGNATURE
    prepare_process()
    letter = "s" if dtype == "float32" else "d"
    module = CompiledModule(attention.attention_text(letter, causal, bits, varlen=True), [])
    kernel = NATIVE_SIGNATURE(module.address(attention.symbol(letter, causal, varlen=True)))
    rng = np.random.default_rng(bits)
    lengths = [130, 0, 5, 49, 1]
    q, k, v = (x.values for x in packed(rng, lengths, (4, 2), 24, 20))
    arrays = [x.astype(dtype) for x in (q, k, v)] + [np.array(0.3, dtype), np.array([0, 130, 130, 135, 184, 185]),
                                                    np.full((185, 4, 20), np.nan, dtype)]
    shapes = [d for x in arrays for d in x.shape]
    status = kernel((ctypes.c_void_p * 6)(*[x.ctypes.data for x in arrays]), (ctypes.c_int64 * len(shapes))(*shapes),
                    (ctypes.c_int64 * 6)(*[x.ndim for x in arrays]), 6)
    assert status == 0
    tol = 1e-10 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(arrays[5], per_sequence(q, k, v, lengths, 0.3, causal), rtol=tol, atol=tol)


@pytest.mark.parametrize("bits,dtype,causal", [(256, "float32", True), (128, "float64", False)])
def test_native_cross_kernel_at_narrower_vector_widths(bits, dtype, causal):
    """The cross variant likewise: key sequences longer, shorter and empty against the
    queries', through the library ABI (status 3 for key offsets of another batch)."""
    from relaxjax.backends.llvm import attention
    from relaxjax.backends.llvm.engine import CompiledModule, prepare_process
    from relaxjax.library import NATIVE_SIGNATURE
    prepare_process()
    letter = "s" if dtype == "float32" else "d"
    module = CompiledModule(attention.attention_text(letter, causal, bits, varlen=True, cross=True), [])
    kernel = NATIVE_SIGNATURE(module.address(attention.symbol(letter, causal, varlen=True, cross=True)))
    rng = np.random.default_rng(bits)
    lq, lk = [130, 0, 5, 49, 3], [20, 7, 0, 200, 3]
    q, k, v = (x.values for x in cross_packed(rng, lq, lk, (4, 2), 24, 20))

    def run(offsets, key_offsets):
        arrays = [x.astype(dtype) for x in (q, k, v)] + [np.array(0.3, dtype), offsets, key_offsets,
                                                        np.full((187, 4, 20), np.nan, dtype)]
        shapes = [d for x in arrays for d in x.shape]
        status = kernel((ctypes.c_void_p * 7)(*[x.ctypes.data for x in arrays]),
                        (ctypes.c_int64 * len(shapes))(*shapes), (ctypes.c_int64 * 7)(*[x.ndim for x in arrays]), 7)
        return status, arrays[-1]
    offsets, key_offsets = (np.concatenate([[0], np.cumsum(x)]).astype(np.int64) for x in (lq, lk))
    status, out = run(offsets, key_offsets)
    assert status == 0
    tol = 1e-10 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(out, cross_oracle(q, k, v, lq, lk, 0.3, causal), rtol=tol, atol=tol)
    assert run(offsets, key_offsets[:-1])[0] == 3
    assert run(offsets, key_offsets - 1)[0] == 1


@pytest.mark.parametrize("dtype,causal,heads,hv", [("float64", False, (4, 2), 16), ("float32", True, (2, 1), 16),
                                                   ("float64", True, (1, 1), 5)])
def test_cuda_kernel_on_the_emulator(dtype, causal, heads, hv):
    """The packed CUDA kernel on the emulator (8 query rows per block, at most 4 blocks: the
    grid-stride loop and the bisection over sequences run): empty sequences, several query
    blocks per sequence, every element written (the output is poisoned first)."""
    rng = np.random.default_rng(7)
    lengths = [17, 0, 3, 40, 0, 8, 1]
    q, k, v = (x.values for x in packed(rng, lengths, heads, 16, hv))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    out = np.full((len(q), heads[0], hv), np.nan, dtype)
    args = [x.astype(dtype) for x in (q, k, v, np.array(0.25))]
    assert flash_attention_varlen(emulated_device(), *args, offsets, out, causal)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(out, per_sequence(q, k, v, lengths, 0.25, causal), rtol=tol, atol=tol)


def test_cuda_block_counts_on_the_emulator():
    """The query blocks before each sequence (8 rows a block), counted by 64 threads over
    more sequences than threads; offsets past [0, T] clamped, never read out of bounds."""
    dev = emulated_device()
    fn = dev.load([varlen_blocks_kernel(8)])[varlen_blocks_kernel(8).name]
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 30, 150)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    blk = np.full(151, -1, np.int64)
    dev.launch(fn, 1, 64, [offsets, blk], [150, int(offsets[-1])])
    np.testing.assert_array_equal(blk, np.concatenate([[0], np.cumsum(-(-lengths // 8))]))
    bad = np.array([0, 20, 5, 99], np.int64)                  # T = 10: lengths 10, 0, 5 after clamping
    blk = np.full(4, -1, np.int64)
    dev.launch(fn, 1, 64, [bad, blk], [3, 10])
    np.testing.assert_array_equal(blk, [0, 2, 2, 3])


def test_cuda_variants_compile_with_nvrtc():
    """What a GPU compiles at run time: the packed kernel for each dtype, mask and block
    size at head sizes 64 and 80 (the encoder's and an odd one), and the block counter."""
    from relaxjax.backends.cuda.device import module_source
    from test_cuda import nvrtc_errors
    kernels = [attention_kernel(d, h, h, nt, c, 0, varlen=True) for d in ("float32", "float64")
               for h in (64, 80) for nt in (256, 64) for c in (False, True)]
    kernels += [varlen_blocks_kernel(bq) for bq in (32, 16, 8)]
    assert all(k is not None for k in kernels)
    assert nvrtc_errors(module_source(kernels), "attention_varlen.cu") is None
    with pytest.raises(ValueError, match="takes no key or query lengths"):
        attention_kernel("float32", 64, 64, 256, False, 1, varlen=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_and_integer_inputs(backend):
    """The kernels take float32/float64: float16 inputs run in float32 and come back float16;
    integer inputs run in float64 (NumPy's promotion of exp), as the oracle does."""
    rng = np.random.default_rng(5)
    lengths = [3, 0, 7, 1]
    q, k, v = packed(rng, lengths, (2, 1), 8, 8)
    f = rj.jit(lambda q, k, v: ragged.dot_product_attention(q, k, v, is_causal=True), backend=backend)
    half = [ragged.from_lengths(t.values.astype(np.float16), lengths) for t in (q, k, v)]
    got = f(*half).values
    assert got.dtype == np.float16
    want = per_sequence(*(t.values.astype(np.float16).astype(np.float64) for t in (q, k, v)), lengths,
                        1 / np.sqrt(8), True)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    ints = [ragged.from_lengths(np.round(t.values * 2).astype(np.int32), lengths) for t in (q, k, v)]
    got = f(*ints).values
    assert got.dtype == np.float64
    want = per_sequence(*(t.values.astype(np.float64) for t in ints), lengths, 1 / np.sqrt(8), True)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- cross attention
# pairs of length lists of one batch: zeros on either side, a long key or query sequence
PAIRS = st.integers(1, 6).flatmap(lambda b: st.tuples(
    st.lists(st.one_of(st.integers(0, 40), st.integers(290, 300)), min_size=b, max_size=b),
    st.lists(st.one_of(st.integers(0, 40), st.integers(290, 300)), min_size=b, max_size=b)))


@given(pair=PAIRS, heads=st.sampled_from([(1, 1), (4, 2)]), h=st.sampled_from([8, 64]), causal=st.booleans(),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_cross_attention_matches_a_loop_over_sequences(pair, heads, h, causal, dtype, seed):
    """Queries of one ragged batch against keys and values of another (the same batch,
    other lengths): each query sequence against its own key sequence, on every backend."""
    lq, lk = pair
    rng = np.random.default_rng(seed)
    q, k, v = cross_packed(rng, lq, lk, heads, h, 24, dtype)
    want = cross_oracle(*(x.values.astype(np.float64) for x in (q, k, v)), lq, lk, 1 / np.sqrt(h), causal)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == "float64" else dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(ragged.dot_product_attention(q, k, v, is_causal=causal).values, want, **tol)
    for backend in BACKENDS:
        got = _attention(backend, causal, cross=True)(q, k, v)
        np.testing.assert_array_equal(got.offsets, q.offsets)
        np.testing.assert_allclose(got.values, want, **tol)




def test_cross_attention_is_one_library_call():
    rng = np.random.default_rng(0)
    q, k, v = cross_packed(rng, [3, 0, 7], [5, 2, 0], (2, 1), 8, 8, "float32")
    text = rj.jit(lambda q, k, v: ragged.dot_product_attention(q, k, v, is_causal=True)).lower(q, k, v) \
        .as_text("optimized")
    assert text.count("call_library(") == 1
    assert 'call_library("nn.attention_varlen_cross_causal_f32", q_values, k_values, v_values' in text
    same = rj.jit(lambda q: ragged.dot_product_attention(q, q, q)).lower(q).as_text("optimized")
    assert "nn.attention_varlen_f32" in same and "cross" not in same          # one sequence set



@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_attention_errors(backend):
    x, y = np.zeros((5, 2, 4)), np.zeros((7, 2, 4))
    f = rj.jit(lambda q, k, v, o, ko: nn.dot_product_attention_varlen(q, k, v, o, key_offsets=ko), backend=backend)
    np.testing.assert_array_equal(f(x, y, y, np.array([0, 2, 5]), np.array([0, 7, 7])), np.zeros((5, 2, 4)))
    for offsets, key_offsets in (([0, 2, 5], [0, 8, 7]), ([0, 2, 5], [0, 3, 6]), ([0, 2, 4], [0, 3, 7]),
                                 ([0, 2, 5], [1, 3, 7])):
        with pytest.raises(ValueError, match="offsets must run from 0 to the number of packed rows"):
            f(x, y, y, np.array(offsets), np.array(key_offsets))
    with pytest.raises(rj.ShapeError, match="entries .batch . 1. of offsets and key_offsets"):
        f(x, y, y, np.array([0, 2, 5]), np.array([0, 7]))
    with pytest.raises(rj.ShapeError, match="packed rows .axis 0. of key and value"):
        nn.dot_product_attention_varlen(x, y, y[:6], np.array([0, 5]), key_offsets=np.array([0, 7]))
    with pytest.raises(ValueError, match="key_offsets must be a 1-d integer array"):
        nn.dot_product_attention_varlen(x, y, y, np.array([0, 5]), key_offsets=np.array([0.0, 7.0]))
    q, k = ragged.from_lengths(x, [2, 3]), ragged.from_lengths(y, [4, 3])
    with pytest.raises(ValueError, match="key and value hold different sequences"):
        ragged.dot_product_attention(q, k, ragged.from_lengths(y, [3, 4]))


@pytest.mark.parametrize("dtype,causal", [("float64", True), ("float32", False)])
def test_cross_attention_cuda_kernel_on_the_emulator(dtype, causal):
    """The packed CUDA kernel with key offsets of their own (8 query rows per block): empty
    query and key sequences, keys longer and shorter than the queries."""
    rng = np.random.default_rng(8)
    lq, lk = [17, 0, 3, 9, 5], [4, 6, 0, 30, 5]
    q, k, v = (x.values for x in cross_packed(rng, lq, lk, (4, 2), 16, 12))
    offsets, key_offsets = (np.concatenate([[0], np.cumsum(x)]).astype(np.int64) for x in (lq, lk))
    out = np.full((len(q), 4, 12), np.nan, dtype)
    args = [x.astype(dtype) for x in (q, k, v, np.array(0.25))]
    assert flash_attention_varlen(emulated_device(), *args, offsets, out, causal, key_offsets)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(out, cross_oracle(q, k, v, lq, lk, 0.25, causal), rtol=tol, atol=tol)
