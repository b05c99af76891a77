"""A transformer encoder layer over a batch of sentences of different lengths, without padding.

Batches of 64 sentences whose lengths follow MNLI's distribution (lognormal: mean of log
3.667, sd 0.468, clipped to [1, 128]; about 43 tokens on average) go through one encoder
layer (8 heads of 64, FFN 2048, post-norm, GELU), two ways, each jitted once for every batch:

* ragged (``relaxjax.ragged``): the sentences packed one after the other, so the
  projections and the FFN are matrix products over the real tokens only, and attention
  (``ragged.dot_product_attention``, varlen) runs on the packed rows, each sentence's
  queries against its own keys, nothing padded;
* padded: every sentence padded to 128 tokens and attention masked (``key_value_seq_lengths``),
  as a dense framework would run it.

Both are checked against the layer run sentence by sentence in NumPy (float64), and their
times printed with the share of the padded version's work that is real.

    python examples/ragged_encoder.py [--small]
"""
import argparse
import math
import time

import numpy as np

import relaxjax as rj
import relaxjax.nn as nn
from relaxjax import ragged

CAP = 128


def mnli_lengths(rng, batch: int, cap: int = CAP) -> np.ndarray:
    return np.clip(np.round(np.exp(rng.normal(3.667, 0.468, batch))), 1, cap).astype(np.int64)


def init(rng, d: int, ffn: int) -> dict:
    def w(*shape):
        return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)
    zeros = lambda n: np.zeros(n, np.float32)                # noqa: E731
    ones = lambda n: np.ones(n, np.float32)                  # noqa: E731
    return {"wqkv": w(d, 3 * d), "bqkv": zeros(3 * d), "wo": w(d, d), "bo": zeros(d),
            "w1": w(d, ffn), "b1": zeros(ffn), "w2": w(ffn, d), "b2": zeros(d),
            "g1": ones(d), "n1": zeros(d), "g2": ones(d), "n2": zeros(d)}


def encoder_ragged(p, x: ragged.RaggedArray, heads: int) -> ragged.RaggedArray:
    """One layer on packed sentences: every product over the real tokens only (attention
    within each sentence on the packed rows, no padding)."""
    d = x.inner_shape[0]
    qkv = x @ p["wqkv"] + p["bqkv"]
    q, k, v = (qkv.with_values(qkv.values[:, i * d:(i + 1) * d].reshape((-1, heads, d // heads)))
               for i in range(3))
    a = ragged.dot_product_attention(q, k, v)
    a = a.with_values(a.values.reshape((-1, d)))
    h = nn.layer_norm(x + (a @ p["wo"] + p["bo"]), p["g1"], p["n1"])
    f = nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return nn.layer_norm(h + f, p["g2"], p["n2"])


def encoder_padded(p, x, lengths, heads: int):
    """The same layer on (batch, 128, d) padded sentences, attention to each one's tokens."""
    b, t, d = x.shape
    qkv = x @ p["wqkv"] + p["bqkv"]
    q, k, v = (qkv[:, :, i * d:(i + 1) * d].reshape((b, t, heads, d // heads)) for i in range(3))
    a = nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths).reshape((b, t, d))
    h = nn.layer_norm(x + (a @ p["wo"] + p["bo"]), p["g1"], p["n1"])
    f = nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return nn.layer_norm(h + f, p["g2"], p["n2"])


def encoder_numpy(p, x, heads: int):
    """One sentence (n, d) in NumPy float64: the reference."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    n, d = x.shape

    def ln(y, g, b):
        return (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5) * g + b
    qkv = x @ p["wqkv"] + p["bqkv"]
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, heads, d // heads) for i in range(3))
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(d // heads)
    w = np.exp(s - s.max(-1, keepdims=True))
    a = np.einsum("hts,shd->thd", w / w.sum(-1, keepdims=True), v).reshape(n, d)
    h = ln(x + a @ p["wo"] + p["bo"], p["g1"], p["n1"])
    z = h @ p["w1"] + p["b1"]
    z = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    return ln(h + z @ p["w2"] + p["b2"], p["g2"], p["n2"])


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[len(times) // 2]


def main(small: bool) -> None:
    rng = np.random.default_rng(0)
    d, heads, ffn, batch, batches = (64, 2, 256, 8, 3) if small else (512, 8, 2048, 64, 6)
    p = init(rng, d, ffn)
    run_ragged = rj.jit(lambda p, x: encoder_ragged(p, x, heads))
    run_padded = rj.jit(lambda p, x, n: encoder_padded(p, x, n, heads))
    t_r, t_p, real = [], [], []
    for _ in range(batches):
        lengths = mnli_lengths(rng, batch)
        sents = [rng.standard_normal((n, d)).astype(np.float32) for n in lengths]
        x = ragged.from_list(sents)
        padded = np.zeros((batch, CAP, d), np.float32)
        for b, s in enumerate(sents):
            padded[b, :len(s)] = s
        out_r = run_ragged(p, x).to_list()
        out_p = run_padded(p, padded, lengths.astype(np.int32))
        for b, s in enumerate(sents[:4]):
            want = encoder_numpy(p, s.astype(np.float64), heads)
            err_r = np.abs(out_r[b] - want).max()
            err_p = np.abs(out_p[b, :len(s)] - want).max()
            assert err_r < 1e-3 and err_p < 1e-3, (err_r, err_p)
        t_r.append(median_ms(lambda: run_ragged(p, x), 3))
        t_p.append(median_ms(lambda: run_padded(p, padded, lengths.astype(np.int32)), 3))
        real.append(lengths.sum() / (batch * CAP))
    print(f"{batches} batches of {batch} MNLI-like sentences (mean {np.mean(real) * CAP:.0f} tokens, "
          f"{100 * np.mean(real):.0f} % of the padded tokens real), d {d}, {heads} heads, FFN {ffn}")
    print(f"ragged: {np.median(t_r):.2f} ms per batch; padded to {CAP}: {np.median(t_p):.2f} ms "
          f"({np.median(t_p) / np.median(t_r):.2f}x the ragged time)")
    print("results match NumPy (float64, sentence by sentence) within 1e-3")
    print(f"compiles: ragged {run_ragged.cache_info().compiles}, padded {run_padded.cache_info().compiles} "
          f"for {batches} batches")
    assert run_ragged.cache_info().compiles == 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a small layer and few batches (seconds)")
    main(ap.parse_args().small)
