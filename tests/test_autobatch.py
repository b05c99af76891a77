"""``rj.autobatch`` (issue 21, first step): per-instance Python over trees, sequences and early
exits, its ``@rj.jit`` cells batched across instances; results equal to running each
instance on its own (float64), for hypothesis-drawn trees and instance counts, both policies,
cells with several outputs; the batched cells compile once whatever the trees."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp

H = 6
RNG = np.random.default_rng(0)
WL, WR, WE = RNG.standard_normal((H, 2 * H)), RNG.standard_normal((H, 2 * H)), RNG.standard_normal((3, H))


@rj.jit
def leaf(e, we):
    return rnp.tanh(e @ we)


@rj.jit
def combine(hl, hr, wl, wr):
    """Two outputs: the new state and a gate (a cell returning a tuple)."""
    g = hl @ wl + hr @ wr
    return rnp.tanh(g[:H]) * (1 / (1 + rnp.exp(-g[H:]))), g.sum()


def encode(tree):
    if isinstance(tree, tuple):
        h, _ = combine(encode(tree[0]), encode(tree[1]), WL, WR)
        return h
    return leaf(tree, WE)


def _tree(rng, n):
    if n == 1:
        return rng.standard_normal(3)
    k = int(rng.integers(1, n))
    return (_tree(rng, k), _tree(rng, n - k))


@given(sizes=st.lists(st.integers(1, 25), min_size=1, max_size=30), policy=st.sampled_from(["depth", "agenda"]),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_trees_match_per_instance(sizes, policy, seed):
    rng = np.random.default_rng(seed)
    trees = [_tree(rng, n) for n in sizes]
    batched = rj.autobatch(encode, policy=policy)
    got = batched(trees)
    for g, t in zip(got, trees):
        np.testing.assert_allclose(g, encode(t), rtol=1e-12, atol=1e-12)
    st_ = batched.stats()
    assert st_["nodes"] == sum(2 * n - 1 for n in sizes)
    assert st_["batches"] < st_["nodes"] or st_["nodes"] <= 2
    assert st_["compiles"] <= 2            # one per cell, whatever the trees


@rj.jit
def step(h, x, w, u):
    return rnp.tanh(h @ w + x @ u)


W, U = RNG.standard_normal((H, H)) / 3, RNG.standard_normal((2, H))


def run_rnn(seq):
    h = np.zeros(H)
    states = []
    for x in seq:
        h = step(h, x, W, U)
        states.append(h)
    return {"last": h, "all": states}


def test_sequences_of_different_lengths_and_one_compile_across_calls():
    rng = np.random.default_rng(1)
    batched = rj.autobatch(run_rnn)
    for lengths in ([3, 1, 7], [12, 2, 2, 2, 9, 1]):
        seqs = [rng.standard_normal((n, 2)) for n in lengths]
        got = batched(seqs)
        for g, s in zip(got, seqs):
            want = run_rnn(s)
            np.testing.assert_allclose(g["last"], want["last"], rtol=1e-12)
            assert len(g["all"]) == len(s)
    assert batched.stats()["compiles"] == 1
    assert batched.stats()["batches"] == 12 + 7       # one batch per time step, per call


def early_exit(x):
    """Stops when the running value is confident: a value used as a number runs what was
    recorded so far first."""
    h = x
    for k in range(6):
        h = step(h, np.ones(2), W, U)
        if float(h.sum()) > 0.5 * (k + 1):
            return h, k
    return h, 6


def test_early_exits_give_per_instance_results():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(H) for _ in range(9)]
    got = rj.autobatch(early_exit)(xs)
    for (h, k), x in zip(got, xs):
        want_h, want_k = early_exit(x)
        assert k == want_k
        np.testing.assert_allclose(h, want_h, rtol=1e-12)


def test_bad_use_says_what_is_wrong():
    with pytest.raises(ValueError, match="policy must be one of"):
        rj.autobatch(encode, policy="fsm-not-yet")
    inner = rj.autobatch(encode)
    with pytest.raises(RuntimeError, match="do not nest"):
        rj.autobatch(lambda t: inner([t]))([_tree(np.random.default_rng(0), 3)])


def test_tree_lstm_example():
    """examples/tree_lstm.py --small: auto-batched, per tree and level by level agree with
    NumPy tree by tree (it asserts so), two compiles (one per cell)."""
    import pathlib
    import subprocess
    import sys
    script = pathlib.Path(__file__).resolve().parents[1] / "examples" / "tree_lstm.py"
    r = subprocess.run([sys.executable, str(script), "--small"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "depth: 13 batches per call" in r.stdout and "compiles: 2" in r.stdout, r.stdout


def test_python_scalar_arguments_stay_weak():
    """A cell called with a Python float keeps float32 results, batched as one call does."""
    @rj.jit
    def cell(h, s):
        return rnp.tanh(h * s)
    xs = [np.full(3, k, np.float32) for k in range(5)]
    out = rj.autobatch(lambda x: cell(cell(x, 2.0), 0.5))(xs)
    for o, x in zip(out, xs):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, np.tanh(np.tanh(x * 2.0) * 0.5), rtol=1e-6)
