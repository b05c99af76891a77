"""A TreeLSTM over parse trees of different shapes, written for one tree and auto-batched.

The binary (N-ary, N = 2) TreeLSTM of Tai et al. 2015: a leaf embeds its word; an inner node
combines its two children's states (h, c) with input, output and update gates and one forget
gate per child.  ``encode`` is plain recursive Python for one tree, calling two ``@rj.jit``
cells; ``rj.autobatch(encode)`` runs it over 64 trees with SST-like sizes (random binary
trees, 19 leaves on average, at most 30), batching the cells' calls across trees and within
each tree (``policy="depth"``: all the nodes of one depth together; ``"agenda"``: DyNet's;
``"fsm"``: ED-Batch's policy, learned on the first call).

Four ways, all checked against each other: per tree in NumPy, per tree with the jitted cells,
level by level in NumPy (what a user batches by hand: the nodes of one height at once), and
auto-batched; times printed with the batches launched, the bytes copied to build the
batches' operands (``gather_bytes``: with ED-Batch's memory layout, and without) and the
compiles.

    python examples/tree_lstm.py [--small]
"""
import argparse
import time

import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp


def sigmoid(x, xp):
    return 1 / (1 + xp.exp(-x))


def make_params(rng, vocab: int, h: int) -> dict:
    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    # [i, o, u, f_left, f_right] for the inner cell, from both children's h
    return {"emb": w(vocab, h), "wl": w(h, 5 * h), "wr": w(h, 5 * h), "b": np.zeros(5 * h, np.float32)}


def leaf_math(e, xp):
    return xp.tanh(e), xp.zeros_like(e)                           # (h, c) of a word


def node_math(hl, cl, hr, cr, wl, wr, b, xp):
    h = hl.shape[-1]
    g = hl @ wl + hr @ wr + b
    i, o, u = sigmoid(g[..., :h], xp), sigmoid(g[..., h:2 * h], xp), xp.tanh(g[..., 2 * h:3 * h])
    fl, fr = sigmoid(g[..., 3 * h:4 * h], xp), sigmoid(g[..., 4 * h:], xp)
    c = i * u + fl * cl + fr * cr
    return o * xp.tanh(c), c


@rj.jit
def leaf(e):
    return leaf_math(e, rnp)


@rj.jit
def node(hl, cl, hr, cr, wl, wr, b):
    return node_math(hl, cl, hr, cr, wl, wr, b, rnp)


def encode(tree, p):
    """One tree: a word id (a leaf) or a pair of trees. Returns the root's h."""
    def go(t):
        if isinstance(t, tuple):
            (hl, cl), (hr, cr) = go(t[0]), go(t[1])
            return node(hl, cl, hr, cr, p["wl"], p["wr"], p["b"])
        return leaf(p["emb"][t])
    return go(tree)[0]


def encode_numpy(tree, p):
    def go(t):
        if isinstance(t, tuple):
            (hl, cl), (hr, cr) = go(t[0]), go(t[1])
            return node_math(hl, cl, hr, cr, p["wl"], p["wr"], p["b"], np)
        return leaf_math(p["emb"][t], np)
    return go(tree)[0]


def encode_levels(trees, p):
    """By hand: every node of one height (leaves 0) of every tree at once, in NumPy."""
    nodes = []                                   # (tree, height, children)

    def walk(t):
        if isinstance(t, tuple):
            a, b = walk(t[0]), walk(t[1])
            k = len(nodes)
            nodes.append((t, 1 + max(nodes[a][1], nodes[b][1]), (a, b)))
        else:
            k = len(nodes)
            nodes.append((t, 0, None))
        return k
    roots = [walk(t) for t in trees]
    h = np.zeros((len(nodes), p["emb"].shape[1]), np.float32)
    c = np.zeros_like(h)
    for height in range(max(n[1] for n in nodes) + 1):
        ks = [k for k, n in enumerate(nodes) if n[1] == height]
        if height == 0:
            h[ks], c[ks] = leaf_math(p["emb"][[nodes[k][0] for k in ks]], np)
            continue
        left = [nodes[k][2][0] for k in ks]
        right = [nodes[k][2][1] for k in ks]
        h[ks], c[ks] = node_math(h[left], c[left], h[right], c[right], p["wl"], p["wr"], p["b"], np)
    return [h[r] for r in roots]


def random_tree(rng, leaves: int, vocab: int):
    if leaves == 1:
        return int(rng.integers(vocab))
    k = int(rng.integers(1, leaves))
    return (random_tree(rng, k, vocab), random_tree(rng, leaves - k, vocab))


def best_ms(fn, repeats: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main(small: bool) -> None:
    rng = np.random.default_rng(0)
    h, count, vocab = (32, 16, 100) if small else (256, 64, 2000)
    p = make_params(rng, vocab, h)
    sizes = np.clip(np.round(rng.lognormal(np.log(17), 0.5, count)), 1, 30).astype(int)
    trees = [random_tree(rng, int(n), vocab) for n in sizes]
    want = [encode_numpy(t, p) for t in trees]
    batched = {policy: rj.autobatch(lambda t: encode(t, p), policy=policy) for policy in ("depth", "agenda", "fsm")}
    for policy, f in batched.items():
        got = f(trees)
        err = max(np.abs(g - w).max() for g, w in zip(got, want))
        assert err < 1e-4, (policy, err)
    levels = encode_levels(trees, p)
    assert max(np.abs(g - w).max() for g, w in zip(levels, want)) < 1e-5
    times = {
        "NumPy, tree by tree": best_ms(lambda: [encode_numpy(t, p) for t in trees]),
        "relaxjax cells, tree by tree": best_ms(lambda: [encode(t, p) for t in trees]),
        "NumPy, level by level (by hand)": best_ms(lambda: encode_levels(trees, p)),
    }
    for policy, f in batched.items():
        times[f"rj.autobatch, policy {policy!r}"] = best_ms(lambda: f(trees))
    print(f"{count} binary trees, {sizes.mean():.1f} leaves on average (max {sizes.max()}), hidden {h}")
    for name, ms in times.items():
        print(f"  {name:34s} {ms:8.1f} ms")
    for policy, f in batched.items():
        s = f.stats()
        calls = s["instances"] // count
        flat = rj.autobatch(lambda t: encode(t, p), policy=policy, layout=False)
        flat(trees)
        print(f"  {policy}: {s['batches'] // calls} batches per call for {s['nodes'] // calls} nodes; "
              f"gathered {s['gather_bytes'] / calls / 1024:.0f} KB per call "
              f"({flat.stats()['gather_bytes'] / 1024:.0f} KB without the layout); compiles: {s['compiles']}")
    print("results equal NumPy's tree by tree (within 1e-4)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="few small trees (seconds)")
    main(ap.parse_args().small)
