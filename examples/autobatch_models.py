"""Workloads for ``rj.autobatch`` (issue 21), shared by tests/test_autobatch*.py and
benchmarks/autobatch.py: models written for one instance in plain Python, calling
``@rj.jit`` cells, each with a NumPy twin (the same math, one instance at a time) as the
oracle, and for some a hand-batched NumPy version (what a user writes by hand).

* ``tree``: the binary TreeLSTM of ``examples/tree_lstm.py`` over random binary parse trees
  with SST-like sizes (about 17 leaves on average, at most 30);
* ``bilstm``: a BiLSTM tagger over sentences of lognormal lengths (about 20 words, at most
  60): a forward and a backward LSTM (one cell, two weight sets) and a tag layer per word;
* ``lattice``: a lattice LSTM (Zhang & Yang 2018, simplified) over random DAGs: a chain of
  characters and random lexicon words spanning 2-4 characters; a word cell runs from its
  first character's state, and the character where a word ends merges the word's cell
  state through a gate (a third cell).  At most one word ends at a character;
* ``exits``: an early-exit classifier (Berxit-like): a stack of residual layers, after each
  a cheap classifier head whose top class probability is the confidence; an instance exits
  at the first layer where it exceeds a threshold.  ``fn`` is a generator (it yields the
  confidence and is resumed with its value, so ``rj.autobatch`` suspends the instance while
  the others catch up); ``flushing`` is the same model testing ``float(conf)`` (each test
  runs everything recorded so far).

Each ``make_*(rng, hidden, count, dtype)`` returns a :class:`Workload`.  Why a module: the
tests check the autobatched results against ``numpy`` on hypothesis-drawn instances and
the benchmark times the same functions, so both use one definition.

    python examples/autobatch_models.py [--small]     # batches per policy on each workload
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable

import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_lstm  # noqa: E402


@dataclasses.dataclass
class Workload:
    name: str
    instances: list
    fn: Callable                       # one instance, calling @rj.jit cells (autobatch it)
    numpy: Callable                    # one instance in NumPy: the oracle
    by_hand: Callable | None = None    # all instances at once, batched by hand in NumPy
    cells: tuple = ()                  # the cells fn calls (compile counts)
    count_nodes: Callable | None = None   # cell calls for one instance
    params: dict | None = None
    flushing: Callable | None = None   # exits: the model testing float(conf) instead of yielding

    def nodes(self) -> int:
        """Cell calls per pass over the instances."""
        return sum(self.count_nodes(x) for x in self.instances)


def sigmoid(x, xp):
    return 1 / (1 + xp.exp(-x))


def _w(rng, dtype, *shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype)


# ------------------------------------------------------------------------- TreeLSTM
def tree_sizes(rng, count: int) -> np.ndarray:
    """Leaves per tree, SST-like: lognormal around 17, clipped to [1, 30]."""
    return np.clip(np.round(rng.lognormal(np.log(17), 0.5, count)), 1, 30).astype(int)


def make_tree(rng, hidden: int = 256, count: int = 64, dtype=np.float32, sizes=None, vocab: int = 2000) -> Workload:
    p = {k: v.astype(dtype) for k, v in tree_lstm.make_params(rng, vocab, hidden).items()}
    sizes = tree_sizes(rng, count) if sizes is None else sizes
    trees = [tree_lstm.random_tree(rng, int(n), vocab) for n in sizes]

    def leaves(t):
        return leaves(t[0]) + leaves(t[1]) if isinstance(t, tuple) else 1
    return Workload("tree", trees, lambda t: tree_lstm.encode(t, p), lambda t: tree_lstm.encode_numpy(t, p),
                    lambda ts: tree_lstm.encode_levels(ts, p), (tree_lstm.leaf, tree_lstm.node),
                    lambda t: 2 * leaves(t) - 1, p)


# ---------------------------------------------------------------------- BiLSTM tagger
def lstm_math(h, c, x, w, u, b, xp):
    n = h.shape[-1]
    g = x @ w + h @ u + b
    i, f, o = sigmoid(g[..., :n], xp), sigmoid(g[..., n:2 * n], xp), sigmoid(g[..., 2 * n:3 * n], xp)
    c = f * c + i * xp.tanh(g[..., 3 * n:])
    return o * xp.tanh(c), c


def tag_math(hf, hb, wf, wb, b, xp):
    return hf @ wf + hb @ wb + b


@rj.jit
def lstm_step(h, c, x, w, u, b):
    return lstm_math(h, c, x, w, u, b, rnp)


@rj.jit
def tag(hf, hb, wf, wb, b):
    return tag_math(hf, hb, wf, wb, b, rnp)


def sentence_lengths(rng, count: int, cap: int = 60) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(np.log(18), 0.5, count)), 1, cap).astype(int)


def bilstm_params(rng, vocab: int, dim: int, hidden: int, tags: int, dtype) -> dict:
    p = {"emb": _w(rng, dtype, vocab, dim), "h0": np.zeros(hidden, dtype),
         "wt_f": _w(rng, dtype, hidden, tags), "wt_b": _w(rng, dtype, hidden, tags), "bt": np.zeros(tags, dtype)}
    for d in ("f", "b"):
        p["w" + d], p["u" + d] = _w(rng, dtype, dim, 4 * hidden), _w(rng, dtype, hidden, 4 * hidden)
        p["b" + d] = np.zeros(4 * hidden, dtype)
    return p


def bilstm(words, p, step=lstm_step, tagger=tag, xp=None):
    """One sentence (word ids): tag logits per word from a forward and a backward LSTM."""
    xs = [p["emb"][w] for w in words]
    fwd, bwd = [], []
    h = c = p["h0"]
    for x in xs:
        h, c = step(h, c, x, p["wf"], p["uf"], p["bf"])
        fwd.append(h)
    h = c = p["h0"]
    for x in reversed(xs):
        h, c = step(h, c, x, p["wb"], p["ub"], p["bb"])
        bwd.append(h)
    bwd.reverse()
    return [tagger(hf, hb, p["wt_f"], p["wt_b"], p["bt"]) for hf, hb in zip(fwd, bwd)]


def bilstm_numpy(words, p):
    return bilstm(words, p, lambda *a: lstm_math(*a, np), lambda *a: tag_math(*a, np))


def bilstm_by_hand(sentences, p):
    """All sentences at once, step by step over the sentences still running (NumPy)."""
    lengths = np.array([len(s) for s in sentences])
    order = np.argsort(-lengths, kind="stable")            # longest first: a step's rows are a prefix
    ls = lengths[order]
    x = np.zeros((len(sentences), ls[0], p["emb"].shape[1]), p["emb"].dtype)
    for r, k in enumerate(order):
        x[r, :ls[r]] = p["emb"][sentences[k]]
    hid = p["h0"].shape[0]
    outs = {}
    for d in ("f", "b"):
        h = np.zeros((len(sentences), hid), p["h0"].dtype)
        c = np.zeros_like(h)
        hs = np.zeros((len(sentences), ls[0], hid), h.dtype)
        for t in range(ls[0]):
            m = int((ls > t).sum())
            pos = t if d == "f" else ls[:m] - 1 - t
            xt = x[:m, t] if d == "f" else x[np.arange(m), pos]
            h[:m], c[:m] = lstm_math(h[:m], c[:m], xt, p["w" + d], p["u" + d], p["b" + d], np)
            hs[np.arange(m), pos] = h[:m]
        outs[d] = hs
    logits = tag_math(outs["f"], outs["b"], p["wt_f"], p["wt_b"], p["bt"], np)
    result = [None] * len(sentences)
    for r, k in enumerate(order):
        result[k] = list(logits[r, :ls[r]])
    return result


def make_bilstm(rng, hidden: int = 128, count: int = 64, dtype=np.float32, lengths=None, dim: int = 64,
                vocab: int = 2000, tags: int = 16) -> Workload:
    p = bilstm_params(rng, vocab, dim, hidden, tags, dtype)
    lengths = sentence_lengths(rng, count) if lengths is None else lengths
    sents = [list(rng.integers(vocab, size=int(n))) for n in lengths]
    return Workload("bilstm", sents, lambda s: bilstm(s, p), lambda s: bilstm_numpy(s, p),
                    lambda ss: bilstm_by_hand(ss, p), (lstm_step, tag), lambda s: 3 * len(s), p)


# ------------------------------------------------------------------------ lattice LSTM
def word_math(h, c, x, w, u, b, xp):
    """A word cell (no output gate): the word's cell state from its first character's."""
    n = h.shape[-1]
    g = x @ w + h @ u + b
    return sigmoid(g[..., n:2 * n], xp) * c + sigmoid(g[..., :n], xp) * xp.tanh(g[..., 2 * n:])


def merge_math(h, c, x, cw, w, u, b, wl, ul, xp):
    """A character where a word ends: its candidate and the word's cell state, weighted by
    a softmax of the input gate and the word's gate (the lattice LSTM's rule)."""
    n = h.shape[-1]
    g = x @ w + h @ u + b
    i, o = xp.exp(sigmoid(g[..., :n], xp)), sigmoid(g[..., 2 * n:3 * n], xp)
    a = xp.exp(sigmoid(x @ wl + cw @ ul, xp))
    c = (i * xp.tanh(g[..., 3 * n:]) + a * cw) / (i + a)
    return o * xp.tanh(c), c


@rj.jit
def char_cell(h, c, x, w, u, b):
    return lstm_math(h, c, x, w, u, b, rnp)


@rj.jit
def word_cell(h, c, x, w, u, b):
    return word_math(h, c, x, w, u, b, rnp)


@rj.jit
def merge_cell(h, c, x, cw, w, u, b, wl, ul):
    return merge_math(h, c, x, cw, w, u, b, wl, ul, rnp)


def random_lattice(rng, n: int, vocab: int, p_word: float = 0.35):
    """n character ids and words (start, end, word id), end - start in 1..3, at most one
    word ending at each character."""
    chars = [int(c) for c in rng.integers(vocab, size=n)]
    words, ends = [], set()
    for s in range(n):
        if rng.random() < p_word:
            e = s + int(rng.integers(1, 4))
            if e < n and e not in ends:
                ends.add(e)
                words.append((s, e, int(rng.integers(vocab))))
    return chars, words


def lattice(inst, p, cells=(char_cell, word_cell, merge_cell)):
    """One lattice: the last character's h."""
    char, word, merge = cells
    chars, words = inst
    starting: dict = {}
    for s, e, w in words:
        starting.setdefault(s, []).append((e, w))
    ending: dict = {}
    h = c = p["h0"]
    for j, ch in enumerate(chars):
        x = p["emb"][ch]
        if j in ending:
            h, c = merge(h, c, x, ending[j], p["w"], p["u"], p["b"], p["wl"], p["ul"])
        else:
            h, c = char(h, c, x, p["w"], p["u"], p["b"])
        for e, w in starting.get(j, ()):
            ending[e] = word(h, c, p["wemb"][w], p["ww"], p["uw"], p["bw"])
    return h


def lattice_numpy(inst, p):
    return lattice(inst, p, (lambda *a: lstm_math(*a, np), lambda *a: word_math(*a, np),
                             lambda *a: merge_math(*a, np)))


def make_lattice(rng, hidden: int = 128, count: int = 64, dtype=np.float32, lengths=None, dim: int = 64,
                 vocab: int = 2000) -> Workload:
    p = {"emb": _w(rng, dtype, vocab, dim), "wemb": _w(rng, dtype, vocab, dim), "h0": np.zeros(hidden, dtype),
         "w": _w(rng, dtype, dim, 4 * hidden), "u": _w(rng, dtype, hidden, 4 * hidden),
         "b": np.zeros(4 * hidden, dtype), "wl": _w(rng, dtype, dim, hidden), "ul": _w(rng, dtype, hidden, hidden),
         "ww": _w(rng, dtype, dim, 3 * hidden), "uw": _w(rng, dtype, hidden, 3 * hidden),
         "bw": np.zeros(3 * hidden, dtype)}
    lengths = sentence_lengths(rng, count) if lengths is None else lengths
    insts = [random_lattice(rng, int(n), vocab) for n in lengths]
    return Workload("lattice", insts, lambda x: lattice(x, p), lambda x: lattice_numpy(x, p), None,
                    (char_cell, word_cell, merge_cell), lambda x: len(x[0]) + len(x[1]), p)


# ------------------------------------------------------------------ early-exit classifier
def exit_layer_math(h, w, b, xp):
    return h + xp.tanh(h @ w + b)


def exit_head_math(h, w, b, xp):
    """The layer's logits and confidence (the top class's probability); batched or not."""
    logits = h @ w + b
    e = xp.exp(logits - xp.amax(logits, axis=-1, keepdims=True))      # amax: torch's max is not numpy's
    return logits, xp.amax(e, axis=-1) / xp.sum(e, axis=-1)


@rj.jit
def exit_layer(h, w, b):
    return exit_layer_math(h, w, b, rnp)


@rj.jit
def exit_head(h, w, b):
    return exit_head_math(h, w, b, rnp)


def early_exit(x, p, threshold: float):
    """One instance (a vector), a generator: (the layer it exits after, that layer's logits).
    After each layer it yields the head's confidence and waits for its value."""
    for k in range(len(p["w"])):
        x = exit_layer(x, p["w"][k], p["b"][k])
        logits, conf = exit_head(x, p["wh"][k], p["bh"][k])
        if (yield conf) > threshold:
            return k, logits
    return k, logits


def early_exit_flushing(x, p, threshold: float, cells=(exit_layer, exit_head)):
    """The same model as a plain function: ``float(conf)`` (with the NumPy cells, the oracle;
    with the jitted ones under ``rj.autobatch``, a flush of everything recorded so far)."""
    layer, head = cells
    for k in range(len(p["w"])):
        x = layer(x, p["w"][k], p["b"][k])
        logits, conf = head(x, p["wh"][k], p["bh"][k])
        if float(conf) > threshold:
            return k, logits
    return k, logits


def early_exit_numpy(x, p, threshold: float):
    return early_exit_flushing(x, p, threshold, (lambda *a: exit_layer_math(*a, np),
                                                 lambda *a: exit_head_math(*a, np)))


def early_exit_by_hand(xs, p, threshold: float):
    """All instances at once, layer by layer over the instances not exited yet (NumPy)."""
    h, live = np.stack(xs), np.arange(len(xs))
    out = [None] * len(xs)
    last = len(p["w"]) - 1
    for k in range(last + 1):
        h = exit_layer_math(h, p["w"][k], p["b"][k], np)
        logits, conf = exit_head_math(h, p["wh"][k], p["bh"][k], np)
        done = conf > threshold if k < last else np.ones(len(live), bool)
        for i, row in zip(live[done], logits[done]):
            out[i] = (k, row)
        h, live = h[~done], live[~done]
    return out


def exit_params(rng, hidden: int, layers: int, classes: int, dtype) -> dict:
    """Per layer (lists: one array object per layer, passed once to a batch): the layer's
    weights and its head's; the heads sharpen with depth, so deeper layers are more confident."""
    return {"w": [_w(rng, dtype, hidden, hidden) for _ in range(layers)],
            "b": [np.zeros(hidden, dtype) for _ in range(layers)],
            "wh": [(_w(rng, dtype, hidden, classes) * (0.5 + k / 6)).astype(dtype) for k in range(layers)],
            "bh": [np.zeros(classes, dtype) for _ in range(layers)]}


EXIT_THRESHOLD = 0.9


def make_exits(rng, hidden: int = 128, count: int = 64, dtype=np.float32, layers: int = 12, classes: int = 4,
               threshold: float = EXIT_THRESHOLD) -> Workload:
    p = exit_params(rng, hidden, layers, classes, dtype)
    xs = [rng.standard_normal(hidden).astype(dtype) for _ in range(count)]
    return Workload("exits", xs, lambda x: early_exit(x, p, threshold), lambda x: early_exit_numpy(x, p, threshold),
                    lambda xs: early_exit_by_hand(xs, p, threshold), (exit_layer, exit_head),
                    lambda x: 2 * (early_exit_numpy(x, p, threshold)[0] + 1), p,
                    lambda x: early_exit_flushing(x, p, threshold))


WORKLOADS = {"tree": make_tree, "bilstm": make_bilstm, "lattice": make_lattice, "exits": make_exits}


def main(small: bool) -> None:
    for name, make in WORKLOADS.items():
        w = make(np.random.default_rng(0), hidden=16 if small else 128, count=16 if small else 64,
                 dtype=np.float64)
        row = []
        for policy in ("depth", "agenda", "fsm"):
            b = rj.autobatch(w.fn, policy=policy)
            got = b(w.instances)
            for g, x in zip(got, w.instances):
                want = w.numpy(x)
                if name == "exits":
                    assert g[0] == want[0]
                    g, want = g[1], want[1]
                np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-9, atol=1e-9)
            row.append(f"{policy} {b.stats()['batches']}")
            if w.flushing is not None:
                f = rj.autobatch(w.flushing, policy=policy)
                f(w.instances)
                row[-1] += f" ({f.stats()['batches']} testing float())"
        print(f"{name}: {len(w.instances)} instances, {w.nodes()} cell calls; batches: {', '.join(row)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="small cells, 16 instances")
    main(ap.parse_args().small)
