"""``rj.autobatch`` with scattered operands (issue 21): a batched cell reads its operands
through index arrays into the arenas, the take traced inside the jitted program and fused
into the kernels that read it; a product's operand (which gemm needs contiguous) is gathered
on the host instead.  Checked: results equal to per-instance NumPy float64 for every policy,
scatter on and off, on hypothesis-drawn trees and sequences (sizes 1 and primes among
them); one compile per cell whatever the instance count; the bytes ``stats()`` counts as
copied are exactly what the new path copies (the host's stacks of arrays passed to cells,
the host's takes for products; nothing for the operands read through index arrays); the
printed program holds no copy of an operand read elementwise; arenas grow across flushes
and later rounds index the earlier rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.autobatch_arena import Arena

POLICIES = ("depth", "agenda", "fsm")
H = 4
PRIMES = (1, 2, 3, 5, 7, 11, 13)
R = np.random.default_rng(20)
WE, WL, WR = R.standard_normal((3, H)) / 2, R.standard_normal((H, H)) / 2, R.standard_normal((H, H)) / 2
A = R.standard_normal(H) / 2
H0 = np.zeros(H)                       # one first state that every sequence passes


# ---------------------------------------------------------------- a tree of two cells
@rj.jit
def leaf(e, we):
    return rnp.tanh(e @ we)


@rj.jit
def pair(hl, cl, hr, cr, wl, wr):
    """hl, hr feed products (gathered on the host); cl, cr are read elementwise (indexed)."""
    g = hl @ wl + hr @ wr
    return rnp.tanh(g), 0.5 * (cl + cr) + g


def encode_states(t):
    """(h, c) of a tree, recursing at module level (a nested function's closure would be a
    reference cycle of its own: the cycle test below counts them)."""
    if isinstance(t, tuple):
        (hl, cl), (hr, cr) = encode_states(t[0]), encode_states(t[1])
        return pair(hl, cl, hr, cr, WL, WR)
    h = leaf(t, WE)
    return h, h


def encode(tree):
    return encode_states(tree)[0]


def encode_numpy(tree):
    def go(t):
        if isinstance(t, tuple):
            (hl, cl), (hr, cr) = go(t[0]), go(t[1])
            g = hl @ WL + hr @ WR
            return np.tanh(g), 0.5 * (cl + cr) + g
        h = np.tanh(t @ WE)
        return h, h
    return go(tree)[0]


def random_tree(rng, n):
    if n == 1:
        return rng.standard_normal(3)
    k = int(rng.integers(1, n))
    return (random_tree(rng, k), random_tree(rng, n - k))


def full_tree(rng, height):
    return rng.standard_normal(3) if height == 0 else (full_tree(rng, height - 1), full_tree(rng, height - 1))


# ------------------------------------------------------- a chain read only elementwise
@rj.jit
def step(h, x, a):
    return rnp.tanh(h * a + x)


def chain(seq):
    h = H0
    for x in seq:
        h = step(h, x, A)
    return h


def chain_numpy(seq):
    h = H0
    for x in seq:
        h = np.tanh(h * A + x)
    return h


_BATCHED: dict = {}


def batched(fn, policy: str, scatter: bool) -> rj.AutoBatched:
    key = (fn, policy, scatter)
    if key not in _BATCHED:
        _BATCHED[key] = rj.autobatch(fn, policy=policy, scatter=scatter)
    return _BATCHED[key]


sizes = st.one_of(st.sampled_from(PRIMES), st.integers(1, 14))


def assert_one_compile_per_layout(b: rj.AutoBatched) -> None:
    """Each batched cell (one per cell and argument layout) compiled once, whatever the
    batch sizes and instance counts so far.  (A cell can get a second layout: sequences that
    all have one step pass the first state once, longer ones batch it.)"""
    cells = b.batched_cells()
    assert all(f.cache_info().compiles == 1 for _, _, _, f in cells), [f.cache_info() for *_, f in cells]
    assert b.stats()["compiles"] == len(cells)


@given(counts=st.lists(sizes, min_size=1, max_size=13), policy=st.sampled_from(POLICIES), scatter=st.booleans(),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_trees_match_per_instance(counts, policy, scatter, seed):
    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, n) for n in counts]
    b = batched(encode, policy, scatter)
    for got, t in zip(b(trees), trees):
        np.testing.assert_allclose(got, encode_numpy(t), rtol=1e-12, atol=1e-13)
    assert_one_compile_per_layout(b)


@given(lengths=st.lists(sizes, min_size=1, max_size=13), policy=st.sampled_from(POLICIES), scatter=st.booleans(),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=25, deadline=None)
def test_sequences_match_per_instance(lengths, policy, scatter, seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal((n, H)) for n in lengths]
    b = batched(chain, policy, scatter)
    for got, s in zip(b(seqs), seqs):
        np.testing.assert_allclose(got, chain_numpy(s), rtol=1e-12, atol=1e-13)
    assert_one_compile_per_layout(b)


def test_one_compile_per_cell_whatever_the_instance_count():
    rng = np.random.default_rng(3)
    b = rj.autobatch(encode)
    for count in (1, 2, 3, 5, 7, 13, 31):
        trees = [random_tree(rng, int(n)) for n in rng.integers(1, 12, size=count)]
        for got, t in zip(b(trees), trees):
            np.testing.assert_allclose(got, encode_numpy(t), rtol=1e-12)
        assert b.stats()["compiles"] == 2, count
    modes = {label.split("(")[0].rsplit(".", 1)[-1]: m for label, _, m, _ in b.batched_cells()}
    assert modes == {"leaf": ("plain", None), "pair": ("plain", "indexed", "plain", "indexed", None, None)}


def test_gathers_read_elementwise_are_fused_into_the_kernels():
    """The batched cells' printed programs: the take of an operand read elementwise sits in
    a fused kernel with its consumers (no program that only copies it); the product's
    operands come in as plain arrays."""
    rng = np.random.default_rng(4)
    b = rj.autobatch(encode)
    b([random_tree(rng, 6) for _ in range(4)])
    S = rj.ShapeDtypeStruct
    row, idx = S((40, H), "float64"), S((7,), "int64")
    cells = {label.split("(")[0].rsplit(".", 1)[-1]: f for label, _, _, f in b.batched_cells()}
    text = cells["pair"].lower(S((7, H), "float64"), row, idx, S((7, H), "float64"), row, idx,
                               S((H, H), "float64"), S((H, H), "float64")).as_text("optimized")
    main = text.split("\n\n")[0]
    kernels = [line.split("=", 1)[1] for line in main.splitlines() if "call_tir(" in line]
    reading = [k for k in kernels if "cl_idx" in k or "cr_idx" in k]
    assert len(reading) == 1 and "fused_" in reading[0] and "take" in reading[0], main
    assert "cl_idx" in reading[0] and "cr_idx" in reading[0], main
    assert main.count("call_library") == 2 and len(kernels) == 1, main   # two gemms, then one kernel


def test_gather_bytes_are_what_is_copied_on_a_chain():
    """A chain read only elementwise: every state operand is read through an index array
    (nothing copied), the inputs are stacked on the host once per node and the first state,
    which every sequence passes, once in all; with host gathers the first state is copied per
    sequence and the states where the layout did not make them a slice."""
    lengths = [1, 5, 2, 7, 3, 3, 11]
    rng = np.random.default_rng(6)
    seqs = [rng.standard_normal((n, H)) for n in lengths]
    steps, nodes = max(lengths), sum(lengths)
    on = rj.autobatch(chain)
    for got, s in zip(on(seqs), seqs):
        np.testing.assert_allclose(got, chain_numpy(s), rtol=1e-12)
    s = on.stats()
    assert s["batches"] == steps
    assert s["gather_bytes"] == s["host_gather_bytes"] == 8 * H * (nodes + 1)
    assert s["operands_indexed"] == 2 * steps and s["operands_sliced"] == s["operands_gathered"] == 0
    off = rj.autobatch(chain, scatter=False)
    for got, q in zip(off(seqs), seqs):
        np.testing.assert_allclose(got, chain_numpy(q), rtol=1e-12)
    t = off.stats()
    assert t["operands_indexed"] == 0 and t["operands_sliced"] == steps - 1
    assert t["gather_bytes"] == 8 * H * (nodes + len(lengths))


def _stats_scattered_and_not(trees) -> tuple:
    """``b.stats()`` of the tree encoder batched with scattered operands and with host
    gathers, each checked against the per-instance float64 oracle."""
    stats = {}
    for scatter in (True, False):
        b = rj.autobatch(encode, scatter=scatter)
        for g, t in zip(b(trees), trees):
            np.testing.assert_allclose(g, encode_numpy(t), rtol=1e-12)
        stats[scatter] = b.stats()
    return stats[True], stats[False]


def test_full_trees_copy_only_the_leaves_inputs():
    """Full trees, depth policy, the layout: the children's states feeding the products are
    slices of the arena, the cell states are read through index arrays; only the leaves'
    inputs are copied, the same bytes as with host gathers, which copies no state either
    (all slices) but reads cl and cr as slices too."""
    rng = np.random.default_rng(11)
    trees = [full_tree(rng, 3) for _ in range(5)]
    s, t = _stats_scattered_and_not(trees)
    assert s["batches"] == t["batches"] == 4
    assert s["gather_bytes"] == t["gather_bytes"] == 8 * 3 * 8 * len(trees)
    assert s["operands_sliced"] == 2 * 3 and s["operands_indexed"] == 2 * 3 and s["operands_gathered"] == 1
    assert t["operands_sliced"] == 4 * 3 and t["operands_indexed"] == 0


def test_random_trees_copy_less_than_host_gathers():
    """Random trees: the same plan either way, so the products' operands cost the same;
    the cell states read elementwise are not copied any more."""
    rng = np.random.default_rng(12)
    trees = [random_tree(rng, int(n)) for n in rng.integers(1, 20, size=23)]
    s, t = _stats_scattered_and_not(trees)
    pair_batches = s["batches"] - 1                       # depth: one leaf batch, the rest pairs
    assert s["operands_indexed"] == 2 * pair_batches
    assert s["operands_sliced"] + s["operands_gathered"] == 2 * pair_batches + 1
    assert t["operands_sliced"] + t["operands_gathered"] == 4 * pair_batches + 1
    assert s["gather_bytes"] < t["gather_bytes"]
    assert s["gather_bytes"] == s["host_gather_bytes"]   # the batched cells copy nothing


@rj.jit
def double(x):
    return x * 2.0


@rj.jit
def add(a, c):
    return a + c


def test_an_operand_mixing_results_and_arrays():
    """One batch whose operand is a result for some nodes and an array (one object, every
    such instance's) for the others: the distinct values stacked, each once."""
    rng = np.random.default_rng(13)
    flags = [True, False, True, True, False, False, True]
    xs = [rng.standard_normal(H) for _ in flags]

    def fn(inst):
        x, flag = inst
        c = double(x)
        a = double(x + 1.0) if flag else A                  # both ways, add's depth is 2
        return add(a, c)
    b = rj.autobatch(fn)
    got = b(list(zip(xs, flags)))
    for g, x, flag in zip(got, xs, flags):
        np.testing.assert_allclose(g, ((x + 1.0) * 2.0 if flag else A) + x * 2.0, rtol=1e-12)
    s = b.stats()
    assert s["batches"] == 2
    # double's inputs (one per node), then add's mixed operand (the results and A once)
    assert s["host_gather_bytes"] == s["gather_bytes"] == 8 * H * ((len(flags) + sum(flags)) + (sum(flags) + 1))
    assert s["operands_indexed"] == 3


@rj.jit
def lift(h, x):
    return rnp.tanh(h + x)


@rj.jit
def score(h):
    return h.sum()


def rounds(inst):
    """A generator: each round reads the last round's state (a row of an earlier flush)."""
    x, n = inst
    h = x
    for _ in range(n):
        h = lift(h, x)
        if (yield score(h)) > 10.0:                      # never: the loop runs n rounds
            break
    return h


def test_arenas_grow_across_flushes_and_later_rounds_index_them():
    rng = np.random.default_rng(14)
    insts = [(rng.standard_normal(H), int(n)) for n in (1, 6, 3, 6, 2)]
    b = rj.autobatch(rounds)
    got = b(insts)
    for g, (x, n) in zip(got, insts):
        h = x
        for _ in range(n):
            h = np.tanh(h + x)
        np.testing.assert_allclose(g, h, rtol=1e-12)
    s = b.stats()
    assert s["rounds"] == 6
    # copied: x as lift's h and x in the first round, x per round after; the state of the
    # rounds after the first is a row of the arena (as is score's operand, every round)
    live = [sum(n > r for _, n in insts) for r in range(6)]
    assert s["host_gather_bytes"] == 8 * H * (2 * live[0] + sum(live[1:]))
    assert s["operands_indexed"] == 3 * 6


def test_an_arena_grows_geometrically_and_keeps_its_rows():
    a = Arena(((2,), np.dtype(np.float64)), 3)
    data, grown = a.data, 0
    for n in range(1, 40):
        base = a.reserve(n)
        a.data[base:base + n] = np.arange(base, base + n)[:, None]
        if a.data is not data:
            grown, data = grown + 1, a.data
    assert a.used == sum(range(1, 40))
    np.testing.assert_array_equal(a.data[:a.used, 0], np.arange(a.used))
    assert grown <= 10 and len(a.data) < 2 * a.used


def test_scatter_must_be_a_bool():
    with pytest.raises(TypeError, match="scatter must be True or False"):
        rj.autobatch(encode, scatter="yes")


@rj.jit
def scale(x, s):
    return x * s + 1.0


def test_a_cell_called_with_signatures_that_change():
    """The recording checks a call against the cell's previous one first: arguments of
    another shape, dtype or scalar type, a lazy value where an array was, are new kinds,
    each batched apart, every result what the cell computes alone."""
    def fn(k):
        a = scale(np.full(3, float(k)), 2.0)                  # float64[3], float
        b = scale(np.full(3, k, np.float32), 2)               # float32[3], int
        c = scale(np.full(4, float(k)), 2.0)                  # float64[4]
        d = scale(a, 0.5)                                     # a lazy float64[3]
        e = scale(np.full(3, float(k)), 2.0)                  # the first signature again
        return a, b, c, d, e
    b = rj.autobatch(fn)
    got = b(list(range(5)))
    for k, (a, b_, c, d, e) in enumerate(got):
        np.testing.assert_allclose(a, np.full(3, 2.0 * k + 1.0))
        assert b_.dtype == np.float32 and a.dtype == np.float64
        np.testing.assert_allclose(b_, np.full(3, 2.0 * k + 1.0))
        np.testing.assert_allclose(c, np.full(4, 2.0 * k + 1.0))
        np.testing.assert_allclose(d, (2.0 * k + 1.0) * 0.5 + 1.0)
        np.testing.assert_allclose(e, a)
    labels = sorted(label.split("(", 1)[1] for label, _, _, _ in b.batched_cells())
    assert labels == ["float32[3], int)", "float64[3], float)", "float64[4], float)"], labels


def test_results_of_no_dimensions_are_arrays():
    """A cell's 0-d result comes back as a 0-d array (a view or a copy), not a NumPy scalar."""
    xs = [np.full(H, float(k)) for k in range(3)]
    got = rj.autobatch(lambda x: score(lift(x, x)))(xs)
    for g, x in zip(got, xs):
        assert type(g) is np.ndarray and g.shape == ()
        assert float(g) == pytest.approx(np.tanh(2 * x).sum(), rel=1e-12)


def test_products_operands_copied_by_the_program_when_asked(monkeypatch):
    """``PRODUCT_OPERANDS = "indexed"`` (the other side of the measured rule): every operand
    through an index array; the products' ones the compiled program copies, which the
    accounting finds in the compiled cell and counts as gathered, with their bytes."""
    import relaxjax.autobatch_arena as arena
    monkeypatch.setattr(arena, "PRODUCT_OPERANDS", "indexed")
    rng = np.random.default_rng(15)
    trees = [full_tree(rng, 2) for _ in range(3)]
    b = rj.autobatch(encode)
    for g, t in zip(b(trees), trees):
        np.testing.assert_allclose(g, encode_numpy(t), rtol=1e-12)
    s = b.stats()
    modes = {label.split("(")[0].rsplit(".", 1)[-1]: m for label, _, m, _ in b.batched_cells()}
    assert modes["pair"][:4] == ("indexed",) * 4
    pairs = 3 * 3                                         # 2 + 1 pair nodes per tree, 3 trees
    # copied by the programs: the leaves' e and the pairs' hl, hr; on the host: the leaves' inputs
    assert s["host_gather_bytes"] == 8 * 3 * 4 * len(trees)
    assert s["gather_bytes"] - s["host_gather_bytes"] == 8 * 3 * 4 * len(trees) + 8 * H * 2 * pairs
    assert s["operands_gathered"] == 1 + 2 * 2 and s["operands_indexed"] == 2 * 2


def test_a_call_leaves_no_cycles_for_the_collector():
    """The nodes, lazy values and batches of a call are freed by reference counting when it
    returns (a collection walking thousands of them cost 2 ms of a 23 ms TreeLSTM pass)."""
    import gc
    rng = np.random.default_rng(16)
    trees = [random_tree(rng, int(n)) for n in rng.integers(1, 15, size=20)]
    b = rj.autobatch(encode_states)
    b(trees)                                              # compiles
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        got = b(trees)
        found = gc.collect()
    finally:
        if was:
            gc.enable()
    for (g, _), t in zip(got, trees):
        np.testing.assert_allclose(g, encode_numpy(t), rtol=1e-12)
    assert found == 0, found                              # the nodes alone number hundreds
