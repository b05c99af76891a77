"""``rj.autobatch``'s policies and memory layout (issue 21, second step): results equal to
running each instance on its own (NumPy float64, the same math) for hypothesis-drawn trees,
sentences and lattices (DAGs), with every policy (depth, agenda, the learned fsm) with and
without the layout; the fsm table saved and loaded; the fsm launching no more batches than
depth or agenda on the workloads; gather bytes counted exactly (a chain's and a full tree's
operands are slices of the arena once laid out); weights passed once even when one cell
runs with two weight sets."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import autobatch_models as models  # noqa: E402
import tree_lstm  # noqa: E402

VOCAB = 50
POLICIES = ("depth", "agenda", "fsm")
W = {"tree": models.make_tree(np.random.default_rng(0), hidden=8, count=1, dtype=np.float64, vocab=VOCAB),
     "bilstm": models.make_bilstm(np.random.default_rng(1), hidden=8, count=1, dtype=np.float64, dim=4,
                                  vocab=VOCAB, tags=3),
     "lattice": models.make_lattice(np.random.default_rng(2), hidden=8, count=1, dtype=np.float64, dim=4,
                                    vocab=VOCAB)}
_BATCHED: dict = {}


def batched(name: str, policy: str, layout: bool = True, scatter: bool = True) -> rj.AutoBatched:
    """One autobatched function per (workload, policy, layout, scatter), reused by every
    example, first called on 8 instances of sizes 1-8 (the fsm trains on it; the batched
    cells compile, once per cell)."""
    key = (name, policy, layout, scatter)
    if key not in _BATCHED:
        b = _BATCHED[key] = rj.autobatch(W[name].fn, policy=policy, layout=layout, scatter=scatter)
        warm = draw(name, np.random.default_rng(99), range(1, 9))
        check(name, b(warm), warm)
        assert b.stats()["compiles"] == len(W[name].cells)
    return _BATCHED[key]


def draw(name: str, rng, sizes):
    if name == "tree":
        return [tree_lstm.random_tree(rng, int(n), VOCAB) for n in sizes]
    if name == "bilstm":
        return [[int(w) for w in rng.integers(VOCAB, size=int(n))] for n in sizes]
    return [models.random_lattice(rng, int(n), VOCAB) for n in sizes]


def check(name: str, got, instances) -> None:
    assert len(got) == len(instances)
    for g, x in zip(got, instances):
        want = W[name].numpy(x)
        if name == "bilstm":
            assert len(g) == len(x)
            for a, b in zip(g, want):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


@given(name=st.sampled_from(sorted(W)), policy=st.sampled_from(POLICIES), layout=st.booleans(),
       scatter=st.booleans(), sizes=st.lists(st.integers(1, 12), min_size=1, max_size=40),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=30, deadline=None)
@example(name="lattice", policy="agenda", layout=False, scatter=False, sizes=[11, 8], seed=0)
def test_workloads_match_per_instance(name, policy, layout, scatter, sizes, seed):
    instances = draw(name, np.random.default_rng(seed), sizes)
    b = batched(name, policy, layout, scatter)
    before = b.stats()
    got = b(instances)
    check(name, got, instances)
    after = b.stats()
    nodes = sum(W[name].count_nodes(x) for x in instances)
    assert after["nodes"] - before["nodes"] == nodes
    # batching merges instances: the depth policy launches one batch per cell kind and level
    # that some instance has, so at least as many as any instance alone and at most their
    # sum; agenda and fsm choose greedily, and together can need fewer batches than one
    # instance alone (lattice, agenda, sizes [11, 8], seed 0: 12 against 13), so they stay
    # under one batch per cell and node of the largest instance; every policy launches at
    # least one batch per call on the longest chain of dependent calls (``levels``); running
    # the nodes one by one would launch ``nodes`` batches
    batches = after["batches"] - before["batches"]
    levels = after["levels"] - before["levels"]
    assert 1 <= levels <= batches <= len(W[name].cells) * max(W[name].count_nodes(x) for x in instances)
    if policy == "depth":
        alone = []
        for x in instances:
            start = b.stats()["batches"]
            check(name, b([x]), [x])
            alone.append(b.stats()["batches"] - start)
        assert max(alone) <= batches <= sum(alone)
    if len(instances) > 1:      # every instance's first node is the same cell, ready at once
        assert batches < nodes
    assert after["compiles"] == before["compiles"]         # one per cell, whatever the instances


@given(count=st.integers(100, 200), policy=st.sampled_from(POLICIES), seed=st.integers(0, 2 ** 16))
@settings(max_examples=3, deadline=None)
def test_many_instances(count, policy, seed):
    """100-200 sentences of 1-6 words (the tagger: two weight sets, several cells)."""
    rng = np.random.default_rng(seed)
    instances = draw("bilstm", rng, rng.integers(1, 7, size=count))
    check("bilstm", batched("bilstm", policy)(instances), instances)


def batches_per_policy(name: str, instances) -> dict:
    out = {}
    for policy in POLICIES:
        b = rj.autobatch(W[name].fn, policy=policy)
        check(name, b(instances), instances)
        out[policy] = b.stats()["batches"]
    return out


@pytest.mark.parametrize("name", sorted(W))
def test_fsm_launches_no_more_batches(name):
    """On 48 instances of each workload the learned policy launches no more batches than
    depth or agenda; on the tagger and the lattice strictly fewer than both (the tagger's
    tag cells wait until every sentence's states are done: 61 batches against 84 and 88)."""
    rng = np.random.default_rng(7)
    sizes = models.tree_sizes(rng, 48) if name == "tree" else models.sentence_lengths(rng, 48, cap=30)
    n = batches_per_policy(name, draw(name, rng, sizes))
    assert n["fsm"] <= min(n["depth"], n["agenda"]), n
    if name != "tree":
        assert n["fsm"] < min(n["depth"], n["agenda"]), n


def test_fsm_table_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    train = draw("lattice", rng, models.sentence_lengths(rng, 32, cap=25))
    other = draw("lattice", rng, models.sentence_lengths(rng, 32, cap=25))
    learned = rj.autobatch(W["lattice"].fn, policy="fsm", episodes=60)
    learned(train)
    s = learned.stats()
    assert s["fsm_episodes"] == 60 and s["fsm_states"] > 1
    path = tmp_path / "lattice.json"
    learned.save_policy(path)
    table = json.loads(path.read_text())
    assert table["format"] == "relaxjax.autobatch.fsm" and len(table["policy"]) == s["fsm_states"]
    cells = {a.split("(")[0].rsplit(".", 1)[-1] for frontier, _, _ in table["policy"] for a in frontier}
    assert cells == {"char_cell", "word_cell", "merge_cell"}
    assert all(action == "<largest>" or action in frontier for frontier, _, action in table["policy"])

    loaded = rj.autobatch(W["lattice"].fn, policy="fsm", policy_file=path)
    check("lattice", loaded(other), other)
    check("lattice", learned(other), other)                 # the learned one, now greedy too
    assert loaded.stats()["fsm_episodes"] == 60              # loaded, not trained further
    assert loaded.stats()["batches"] == learned.stats()["batches"] - s["batches"]
    loaded.save_policy(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == table
    # a loaded table can be trained further
    more = rj.autobatch(W["lattice"].fn, policy="fsm", policy_file=path, train_calls=1, episodes=5)
    check("lattice", more(other), other)
    assert more.stats()["fsm_episodes"] == 65


def test_policy_arguments_are_checked(tmp_path):
    fn = W["tree"].fn
    with pytest.raises(ValueError, match="policy_file is for policy='fsm', got policy='depth'"):
        rj.autobatch(fn, policy_file=tmp_path / "x.json")
    with pytest.raises(ValueError, match="policy_file '.*missing.json' cannot be read"):
        rj.autobatch(fn, policy="fsm", policy_file=tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="is not an autobatch FSM table"):
        rj.autobatch(fn, policy="fsm", policy_file=tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text(json.dumps({"format": "relaxjax.autobatch.fsm", "version": 1,
                                                     "episodes": 1, "policy": [[["a"], None, "a"]],
                                                     "q": [[["a"], None, {"a": "x"}]]}))
    with pytest.raises(ValueError, match="bad2.json.: malformed"):
        rj.autobatch(fn, policy="fsm", policy_file=tmp_path / "bad2.json")
    with pytest.raises(ValueError, match="save_policy is for policy='fsm'"):
        rj.autobatch(fn).save_policy(tmp_path / "t.json")
    with pytest.raises(RuntimeError, match="nothing learned yet"):
        rj.autobatch(fn, policy="fsm").save_policy(tmp_path / "t.json")
    with pytest.raises(ValueError, match="train_calls must be an int >= 0"):
        rj.autobatch(fn, policy="fsm", train_calls=-1)
    with pytest.raises(ValueError, match="episodes must be an int >= 1"):
        rj.autobatch(fn, policy="fsm", episodes=0)
    with pytest.raises(TypeError, match="layout must be True or False"):
        rj.autobatch(fn, layout="yes")
    with pytest.raises(TypeError, match="instances must be a list"):
        rj.autobatch(fn)(5)


# ------------------------------------------------------------------ gather accounting
H = 5


@rj.jit
def rnn_step(h, x, w, u):
    return rnp.tanh(h @ w + x @ u)


RW, RU = np.random.default_rng(4).standard_normal((H, H)) / 3, np.random.default_rng(5).standard_normal((2, H))


def rnn(seq):
    h = np.zeros(H)
    for x in seq:
        h = rnn_step(h, x, RW, RU)
    return h


def rnn_numpy(seq):
    h = np.zeros(H)
    for x in seq:
        h = np.tanh(h @ RW + x @ RU)
    return h


@pytest.mark.parametrize("policy", POLICIES)
def test_chain_operands_are_slices_once_laid_out(policy):
    """Operands gathered on the host (``scatter=False``): a chain's step t reads the states
    of step t - 1 of the sequences still running: laid out, a prefix of that step's results
    (a view); only the inputs (per node) and the first states (per instance) are copied.  In
    the policy's own order that prefix is scattered."""
    lengths = [1, 5, 2, 7, 3, 3]
    rng = np.random.default_rng(6)
    seqs = [rng.standard_normal((n, 2)) for n in lengths]
    stats = {}
    for layout in (True, False):
        b = rj.autobatch(rnn, policy=policy, layout=layout, scatter=False)
        for g, s in zip(b(seqs), seqs):
            np.testing.assert_allclose(g, rnn_numpy(s), rtol=1e-12)
        stats[layout] = b.stats()
    steps, nodes = max(lengths), sum(lengths)
    s = stats[True]
    assert s["batches"] == steps
    # copied: every node's x (2 floats), the first step's h per instance (H floats)
    assert s["gather_bytes"] == 8 * (2 * nodes + H * len(lengths))
    assert s["operands_sliced"] == steps - 1
    assert s["operands_gathered"] == steps + 1
    assert s["arena_bytes"] == 8 * H * nodes
    assert stats[False]["gather_bytes"] > s["gather_bytes"]
    assert stats[False]["operands_sliced"] < steps - 1


@rj.jit
def leaf_cell(e, we):
    return rnp.tanh(e @ we)


@rj.jit
def pair_cell(hl, cl, hr, cr, wl, wr):
    g = hl @ wl + hr @ wr
    return rnp.tanh(g), cl + cr + g


WE, WL, WR = (np.random.default_rng(k).standard_normal((3 if k == 8 else H, H)) / 2 for k in (8, 9, 10))


def encode_pair(tree):
    def go(t):
        if isinstance(t, tuple):
            (hl, cl), (hr, cr) = go(t[0]), go(t[1])
            return pair_cell(hl, cl, hr, cr, WL, WR)
        h = leaf_cell(t, WE)
        return h, h
    return go(tree)[0]


def encode_pair_numpy(tree):
    def go(t):
        if isinstance(t, tuple):
            (hl, cl), (hr, cr) = go(t[0]), go(t[1])
            g = hl @ WL + hr @ WR
            return np.tanh(g), cl + cr + g
        h = np.tanh(t @ WE)
        return h, h
    return go(tree)[0]


def full_tree(rng, height):
    return rng.standard_normal(3) if height == 0 else (full_tree(rng, height - 1), full_tree(rng, height - 1))


def test_full_trees_read_every_state_as_a_slice():
    """Depth policy on full binary trees of one height, operands gathered on the host: laid
    out, every lazy operand (both children's two results) is a slice; only the leaves'
    inputs are copied."""
    rng = np.random.default_rng(11)
    trees = [full_tree(rng, 3) for _ in range(5)]
    b = rj.autobatch(encode_pair, scatter=False)
    for g, t in zip(b(trees), trees):
        np.testing.assert_allclose(g, encode_pair_numpy(t), rtol=1e-12)
    s = b.stats()
    assert s["batches"] == 4                                 # leaves, then 3 levels
    assert s["gather_bytes"] == 8 * 3 * 8 * len(trees)       # 8 leaves of 3 floats per tree
    assert s["operands_sliced"] == 3 * 4 and s["operands_gathered"] == 1
    unordered = rj.autobatch(encode_pair, layout=False, scatter=False)
    unordered(trees)
    assert unordered.stats()["gather_bytes"] > s["gather_bytes"]


def test_two_weight_sets_of_one_cell_are_passed_once():
    """The tagger's forward and backward LSTMs call one cell with two weight sets: batches
    never mix them (the weights would be stacked per node), so the cell compiles once with
    its weights unbatched, and nothing copied is as big as the weights."""
    rng = np.random.default_rng(12)
    sents = draw("bilstm", rng, [4, 1, 6, 3])
    for policy in POLICIES:
        b = rj.autobatch(W["bilstm"].fn, policy=policy)
        check("bilstm", b(sents), sents)
        s = b.stats()
        assert s["compiles"] == 2, (policy, s)
        words = sum(map(len, sents))
        # per word at most: x (4) and two states (8 each) per direction, two states per tag
        assert s["gather_bytes"] <= 8 * words * (2 * (4 + 16) + 16), (policy, s)


@pytest.mark.parametrize("policy", POLICIES)
def test_early_exits_every_policy(policy):
    """A lazy value used as a number runs what is pending (a flush mid-call); each flush of
    the fsm's first call trains it."""
    def early(x):
        h = x
        for k in range(6):
            h = rnn_step(h, np.ones(2), RW, RU)
            if float(h.sum()) > 0.3 * (k + 1):
                return h, k
        return h, 6

    def early_numpy(x):
        h = x
        for k in range(6):
            h = np.tanh(h @ RW + np.ones(2) @ RU)
            if float(h.sum()) > 0.3 * (k + 1):
                return h, k
        return h, 6
    xs = [np.random.default_rng(k).standard_normal(H) for k in range(12)]
    b = rj.autobatch(early, policy=policy)
    for (h, k), x in zip(b(xs), xs):
        want_h, want_k = early_numpy(x)
        assert k == want_k
        np.testing.assert_allclose(h, want_h, rtol=1e-12)


def test_every_node_alike_and_keyword_arguments():
    """Nodes whose arguments are all the same objects run as one call whose result every
    node reads; a cell taking a dict and a keyword argument batches like any other."""
    @rj.jit
    def init(w):
        return rnp.tanh(w.sum(0))

    @rj.jit
    def mix(d, *, scale):
        return d["a"] * scale + d["b"]

    w = np.arange(6.0).reshape(2, 3) / 7

    def fn(x):
        h0 = init(w)
        return mix({"a": h0, "b": x}, scale=2.0)
    xs = [np.full(3, float(k)) for k in range(4)]
    b = rj.autobatch(fn)
    for g, x in zip(b(xs), xs):
        np.testing.assert_allclose(g, np.tanh(w.sum(0)) * 2.0 + x, rtol=1e-12)
    assert b.stats()["batches"] == 2


# ------------------------------------------------------------- the policies on raw graphs
from relaxjax.autobatch_policy import (FSMPolicy, Graph, order_for_layout, schedule_agenda,  # noqa: E402
                                       schedule_depth)


def random_graph(rng, n: int, types: int) -> Graph:
    """A random DAG of n nodes: node i reads up to 3 earlier nodes (argument positions 0-2),
    its depth one more than its deepest input's, its type at random."""
    ins, depth = [], []
    for i in range(n):
        edges = [(k, int(p)) for k, p in enumerate(rng.choice(i, size=min(i, int(rng.integers(0, 4))),
                                                               replace=False))] if i else []
        ins.append(edges)
        depth.append(1 + max((depth[p] for _, p in edges), default=0))
    return Graph([int(t) for t in rng.integers(types, size=n)], depth, ins, [f"t{t}" for t in range(types)])


def assert_valid(g: Graph, batches: list) -> None:
    """Every node once, one type per batch, every producer in an earlier batch."""
    where = {}
    for b, batch in enumerate(batches):
        assert batch and len({g.type_of[i] for i in batch}) == 1
        for i in batch:
            assert i not in where
            where[i] = b
    assert len(where) == len(g.type_of)
    for i, edges in enumerate(g.ins):
        for _, p in edges:
            assert where[p] < where[i]


@given(n=st.integers(1, 200), types=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None)
def test_schedules_of_random_dags_are_valid(n, types, seed):
    g = random_graph(np.random.default_rng(seed), n, types)
    fsm = FSMPolicy(seed=seed)
    fsm.train(g, 20)
    agenda = schedule_agenda(g)
    for batches in (schedule_depth(g), agenda, fsm.schedule(g)):
        assert_valid(g, batches)
        before = [sorted(b) for b in batches]
        order_for_layout(g, batches)
        assert [sorted(b) for b in batches] == before        # only the order inside batches
    assert len(fsm.schedule(g)) <= len(agenda)                # on the graph it trained on
    # each node is in a batch of its depth's type: the depth policy's batches are per depth
    assert len(schedule_depth(g)) == len({(d, t) for d, t in zip(g.depth, g.type_of)})


def test_fsm_learns_to_wait_for_a_late_type():
    """Two chains (types a and b) of length 6 per instance, and a type c reading one node of
    each at every step: c's nodes become ready a few at a time; running c whenever it is the
    largest group (the agenda) launches many c batches, the learned table runs c last."""
    ins, types = [], []
    for inst in range(8):
        a = b = None
        for t in range(6):
            ins.append([] if a is None else [(0, a)]); types.append(0); a = len(ins) - 1
            ins.append([] if b is None else [(0, b)]); types.append(1); b = len(ins) - 1
            ins.append([(0, a), (1, b)]); types.append(2)
    depth = []
    for edges in ins:
        depth.append(1 + max((depth[p] for _, p in edges), default=0))
    g = Graph(types, depth, ins, ["a", "b", "c"])
    fsm = FSMPolicy()
    fsm.train(g, 50)
    n = {"agenda": len(schedule_agenda(g)), "depth": len(schedule_depth(g)), "fsm": len(fsm.schedule(g))}
    assert n["fsm"] == 2 * 6 + 1, n                           # a and b step by step, then every c
    assert n["fsm"] < n["agenda"] and n["fsm"] < n["depth"], n
