"""``rj.autobatch`` with early exits (issue 21): ``fn`` written as a generator yields a lazy
value (or a pytree of them) where it needs a number, and is suspended until the value is
computed while the other instances run up to their own yield; one flush per round serves
them all.  Checked: results equal to per-instance NumPy (the early-exit classifier of
``examples/autobatch_models.py``) for hypothesis-drawn inputs and thresholds, every policy;
two batches per layer reached with generators against one per node when each test is a
``float()``; generators mixed with plain results, generators that never yield and
``yield from``; pytrees sent back; errors for anything else yielded."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import autobatch_models as models  # noqa: E402

POLICIES = ("depth", "agenda", "fsm")
HIDDEN, LAYERS, CLASSES = 8, 6, 3
P = models.exit_params(np.random.default_rng(0), HIDDEN, LAYERS, CLASSES, np.float64)
head, layer = models.exit_head, models.exit_layer


def gen_model(inst):
    """An instance is (x, threshold): one batched function serves every threshold."""
    x, threshold = inst
    return models.early_exit(x, P, threshold)


def flush_model(inst):
    x, threshold = inst
    return models.early_exit_flushing(x, P, threshold)


def oracle(inst):
    x, threshold = inst
    return models.early_exit_numpy(x, P, threshold)


def check(got, instances) -> None:
    assert len(got) == len(instances)
    for (k, logits), inst in zip(got, instances):
        want_k, want = oracle(inst)
        assert k == want_k
        assert isinstance(logits, np.ndarray)
        np.testing.assert_allclose(logits, want, rtol=1e-10, atol=1e-12)


_BATCHED: dict = {}


def batched(policy: str) -> rj.AutoBatched:
    if policy not in _BATCHED:
        _BATCHED[policy] = rj.autobatch(gen_model, policy=policy)
    return _BATCHED[policy]


def draw(rng, thresholds):
    return [(rng.standard_normal(HIDDEN), float(t)) for t in thresholds]


@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 2 ** 16),
       thresholds=st.lists(st.floats(0.0, 1.01), min_size=1, max_size=30))
@settings(max_examples=25, deadline=None)
def test_exits_match_per_instance(policy, seed, thresholds):
    """Every round runs one layer batch and one head batch (the live instances are all at
    one layer: one weight set), so the batches are two per layer the last instance reaches."""
    instances = draw(np.random.default_rng(seed), thresholds)
    b = batched(policy)
    before = b.stats()
    got = b(instances)
    check(got, instances)
    after = b.stats()
    exits = [k for k, _ in got]
    assert after["nodes"] - before["nodes"] == sum(2 * (k + 1) for k in exits)
    assert after["rounds"] - before["rounds"] == max(exits) + 1
    assert after["batches"] - before["batches"] == 2 * (max(exits) + 1)
    assert after["compiles"] <= 2                      # one per cell, whatever the exits


@pytest.mark.parametrize("policy", POLICIES)
def test_generators_launch_fewer_batches_than_flushing(policy):
    """The same model testing ``float(conf)``: each test runs one instance's two nodes."""
    rng = np.random.default_rng(5)
    instances = draw(rng, rng.uniform(0.5, 0.95, 24))
    gen, flush = rj.autobatch(gen_model, policy=policy), rj.autobatch(flush_model, policy=policy)
    check(gen(instances), instances)
    check(flush(instances), instances)
    g, f = gen.stats(), flush.stats()
    assert g["nodes"] == f["nodes"]
    assert f["batches"] == f["nodes"] and f["rounds"] == 0
    assert g["batches"] == 2 * g["rounds"] <= 2 * LAYERS
    assert g["batches"] < f["batches"] / 4, (g["batches"], f["batches"])


def mixed_model(inst):
    """Plain results, generators that return before yielding, ``yield from`` a
    sub-generator and a plain ``float()`` test among generators."""
    x, threshold, mode = inst
    if mode == "plain":
        return -1, head(x, P["wh"][0], P["bh"][0])[0]
    if mode == "float":
        return flush_model((x, threshold))
    return wrapped(x, threshold)


def wrapped(x, threshold):
    if threshold > 1:                                  # never yields
        return -1, head(x, P["wh"][0], P["bh"][0])[0]
    k, logits = yield from models.early_exit(x, P, threshold)
    return k, logits


def mixed_oracle(inst):
    x, threshold, mode = inst
    if mode == "plain" or (mode == "gen" and threshold > 1):
        return -1, models.exit_head_math(x, P["wh"][0], P["bh"][0], np)[0]
    return oracle((x, threshold))


@given(policy=st.sampled_from(POLICIES), seed=st.integers(0, 2 ** 16),
       insts=st.lists(st.tuples(st.floats(0.0, 1.5), st.sampled_from(["plain", "float", "gen"])),
                      min_size=1, max_size=20))
@settings(max_examples=20, deadline=None)
def test_generators_mixed_with_instances_that_never_yield(policy, seed, insts):
    rng = np.random.default_rng(seed)
    instances = [(rng.standard_normal(HIDDEN), t, mode) for t, mode in insts]
    got = rj.autobatch(mixed_model, policy=policy)(instances)
    for (k, logits), inst in zip(got, instances):
        want_k, want = mixed_oracle(inst)
        assert k == want_k
        np.testing.assert_allclose(logits, want, rtol=1e-10, atol=1e-12)


def test_pytrees_are_sent_back_as_values():
    """A pytree of lazy values comes back as the same pytree of NumPy arrays (copies: the
    instance may write them); a value computed in an earlier round can be yielded again."""
    x0 = np.linspace(-1, 1, HIDDEN)

    def fn(x):
        h = layer(x, P["w"][0], P["b"][0])
        logits, conf = head(h, P["wh"][0], P["bh"][0])
        got = yield {"h": h, "pair": (logits, [conf])}
        assert sorted(got) == ["h", "pair"] and isinstance(got["pair"], tuple)
        assert isinstance(got["pair"][1], list)
        for v in (got["h"], got["pair"][0], got["pair"][1][0]):
            assert type(v) is np.ndarray
        assert got["pair"][1][0].shape == ()
        got["h"][:] = 0                               # a copy: the lazy value keeps its own
        again = yield h
        empty = yield []
        assert empty == []
        return again, got["pair"][0], float(got["pair"][1][0])

    h, logits, conf = rj.autobatch(fn)([x0, 2 * x0])[1]
    want_h = models.exit_layer_math(2 * x0, P["w"][0], P["b"][0], np)
    want_logits, want_conf = models.exit_head_math(want_h, P["wh"][0], P["bh"][0], np)
    np.testing.assert_allclose(h, want_h, rtol=1e-12)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-12)
    assert conf == pytest.approx(float(want_conf), rel=1e-12)


def test_yielding_anything_else_is_an_error():
    x0 = np.ones(HIDDEN)
    closed = []

    def fn(inst):
        x, what = inst
        try:
            h = layer(x, P["w"][0], P["b"][0])
            if what == "ok":
                yield h
            elif what == "float":
                yield 0.5
            elif what == "array":
                yield np.ones(2)
            elif what == "mixed":
                yield (h, np.ones(2))
            elif what == "late":                          # fails when resumed, in a round
                yield h
                yield [h, "x"]
            else:
                yield
            return h
        finally:
            closed.append(what)

    b = rj.autobatch(fn)
    for what, message in [("float", "yielded float (0.5)"), ("array", "yielded ndarray"),
                          ("mixed", "yielded tuple holding a ndarray"), ("none", "yielded None"),
                          ("late", "yielded list holding a str")]:
        closed.clear()
        with pytest.raises(TypeError, match=r"instance 1 " + message.replace("(", r"\(").replace(")", r"\)")):
            b([(x0, "ok"), (x0, what), (x0, "ok")])
        # every suspended generator closed (the third never starts when the second fails at once)
        assert sorted(closed) == sorted(["ok", what] + ["ok"] * (what == "late"))
    out = b([(x0, "ok")])                             # still usable
    np.testing.assert_allclose(out[0], models.exit_layer_math(x0, P["w"][0], P["b"][0], np), rtol=1e-12)

    kept = []

    def keep(x):
        kept.append(layer(x, P["w"][0], P["b"][0]))
        return kept[-1]

    rj.autobatch(keep)([x0])

    def stale(x):
        yield kept[0]

    with pytest.raises(ValueError, match="lazy value of another autobatch call"):
        rj.autobatch(stale)([x0])


def test_an_error_inside_a_generator_propagates():
    def fn(x):
        p = yield head(x, P["wh"][0], P["bh"][0])[1]
        if p > 0:
            raise RuntimeError("boom")
        return p

    b = rj.autobatch(fn)
    with pytest.raises(RuntimeError, match="boom"):
        b([np.ones(HIDDEN)])
    assert rj.autobatch(lambda x: head(x, P["wh"][0], P["bh"][0])[1])([np.ones(HIDDEN)])[0] > 0
