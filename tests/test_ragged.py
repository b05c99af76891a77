"""Ragged arrays (``relaxjax.ragged``, issue 20's first step): sequences of different lengths
packed without padding, through ``jit`` as a pytree of values and offsets (one compile for
every batch and lengths), each op against a per-sequence NumPy loop in float64 over
hypothesis-drawn lengths (empty sequences, all equal, one long one) on every backend."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.nn as nn
import relaxjax.numpy as rnp
from relaxjax import ragged, ragged_segments

from helpers import BACKENDS

LENGTHS = st.one_of(st.lists(st.integers(0, 9), min_size=1, max_size=6),
                    st.integers(1, 5).map(lambda n: [3] * n),                 # all equal
                    st.lists(st.integers(0, 3), min_size=1, max_size=4).map(lambda l: l + [97]))


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _layer(r, w, b, g):
    """A transformer-ish row-wise block on a ragged batch: projection, activation, norm,
    then reductions and a softmax over each sequence."""
    h = nn.gelu(r @ w + b)
    h = nn.layer_norm(h, g, None)
    return (h, h.sum(axis=1), h.mean(axis=1), h.max(axis=1), ragged.softmax(h, axis=1), nn.softmax(h),
            h.var(axis=1), h.min(axis=1, keepdims=True), h.var())


def _layer_np(x, w, b, g):
    h = _gelu(x @ w + b)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * g
    if len(h):
        e = np.exp(h - h.max(0))
        col_softmax, row_softmax = e / e.sum(0), np.exp(h - h.max(-1, keepdims=True))
        row_softmax /= row_softmax.sum(-1, keepdims=True)
        return h, h.sum(0), h.mean(0), h.max(0), col_softmax, row_softmax, h.var(0), h.min(0, keepdims=True)
    z = np.zeros((0, w.shape[1]))
    nan = np.full(w.shape[1], np.nan)
    return h, np.zeros(w.shape[1]), nan, np.full(w.shape[1], -np.inf), z, z, nan, np.full((1, w.shape[1]), np.inf)


@given(lengths=LENGTHS, seed=st.integers(0, 2 ** 16))
@settings(max_examples=20, deadline=None)
def test_ragged_ops_match_a_loop_over_sequences(lengths, seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal((n, 5)) for n in lengths]
    w, b, g = rng.standard_normal((5, 7)) / 2, rng.standard_normal(7), rng.standard_normal(7)
    r = ragged.from_list(seqs)
    want = [_layer_np(x, w, b, g) for x in seqs]
    for backend in BACKENDS:
        h, s, m, mx, col, row, var, mn, var_all = rj.jit(_layer, backend=backend)(r, w, b, g)
        for got, k in ((h, 0), (col, 4), (row, 5)):
            assert isinstance(got, ragged.RaggedArray)
            for seq, ref in zip(got.to_list(), want):
                np.testing.assert_allclose(seq, ref[k], rtol=1e-10, atol=1e-12)
        for got, k in ((s, 1), (m, 2), (mx, 3), (var, 6), (mn, 7)):
            np.testing.assert_allclose(got, np.stack([ref[k] for ref in want]), rtol=1e-10, atol=1e-12)
        all_h = np.concatenate([ref[0] for ref in want])
        np.testing.assert_allclose(var_all, all_h.var() if len(all_h) else np.nan, rtol=1e-10)



def test_ragged_ops_on_the_cuda_emulator():
    """The same layer through the CUDA backend's code, run by its CPU emulator (CI has no
    GPU): the ragged reductions' variable loops, tiles of a long sequence included."""
    f = rj.jit(_layer, backend="cuda-emulated")
    rng = np.random.default_rng(3)
    w, b, g = rng.standard_normal((5, 7)) / 2, rng.standard_normal(7), rng.standard_normal(7)
    for lengths in ([2, 0, 5], [1], [3, 3, 3], [0, 1, 300]):
        seqs = [rng.standard_normal((n, 5)) for n in lengths]
        want = [_layer_np(x, w, b, g) for x in seqs]
        h, s, m, mx, col, row, var, mn, _ = f(ragged.from_list(seqs), w, b, g)
        for got, k in ((h, 0), (col, 4), (row, 5)):
            for seq, ref in zip(got.to_list(), want):
                np.testing.assert_allclose(seq, ref[k], rtol=1e-10, atol=1e-12)
        for got, k in ((s, 1), (m, 2), (mx, 3), (var, 6), (mn, 7)):
            np.testing.assert_allclose(got, np.stack([ref[k] for ref in want]), rtol=1e-10, atol=1e-12)
    assert f.cache_info().compiles == 1

def test_one_compile_for_every_batch_and_lengths():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3))
    f = rj.jit(lambda r, w: (rnp.tanh(r @ w)).sum(axis=1))
    for lengths in ([3, 1], [0, 7, 2, 2], [128], [5] * 9):
        seqs = [rng.standard_normal((n, 4)) for n in lengths]
        np.testing.assert_allclose(f(ragged.from_list(seqs), w), np.stack([np.tanh(x @ w).sum(0) for x in seqs]),
                                   rtol=1e-12, atol=1e-12)
    assert f.cache_info().compiles == 1


@given(lengths=LENGTHS, seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_padding_and_packing_round_trip(lengths, seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal((n, 2)) for n in lengths]
    r = ragged.from_list(seqs)
    L = max(lengths)
    padded = np.zeros((len(seqs), L, 2)) - 1.0
    for k, x in enumerate(seqs):
        padded[k, :len(x)] = x
    np.testing.assert_array_equal(r.to_padded(fill=-1.0), padded)
    for backend in BACKENDS:
        got = rj.jit(lambda r: r.to_padded(fill=-1.0, max_len=L + 2), backend=backend)(r)
        np.testing.assert_array_equal(got[:, :L], padded)
        assert (got[:, L:] == -1.0).all()
        back = rj.jit(lambda x, n: ragged.from_padded(x, n), backend=backend)(padded, np.array(lengths))
        for a, b in zip(back.to_list(), seqs):
            np.testing.assert_array_equal(a, b)
    eager = ragged.from_padded(padded, lengths)
    np.testing.assert_array_equal(eager.values, r.values)
    np.testing.assert_array_equal(eager.offsets, r.offsets)
    np.testing.assert_array_equal(ragged.from_lengths(r.values, lengths).lengths, lengths)


def test_bad_ragged_input_says_what_is_wrong():
    v = np.zeros((5, 2))
    with pytest.raises(ValueError, match="offsets must run from 0 to len"):
        ragged.from_offsets(v, [0, 2, 4])
    with pytest.raises(ValueError, match="offsets must run from 0 to len"):
        ragged.from_offsets(v, [0, 3, 2, 5])
    with pytest.raises(ValueError, match="lengths must be a 1-d array of non-negative"):
        ragged.from_lengths(v, [3, -1, 3])
    with pytest.raises(ValueError, match="offsets must run from 0 to len"):
        ragged.from_lengths(v, [1, 1])
    with pytest.raises(ValueError, match="one inner shape"):
        ragged.from_list([np.zeros((2, 3)), np.zeros((1, 4))])
    a, b = ragged.from_lengths(v, [2, 3]), ragged.from_lengths(v, [3, 2])
    with pytest.raises(ValueError, match="different lengths"):
        a + b
    for backend in BACKENDS:        # inside jit: the offsets compared when the function runs
        add = rj.jit(lambda a, b: (a + b).values, backend=backend)
        np.testing.assert_array_equal(add(a, a), 2 * v)
        with pytest.raises(ValueError, match=r"offsets of two operands differ: \[0, 2, 5\] and \[0, 3, 5\]"):
            add(a, b)
    with pytest.raises(ValueError, match="needs max_len="):
        rj.jit(lambda r: r.to_padded())(a)
    with pytest.raises(ValueError, match="does not broadcast over the inner dims"):
        rj.jit(lambda r, x: r * x)(a, np.ones((2, 5, 2)))
    with pytest.raises(NotImplementedError, match="ragged @ ragged"):
        a @ a


def _attention_np(q, k, v, causal):
    if not len(q):
        return np.zeros(q.shape)
    s = np.einsum("tnh,snh->nts", q, k) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(len(k))[None, None, :] <= np.arange(len(q))[None, :, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("nts,snh->tnh", p / p.sum(-1, keepdims=True), v)


@given(lengths=LENGTHS, causal=st.booleans(), seed=st.integers(0, 2 ** 16))
@settings(max_examples=12, deadline=None)
def test_attention_within_each_sequence(lengths, causal, seed):
    """Varlen attention on ragged q, k, v (three arrays of the same lengths, each its own
    argument): each sequence attends to itself only, as a per-sequence loop."""
    rng = np.random.default_rng(seed)
    qs, ks, vs = ([rng.standard_normal((n, 2, 8)) for n in lengths] for _ in range(3))
    L = max(lengths)
    for backend in BACKENDS:
        f = rj.jit(lambda q, k, v: ragged.dot_product_attention(q, k, v, is_causal=causal, max_len=L),
                   backend=backend)
        out = f(ragged.from_list(qs), ragged.from_list(ks), ragged.from_list(vs))
        for o, q, k, v in zip(out.to_list(), qs, ks, vs):
            np.testing.assert_allclose(o, _attention_np(q, k, v, causal), rtol=1e-10, atol=1e-12)


def test_two_ragged_arguments_of_one_op():
    rng = np.random.default_rng(4)
    a, b = ([rng.standard_normal((n, 3)) for n in (2, 5, 0)] for _ in range(2))
    got = rj.jit(lambda x, y: x * y + 1.0)(ragged.from_list(a), ragged.from_list(b))
    for g, x, y in zip(got.to_list(), a, b):
        np.testing.assert_allclose(g, x * y + 1.0)


def test_ragged_encoder_example():
    """examples/ragged_encoder.py --small: the layer on packed sentences matches NumPy
    sentence by sentence (it asserts so) and compiles once for every batch."""
    import pathlib
    import subprocess
    import sys
    script = pathlib.Path(__file__).resolve().parents[1] / "examples" / "ragged_encoder.py"
    r = subprocess.run([sys.executable, str(script), "--small"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "compiles: ragged 1, padded 1 for 3 batches" in r.stdout, r.stdout


def _extremes(r):
    return r.sum(axis=1), r.max(axis=1), r.min(axis=1)


_EXTREMES = {backend: rj.jit(_extremes, backend=backend) for backend in BACKENDS}


@given(lengths=LENGTHS, inner=st.sampled_from([(), (3,), (2, 5)]),
       dtype=st.sampled_from(["float32", "float64", "int32", "int64", "float16"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_reductions_over_the_ragged_axis_in_every_dtype(lengths, inner, dtype, seed):
    """sum/max/min over each sequence inside ``jit``: loops over ``offsets[s]..offsets[s+1]``
    (``ragged_segments``) for float32/64 and int32/64, the scatter for the others; NumPy's
    per-sequence result (an empty sequence: 0, the dtype's least, its greatest), the sum in
    the values' dtype, as the scatter gave it, eagerly and on every backend."""
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    values = (rng.standard_normal((n, *inner)) * 20).astype(dtype)
    r = ragged.from_lengths(values, np.array(lengths))
    parts = np.split(values, np.cumsum(lengths)[:-1])
    low, high = ((-np.inf, np.inf) if np.dtype(dtype).kind == "f" else
                 (np.iinfo(dtype).min, np.iinfo(dtype).max))
    want_sum = np.stack([p.astype(np.float64).sum(0) if len(p) else np.zeros(inner) for p in parts])
    want_max = np.stack([p.max(0) if len(p) else np.full(inner, low) for p in parts])
    want_min = np.stack([p.min(0) if len(p) else np.full(inner, high) for p in parts])
    tol = {"float16": 5e-2, "float32": 1e-5}.get(dtype, 1e-12)
    for backend in ["eager"] + BACKENDS:         # eagerly: on the NumPy arrays, a scatter
        s, mx, mn = _extremes(r) if backend == "eager" else _EXTREMES[backend](r)
        assert s.dtype == mx.dtype == mn.dtype == np.dtype(dtype)
        np.testing.assert_allclose(s.astype(np.float64), want_sum, rtol=tol, atol=tol * 100)
        np.testing.assert_array_equal(mx, want_max.astype(dtype))
        np.testing.assert_array_equal(mn, want_min.astype(dtype))


@given(lengths=st.lists(st.sampled_from([0, 1, 7, 127, 128, 129, 255, 256, 257, 1000, 3001]), min_size=1, max_size=6),
       dtype=st.sampled_from(["float32", "float64", "int64"]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=10, deadline=None)
def test_reductions_over_long_sequences_run_by_tiles(lengths, dtype, seed):
    """A sequence longer than a tile (``ragged_segments.TILE_ROWS``) is reduced by tiles of
    its rows in parallel, then their partial results (CoRa's split of work inside a
    sequence): tile edges (127-129, 255-257 rows), one long sequence among short or empty
    ones, on every backend; and the gradient of a sum and a max through them."""
    assert ragged_segments.TILE_ROWS == 128
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal((int(sum(lengths)), 3)) * 20).astype(dtype)
    r = ragged.from_lengths(values, np.array(lengths))
    parts = np.split(values, np.cumsum(lengths)[:-1])
    low, high = ((-np.inf, np.inf) if np.dtype(dtype).kind == "f" else
                 (np.iinfo(dtype).min, np.iinfo(dtype).max))
    want = (np.stack([p.astype(np.float64).sum(0) if len(p) else np.zeros(3) for p in parts]),
            np.stack([p.max(0) if len(p) else np.full(3, low) for p in parts]),
            np.stack([p.min(0) if len(p) else np.full(3, high) for p in parts]))
    for backend in BACKENDS:
        s, mx, mn = _EXTREMES[backend](r)
        np.testing.assert_allclose(s.astype(np.float64), want[0], rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-2 if dtype == "float32" else 1e-9)
        np.testing.assert_array_equal(mx, want[1].astype(dtype))
        np.testing.assert_array_equal(mn, want[2].astype(dtype))
    if dtype == "float64":
        def loss(x, off):
            q = ragged.from_offsets(x, off)
            return (q.sum(axis=1) ** 2).sum() + q.max(axis=1).sum()
        off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        got = rj.jit(rj.grad(loss))(values, off)
        grad = np.zeros_like(values)
        for p0, p1 in zip(off[:-1], off[1:]):
            if p1 > p0:
                seg = values[p0:p1]
                hit = seg == seg.max(0)
                grad[p0:p1] = 2 * seg.sum(0) + hit / hit.sum(0)
        np.testing.assert_allclose(got, grad, rtol=1e-10)


def test_ragged_axis_reductions_run_variable_loops_and_differentiate():
    """The loop-level program of a jitted ragged sum reads its loop bounds from the offsets
    (one loop per sequence, no scatter); its gradient, and a max's (the row attaining it, or
    shared among ties as the scatter shared them), are NumPy's."""
    x = np.random.default_rng(0).standard_normal((9, 4))
    x[7] = x[6]                                      # a tie for the max of the last sequence
    off = np.array([0, 2, 2, 6, 9])
    f = rj.jit(lambda x, off: ragged.from_offsets(x, off).sum(axis=1))
    loops = f.lower(x, off).as_text("loops")
    assert "in range(off[s], off[s + 1])" in loops and "scatter" not in f.lower(x, off).as_text("optimized")

    def loss(x, off):
        r = ragged.from_offsets(x, off)
        return (r.sum(axis=1) ** 2).sum() + r.max(axis=1)[rnp.array([0, 2, 3])].sum()
    got = rj.jit(rj.grad(loss))(x, off)
    want = np.zeros_like(x)
    for s in range(4):
        rows = slice(off[s], off[s + 1])
        want[rows] += 2 * x[rows].sum(0)
        if s in (0, 2, 3) and off[s + 1] > off[s]:
            seg = x[rows]
            hit = seg == seg.max(0)
            want[rows] += hit / hit.sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_printed_ir_shows_ragged_types():
    """A ragged array's packed values, and every value an op on it gives, print with their
    ragged type: the batch, each sequence's length read from the offsets, the inner dims;
    a block's with two ragged axes."""
    r = ragged.from_lengths(np.ones((5, 4), np.float32), np.array([2, 3]))
    text = rj.jit(lambda r, w: nn.gelu(r @ w).sum(axis=1)).lower(r, np.ones((4, 3), np.float32)).as_text("traced")
    assert "# r_values: ragged f32[r_offsets0 - 1, len[r_offsets], r_values1]" in text
    assert "= matmul(r_values, w)  # ragged f32[r_offsets0 - 1, len[r_offsets], w1]" in text
    block = rj.jit(lambda q: ragged.matmul_t(q, q).values).lower(r).as_text("traced")
    assert "# ragged f32[r_offsets0 - 1, len[r_offsets], len[r_offsets]]" in block.replace("q_", "r_")


def _over_batch(r):
    return (r.sum(axis=0), r.mean(axis=0), r.max(axis=0), r.min(axis=0, keepdims=True), r.var(axis=0))


@given(lengths=LENGTHS, inner=st.sampled_from([(), (3,)]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_reductions_over_the_batch_axis_are_numpys_masked_ones(lengths, inner, seed):
    """Over the batch axis (0), position p is reduced over the sequences longer than p:
    NumPy's masked arrays on the padded form with the padding masked, (longest, *inner)
    (inside ``jit`` the longest length is a run-time dim), eagerly and on every backend."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((int(sum(lengths)), *inner))
    r = ragged.from_lengths(values, np.array(lengths))
    longest = max(lengths)
    padded = np.zeros((len(lengths), longest, *inner))
    mask = np.ones_like(padded, dtype=bool)
    for b, part in enumerate(np.split(values, np.cumsum(lengths)[:-1])):
        padded[b, :len(part)], mask[b, :len(part)] = part, False
    m = np.ma.masked_array(padded, mask)
    want = [m.sum(0), m.mean(0), m.max(0), m.min(0, keepdims=True), m.var(0)]
    runs = [("eager", _over_batch(r))] + [(b, rj.jit(_over_batch, backend=b)(r)) for b in BACKENDS]
    for where, got in runs:
        for g, w in zip(got, want):
            assert g.shape == w.shape, where
            np.testing.assert_allclose(g, np.ma.getdata(w), rtol=1e-12, atol=1e-12, err_msg=where)
    with pytest.raises(NotImplementedError, match="softmax over the batch axis"):
        ragged.softmax(r, axis=0)
