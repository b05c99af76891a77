"""Ragged x ragged blocks (``relaxjax.ragged_block``, issue 20): per-sequence products
``q_b @ k_b.T`` packed without padding, and what runs on them (elementwise ops, masks,
softmax and reductions over rows and columns, ``block @ ragged``, transposes, padding),
each against a per-sequence float64 NumPy loop over hypothesis-drawn lengths (empty
sequences, all equal, one long one, batch 1), inside ``jit`` on every backend (one compile
for every batch and lengths) and outside it on NumPy arrays; blocks as ``jit`` arguments
and results; the gradient; the errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import ragged
from relaxjax.ragged_block import RaggedBlock

from helpers import BACKENDS

LENGTHS = st.one_of(st.lists(st.integers(0, 9), min_size=1, max_size=6),               # zeros among them
                    st.tuples(st.integers(1, 6), st.integers(1, 5)).map(lambda p: [p[0]] * p[1]),  # all equal
                    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(lambda l: l + [61]),   # one long
                    st.integers(0, 12).map(lambda n: [n]))                                  # batch 1


def _ops(q, k, v, bias, c):
    """Every op of a block once, from ragged q, k, v of the same sequences."""
    s = ragged.matmul_t(q, k) * c
    p = ragged.softmax(ragged.causal_mask(s), axis=2)
    i, j = s.positions()
    return dict(
        s=s, p=p, o=p @ v,
        row_sum=s.sum(axis=2), row_max=s.max(axis=2), col_min=s.min(axis=1), row_mean=s.mean(axis=2),
        col_sum=s.sum(axis=1), seq_sum=s.sum(axis=(1, 2)), seq_max=s.max(axis=(1, 2)),
        seq_mean=s.mean(axis=(1, 2)), total=s.sum(),
        band=s.masked(abs(i - j) <= 2, fill=0.0),
        window=s.masked((j <= i) & ~(i - j > 3)),
        shifted=rnp.exp(s - s.expand(s.max(axis=2), axis=2)),
        col_softmax=ragged.softmax(s, axis=1),
        sym=(s + s.T) / 2 + bias,
        down_cols=s.expand(q.sum(axis=-1), axis=1))


def _ops_np(q, k, v, bias, c, heads):
    """The same for one sequence's q, k, v in NumPy, float64 (blocks ``(n, n, *heads)``)."""
    n = len(q)
    s = np.einsum("i...d,j...d->ij...", q, k) * c
    i = np.arange(n).reshape((n, 1) + (1,) * heads)
    j = np.arange(n).reshape((1, n) + (1,) * heads)
    m = np.where(j <= i, s, -np.inf)
    p = np.exp(m - m.max(1, keepdims=True, initial=-np.inf))
    p /= p.sum(1, keepdims=True)
    e = np.exp(s - s.max(0, keepdims=True, initial=-np.inf))
    with np.errstate(invalid="ignore"):
        seq_mean = s.mean((0, 1)) if n else np.full(s.shape[2:], np.nan)
    return dict(
        s=s, p=p, o=np.einsum("ij...,j...e->i...e", p, v),
        row_sum=s.sum(1), row_max=s.max(1, initial=-np.inf), col_min=s.min(0, initial=np.inf),
        row_mean=s.sum(1) / max(n, 1), col_sum=s.sum(0), seq_sum=s.sum((0, 1)),
        seq_max=s.max((0, 1), initial=-np.inf), seq_mean=seq_mean, total=s.sum(),
        band=np.where(np.abs(i - j) <= 2, s, 0.0),
        window=np.where((j <= i) & ~(i - j > 3), s, -np.inf),
        shifted=np.exp(s - s.max(1, keepdims=True, initial=-np.inf)),
        col_softmax=e / e.sum(0, keepdims=True),
        sym=(s + s.swapaxes(0, 1)) / 2 + bias,
        down_cols=np.broadcast_to(q.sum(-1)[None], (n,) + q.sum(-1).shape))


def _compare(got: dict, want: list, **tol):
    """``got`` (one _ops result) against the per-sequence oracles ``want``."""
    for name, g in got.items():
        if isinstance(g, (RaggedBlock, ragged.RaggedArray)):
            seqs = g.to_list()
            assert len(seqs) == len(want), name
            for b, (x, ref) in enumerate(zip(seqs, want)):
                np.testing.assert_allclose(x, ref[name], err_msg=f"{name}, sequence {b}", **tol)
        elif name == "total":
            np.testing.assert_allclose(g, sum(ref[name] for ref in want), err_msg=name, **tol)
        else:                           # per sequence: (batch, *heads)
            np.testing.assert_allclose(g, np.stack([ref[name] for ref in want]), err_msg=name, **tol)


_JITTED: dict = {}


def _jitted(backend: str):
    """One jitted _ops per backend, reused across examples (each traced once per rank)."""
    if backend not in _JITTED:
        _JITTED[backend] = rj.jit(_ops, backend=backend)
    return _JITTED[backend]


def _qkv(rng, lengths, heads, d=3, dv=2, dtype="float64"):
    inner = (heads,) if heads else ()
    t = int(sum(lengths))
    return [ragged.from_lengths(rng.standard_normal((t,) + inner + (n,)).astype(dtype), lengths)
            for n in (d, d, dv)]


@given(lengths=LENGTHS, heads=st.sampled_from([0, 1, 3]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_block_ops_match_a_loop_over_sequences(lengths, heads, seed):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, lengths, heads)
    bias = rng.standard_normal((heads,) if heads else ())
    c = np.float64(0.7)
    want = [_ops_np(qb, kb, vb, bias, c, 1 if heads else 0)
            for qb, kb, vb in zip(q.to_list(), k.to_list(), v.to_list())]
    tol = dict(rtol=1e-10, atol=1e-10)
    _compare(_ops(q, k, v, bias, c), want, **tol)                  # eagerly, on NumPy arrays
    for backend in BACKENDS:
        got = _jitted(backend)(q, k, v, bias, c)
        assert isinstance(got["s"], RaggedBlock) and isinstance(got["o"], ragged.RaggedArray)
        np.testing.assert_array_equal(got["o"].offsets, v.offsets)
        _compare(got, want, **tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_compile_for_every_batch_and_lengths(backend):
    def attention(q, k, v):
        s = ragged.matmul_t(q, k) * 0.5
        return ragged.softmax(ragged.causal_mask(s), axis=2) @ v, s.max(axis=(1, 2))
    attention = rj.jit(attention, backend=backend)
    rng = np.random.default_rng(2)
    # all empty first: the packed rows are then traced as >= 0 (automatic mode), not >= 1
    for lengths in ([0, 0], [5, 0, 49], [1], [8] * 7, [97, 3, 3, 0, 12]):
        q, k, v = _qkv(rng, lengths, 2)
        out, top = attention(q, k, v)
        for ob, qb, kb, vb, tb in zip(out.to_list(), q.to_list(), k.to_list(), v.to_list(), top):
            ref = _ops_np(qb, kb, vb, 0.0, 0.5, 1)
            np.testing.assert_allclose(ob, ref["o"], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(tb, ref["seq_max"], rtol=1e-12)
    assert attention.cache_info().compiles == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_and_integer_blocks(backend):
    """float32 blocks stay float32 (against the float64 oracle); integer products are exact,
    their sums int64 as NumPy's."""
    rng = np.random.default_rng(3)
    lengths = [4, 0, 9, 1]
    q, k, v = _qkv(rng, lengths, 2, dtype="float32")
    f = rj.jit(lambda q, k, v: ragged.softmax(ragged.matmul_t(q, k), axis=2) @ v, backend=backend)
    out = f(q, k, v)
    assert out.dtype == np.float32
    for ob, qb, kb, vb in zip(out.to_list(), q.to_list(), k.to_list(), v.to_list()):
        s = np.einsum("ihd,jhd->ijh", qb.astype(np.float64), kb.astype(np.float64))
        p = np.exp(s - s.max(1, keepdims=True, initial=-np.inf))
        np.testing.assert_allclose(ob, np.einsum("ijh,jhe->ihe", p / p.sum(1, keepdims=True), vb), rtol=2e-5, atol=2e-6)
    ints = [ragged.from_lengths(rng.integers(-5, 6, (14, 3)).astype(np.int32), lengths) for _ in range(2)]
    def products(a, b):
        s = ragged.matmul_t(a, b)
        return s, s.sum(axis=2), s.max(axis=1)
    for s, rows, cols in (rj.jit(products, backend=backend)(*ints), products(*ints)):
        assert s.dtype == np.int32 and rows.dtype == np.int64 and cols.dtype == np.int32
        for sb, rb, cb, ab, bb in zip(s.to_list(), rows.to_list(), cols.to_list(), *(x.to_list() for x in ints)):
            np.testing.assert_array_equal(sb, ab @ bb.T)
            np.testing.assert_array_equal(rb, (ab @ bb.T).sum(1))
            np.testing.assert_array_equal(cb, (ab @ bb.T).max(0, initial=np.iinfo(np.int32).min))


@pytest.mark.parametrize("backend", BACKENDS)
def test_blocks_as_arguments_and_results(backend):
    """A block made outside ``jit`` goes in (its entry count a dim of the argument), its
    row reductions meet ragged arrays of the same sequences (run-time dims asserted equal),
    blocks of separate products add up, and blocks come back out."""
    rng = np.random.default_rng(4)
    lengths = [3, 0, 6, 2]
    q, k, v = _qkv(rng, lengths, 0)
    s = ragged.matmul_t(q, k)                            # eagerly: NumPy arrays

    def use(s, q, k, v):
        total = s + ragged.matmul_t(k, q)                # an argument's entries and a product's
        rows = s.max(axis=2) + q.sum(axis=-1)            # a block's reduction and a ragged array
        return total, rows, ragged.softmax(s, axis=2) @ v, s.to_padded(fill=-1.0, max_len=7)
    use = rj.jit(use, backend=backend)
    total, rows, out, padded = use(s, q, k, v)
    assert isinstance(total, RaggedBlock)
    again = use(total, q, k, v)[0]                       # a block returned goes back in
    for b, (qb, kb, vb) in enumerate(zip(q.to_list(), k.to_list(), v.to_list())):
        sb = qb @ kb.T
        np.testing.assert_allclose(total.to_list()[b], sb + sb.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(again.to_list()[b], sb + 2 * sb.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rows.to_list()[b], sb.max(1, initial=-np.inf) + qb.sum(-1), rtol=1e-12)
        p = np.exp(sb - sb.max(1, keepdims=True, initial=-np.inf))
        np.testing.assert_allclose(out.to_list()[b], (p / p.sum(1, keepdims=True)) @ vb, rtol=1e-10, atol=1e-12)
        want = np.full((7, 7), -1.0)
        want[:len(qb), :len(qb)] = sb
        np.testing.assert_allclose(padded[b], want, rtol=1e-12, atol=1e-12)
    assert use.cache_info().compiles == 1


def test_padding_and_lists_round_trip():
    rng = np.random.default_rng(5)
    blocks = [rng.standard_normal((n, n, 2)) for n in (2, 0, 5, 1)]
    s = RaggedBlock.from_list(blocks)
    np.testing.assert_array_equal(s.block_offsets, [0, 4, 4, 29, 30])
    np.testing.assert_array_equal(s.lengths, [2, 0, 5, 1])
    assert s.values.shape == (30, 2) and s.inner_shape == (2,) and s.ndim == 4 and s.batch == 4
    for got, want in zip(s.to_list(), blocks):
        np.testing.assert_array_equal(got, want)
    padded = s.to_padded(fill=9.0)
    assert padded.shape == (4, 5, 5, 2)
    for b, x in enumerate(blocks):
        n = len(x)
        np.testing.assert_array_equal(padded[b, :n, :n], x)
        assert (padded[b, n:] == 9.0).all() and (padded[b, :, n:] == 9.0).all()
    same = RaggedBlock.from_parts(s.values, ragged.from_lengths(np.zeros((8, 1)), [2, 0, 5, 1]))
    np.testing.assert_array_equal(same.block_offsets, s.block_offsets)
    for got, want in zip(s.T.to_list(), blocks):
        np.testing.assert_array_equal(got, want.swapaxes(0, 1))
    assert "RaggedBlock(batch=4" in repr(s)


@pytest.mark.parametrize("causal", [False, True])
def test_gradient_matches_central_differences(causal):
    """d/d(q, k, v) of a loss of attention written with blocks, along random directions."""
    rng = np.random.default_rng(6)
    offsets = np.array([0, 3, 3, 8, 9])

    def loss(qv, kv, vv):
        q, k, v = (ragged.from_offsets(x, offsets) for x in (qv, kv, vv))
        s = ragged.matmul_t(q, k) * 0.5
        p = ragged.softmax(ragged.causal_mask(s) if causal else s, axis=2)
        return ((p @ v).values ** 2).sum()
    args = [rng.standard_normal((9, 2, 3)) for _ in range(3)]
    grads = rj.jit(rj.grad(loss, argnums=(0, 1, 2)))(*args)
    for i, g in enumerate(grads):
        d = rng.standard_normal(args[i].shape)
        plus, minus = list(args), list(args)
        plus[i], minus[i] = args[i] + 1e-6 * d, args[i] - 1e-6 * d
        fd = (loss(*plus) - loss(*minus)) / 2e-6
        np.testing.assert_allclose(np.sum(np.asarray(g) * d), fd, rtol=1e-6, atol=1e-8)


def test_bad_input_says_what_is_wrong():
    rng = np.random.default_rng(7)
    a = ragged.from_lengths(rng.standard_normal((5, 3)), [2, 3])
    b = ragged.from_lengths(rng.standard_normal((5, 3)), [3, 2])
    with pytest.raises(ValueError, match=r"x and y hold different sequences \(lengths \[2, 3\] and \[3, 2\]\)"):
        ragged.matmul_t(a, b)
    for backend in BACKENDS:       # inside jit: the offsets compared when the function runs
        f = rj.jit(lambda x, y: ragged.matmul_t(x, y).sum(), backend=backend)
        with pytest.raises(ValueError, match=r"matmul_t: x and y: their offsets differ: \[0, 2, 5\] and \[0, 3, 5\]"):
            f(a, b)
        g = rj.jit(lambda s, v: s @ v, backend=backend)
        with pytest.raises(ValueError, match=r"ragged block @ ragged: the block and v: their offsets differ"):
            g(ragged.matmul_t(a, a), b)
        # a block whose values do not have the entries its offsets say
        bad = RaggedBlock(np.zeros(12), a.offsets, np.array([0, 4, 13]))
        with pytest.raises(ValueError, match="block offsets' last entry and the packed entries differ"):
            rj.jit(lambda s: s.sum(axis=2), backend=backend)(bad)
    s = ragged.matmul_t(a, a)
    with pytest.raises(ValueError, match=r"ragged block @ ragged: the block and v hold different sequences"):
        s @ b
    with pytest.raises(ValueError, match=r"ragged block add: operands 0 and 1 hold different sequences"):
        s + ragged.matmul_t(b, b)
    with pytest.raises(ValueError, match="inner shapes of x and y must be equal"):
        ragged.matmul_t(a, ragged.from_lengths(np.zeros((5, 4)), [2, 3]))
    with pytest.raises(ValueError, match="inner shapes of x and y must be equal"):
        ragged.matmul_t(ragged.from_lengths(np.zeros(5), [2, 3]), ragged.from_lengths(np.zeros(5), [2, 3]))
    with pytest.raises(TypeError, match="must be RaggedArrays"):
        ragged.matmul_t(a, a.values)
    with pytest.raises(ValueError, match=r"must start with the block's \(2,\)"):
        heads = ragged.from_lengths(np.zeros((5, 2, 3)), [2, 3])
        ragged.matmul_t(heads, heads) @ ragged.from_lengths(np.zeros((5, 3, 3)), [2, 3])
    with pytest.raises(NotImplementedError, match="only a RaggedArray of the same sequences"):
        s @ np.ones((3, 3))
    with pytest.raises(NotImplementedError, match=r"ragged @ ragged: .* use ragged.matmul_t\(q, k\)"):
        a @ a
    with pytest.raises(NotImplementedError, match=r"s.T @ r"):
        a @ s
    with pytest.raises(ValueError, match="is a RaggedArray, whose rows do not line up"):
        s + a
    with pytest.raises(ValueError, match="is a RaggedArray, whose rows do not line up"):
        a + s
    with pytest.raises(ValueError, match="a dense operand of rank 1 does not broadcast"):
        s * np.ones(3)
    with pytest.raises(NotImplementedError, match=r"keepdims=True\) over a ragged axis"):
        s.sum(axis=2, keepdims=True)
    with pytest.raises(NotImplementedError, match="over the batch axis"):
        s.max(axis=0)
    with pytest.raises(np.exceptions.AxisError, match="out of bounds for a ragged block of 3 dims"):
        s.sum(axis=3)
    with pytest.raises(NotImplementedError, match=r"one axis, or \(1, 2\)"):
        s.sum(axis=(0, 2))
    with pytest.raises(ValueError, match="not a ragged axis"):
        s.expand(a.sum(axis=-1), axis=0)
    with pytest.raises(TypeError, match="RaggedBlock of bools"):
        s.masked(np.ones(1, bool))
    with pytest.raises(TypeError, match="a RaggedBlock"):
        ragged.causal_mask(a)
    with pytest.raises(ValueError, match="to_padded inside jit needs max_len="):
        rj.jit(lambda s: s.to_padded())(s)
    with pytest.raises(ValueError, match="to_list inside jit"):
        rj.jit(lambda s: s.to_list())(s)
    with pytest.raises(ValueError, match="need 13 packed entries"):
        RaggedBlock.from_parts(np.zeros(12), a.offsets)
    with pytest.raises(ValueError, match="offsets must be a 1-d integer array"):
        RaggedBlock.from_parts(np.zeros(4), [0, 3, 2])
    with pytest.raises(ValueError, match="must be square"):
        RaggedBlock.from_list([np.zeros((2, 3))])
    with pytest.raises(ValueError, match="no blocks"):
        RaggedBlock.from_list([])


_EMULATED: dict = {}


@pytest.mark.parametrize("heads", [0, 2])
def test_block_ops_on_the_cuda_emulator(heads):
    """Every block op through the CUDA backend's code, run by its CPU emulator (CI has no
    GPU): empty sequences, batch 1, equal lengths, one long sequence, one compile for all."""
    f = _EMULATED.setdefault(heads, rj.jit(_ops, backend="cuda-emulated"))
    rng = np.random.default_rng(heads)
    for lengths in ([3, 0, 5], [1], [4, 4, 4], [0, 2, 23]):
        q, k, v = _qkv(rng, lengths, heads)
        bias = rng.standard_normal((heads,) if heads else ())
        want = [_ops_np(qb, kb, vb, bias, 0.7, 1 if heads else 0)
                for qb, kb, vb in zip(q.to_list(), k.to_list(), v.to_list())]
        _compare(f(q, k, v, bias, np.float64(0.7)), want, rtol=1e-10, atol=1e-10)
    assert f.cache_info().compiles == 1
