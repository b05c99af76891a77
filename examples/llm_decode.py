"""LLM decoding with a KV cache: a GPT-style decoder, jitted once for every prompt length,
batch size and cache length.

The model: token and learned position embeddings, pre-norm blocks (LayerNorm, multi-head
self-attention, LayerNorm, a GELU MLP), a final LayerNorm and logits from the tied token
embedding; random weights (float32) made here.  Generation is the usual two phases:

* **prefill**: the whole prompt (batch ``b``, length ``s``, both symbolic) through causal
  attention, returning the logits of its last position and every layer's keys and values;
* **decode**: one new token per sequence per step, attending to the cache of all the
  positions before it, so the cache length ``t`` grows by one every step (up to 1024).

The cache is kept two ways, each compiled once for every length:

(a) the Relax way: the cache *is* the keys so far, ``f32[b, t, heads, head_dim]`` with ``t`` a
    symbolic dim; a step appends its key and value with ``concatenate`` and returns a cache of
    length ``t + 1``, the position of the new token is ``t`` itself (read from the shape), and
    attention over all ``t + 1`` keys is the unmasked fused kernel;
(b) the JAX way: a cache preallocated at its maximum length, written in place at a traced
    position ``pos`` (``rj.lax.dynamic_update_slice``), with attention to the filled part
    only: ``key_value_seq_lengths`` (jax.nn's argument), which the attention kernel's loops
    stop at (a mask written by hand, ``rnp.where(rnp.arange(max_len) <= pos, s, -1e9)``,
    compiles to the same call: ``compile/attention.py``).

Both are functional, as everything in relaxjax: a step returns new caches, and both donate
the caches they are given (``donate_argnums``, as in JAX): (b) writes the new position into
the arrays it was given and copies nothing; (a) grows the cache where it is: the compiler
keeps a donated cache that a concatenation extends in an array with room after each
sequence's positions (``compile/growing_caches.py``), writes the new position only and
attends over the cache in place, so the ``t`` positions so far are copied once every
``t / 4`` steps rather than every step, at any batch size (the caches returned are views).

The decode steps have explicit signatures (``shapes=`` with ``rj.dim``), so one compile serves
every batch size and cache lengths 0..1023 in (1..1024 out); the same functions in automatic
mode (plain ``rj.jit``) are run too and their compile counts printed (an empty cache first
seen after a non-empty one traces a second entry there: its symbol was made with bounds
[1, inf)).

Printed: the compile counts (``cache_info()``), the first-token latency (prefill and the first
decode step), the decode throughput of both styles at batch 1 (a 16-token prompt, 1008
steps) and batch 8 (a 768-token prompt, 256 steps), and the same step in eager NumPy float32
with its cache written in place, for scale.  Checks (asserted): the logits of the prefill and
of decode steps at several cache lengths against the same model in plain NumPy float64
recomputing the whole sequence, and the two cache styles against each other.  The default run
takes about 1.5 minutes on one core; ``--small`` (2 layers, d_model 64, 32 steps) a few
seconds.

    python examples/llm_decode.py [--small]
"""
import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

import relaxjax as rj
import relaxjax.nn as nn
import relaxjax.numpy as rnp
from relaxjax.lax import dynamic_slice, dynamic_update_slice


@dataclass(frozen=True)
class Config:
    layers: int = 6
    d_model: int = 384
    heads: int = 6
    ffn: int = 1536
    vocab: int = 8192
    max_len: int = 1024          # positions: prompt + generated tokens
    # (batch, prompt length): each run decodes until the cache holds max_len positions
    runs: tuple = ((1, 16), (8, 768))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


SMALL = Config(layers=2, d_model=64, heads=2, ffn=256, vocab=512, max_len=48, runs=((1, 16), (8, 16)))


def init_params(cfg: Config, rng) -> dict:
    """GPT-2-like random weights (normal, std 0.02; residual projections scaled down)."""
    D, F, L = cfg.d_model, cfg.ffn, cfg.layers

    def normal(*shape, std=0.02):
        return (std * rng.standard_normal(shape)).astype(np.float32)

    def layer():
        return {"ln1_g": 1 + normal(D, std=0.1), "ln1_b": normal(D),
                "w_qkv": normal(D, 3 * D), "b_qkv": normal(3 * D),
                "w_o": normal(D, D, std=0.02 / math.sqrt(2 * L)), "b_o": normal(D),
                "ln2_g": 1 + normal(D, std=0.1), "ln2_b": normal(D),
                "w_fc": normal(D, F), "b_fc": normal(F),
                "w_proj": normal(F, D, std=0.02 / math.sqrt(2 * L)), "b_proj": normal(D)}
    return {"wte": normal(cfg.vocab, D), "wpe": normal(cfg.max_len, D, std=0.01),
            "lnf_g": 1 + normal(D, std=0.1), "lnf_b": normal(D),
            "layers": [layer() for _ in range(L)]}


# ---------------------------------------------------------------------------------------
# the model, written once: x is (b, T, d_model) for T new positions; `attend` does attention
# of the new queries over the cache (and returns the updated cache)
# ---------------------------------------------------------------------------------------
def block(p, x, attend, heads):
    b, T, D = x.shape
    h = nn.layer_norm(x, p["ln1_g"], p["ln1_b"])
    qkv = h @ p["w_qkv"] + p["b_qkv"]                              # (b, T, 3D)
    q, k, v = (rnp.reshape(qkv[:, :, i * D:(i + 1) * D], (b, T, heads, D // heads))
               for i in range(3))
    a, cache = attend(q, k, v)                                       # (b, T, heads, hd)
    x = x + rnp.reshape(a, (b, T, D)) @ p["w_o"] + p["b_o"]
    h = nn.layer_norm(x, p["ln2_g"], p["ln2_b"])
    x = x + nn.gelu(h @ p["w_fc"] + p["b_fc"]) @ p["w_proj"] + p["b_proj"]
    return x, cache


def last_logits(params, x):
    """Logits of the last position, from the tied embedding: (b, vocab)."""
    h = nn.layer_norm(x[:, -1, :], params["lnf_g"], params["lnf_b"])
    return h @ params["wte"].T


def run_layers(params, x, attends, heads):
    caches = []
    for p, attend in zip(params["layers"], attends):
        x, cache = block(p, x, attend, heads)
        caches.append(cache)
    return last_logits(params, x), caches


def prefill(params, tokens, heads, max_len=None):
    """The prompt ``tokens`` (b, s) with causal attention: last logits and per-layer (k, v)
    caches of length s, or (``max_len`` given) preallocated caches of that length holding the
    prompt's keys at positions 0..s-1."""
    b, s = tokens.shape
    x = params["wte"][tokens] + params["wpe"][:s]

    def attend(q, k, v):
        a = nn.dot_product_attention(q, k, v, is_causal=True)
        if max_len is None:
            return a, (k, v)
        empty = rnp.zeros((b, max_len) + tuple(k.shape[2:]), k.dtype)
        return a, tuple(dynamic_update_slice(empty, c, (0, 0, 0, 0)) for c in (k, v))
    return run_layers(params, x, [attend] * len(params["layers"]), heads)


def decode_concat(params, token, caches, heads):
    """(a) One step, the Relax way: ``token`` (b,), caches [(k, v)] of (b, t, heads, hd); the
    new token's position is t, the caches come back with length t + 1."""
    t = caches[0][0].shape[1]
    D = params["wte"].shape[1]
    x = params["wte"][token][:, None, :] + dynamic_slice(params["wpe"], (t, 0), (1, D))

    def attender(kc, vc):
        def attend(q, k, v):
            k = rnp.concatenate([kc, k], axis=1)                   # (b, t + 1, heads, hd)
            v = rnp.concatenate([vc, v], axis=1)
            return nn.dot_product_attention(q, k, v), (k, v)
        return attend
    return run_layers(params, x, [attender(kc, vc) for kc, vc in caches], heads)


def decode_prealloc(params, token, pos, caches, heads):
    """(b) One step, the JAX way: caches [(k, v)] of (b, max_len, heads, hd) holding
    positions 0..pos-1; the new token's key and value are written at ``pos`` (a traced
    int) and attention reads positions 0..pos of each sequence (its key lengths)."""
    D = params["wte"].shape[1]
    x = params["wte"][token][:, None, :] + dynamic_slice(params["wpe"], (pos, 0), (1, D))
    lengths = rnp.full(token.shape[0], pos + 1, dtype="int32")

    def attender(kc, vc):
        def attend(q, k, v):
            k = dynamic_update_slice(kc, k, (0, pos, 0, 0))
            v = dynamic_update_slice(vc, v, (0, pos, 0, 0))
            return nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths), (k, v)
        return attend
    return run_layers(params, x, [attender(kc, vc) for kc, vc in caches], heads)


# ---------------------------------------------------------------------------------------
# the reference: plain NumPy float64, the whole sequence recomputed
# ---------------------------------------------------------------------------------------
def forward_np(p, tokens, heads):
    """Logits of every position of ``tokens`` (b, T): (b, T, vocab), float64."""
    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    b, T = tokens.shape
    x = p["wte"][tokens] + p["wpe"][:T]
    D = x.shape[-1]
    hd = D // heads
    causal = np.tril(np.ones((T, T), bool))
    for lp in p["layers"]:
        qkv = ln(x, lp["ln1_g"], lp["ln1_b"]) @ lp["w_qkv"] + lp["b_qkv"]
        q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(b, T, heads, hd).transpose(0, 2, 1, 3)
                   for i in range(3))
        s = np.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd), -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        a = (w / w.sum(-1, keepdims=True)) @ v                     # (b, heads, T, hd)
        x = x + a.transpose(0, 2, 1, 3).reshape(b, T, D) @ lp["w_o"] + lp["b_o"]
        h = ln(x, lp["ln2_g"], lp["ln2_b"])
        x = x + gelu(h @ lp["w_fc"] + lp["b_fc"]) @ lp["w_proj"] + lp["b_proj"]
    return ln(x, p["lnf_g"], p["lnf_b"]) @ p["wte"].T


# ---------------------------------------------------------------------------------------
# the jitted functions
# ---------------------------------------------------------------------------------------
def param_structs(params):
    return {k: ([{n: rj.ShapeDtypeStruct(a.shape, a.dtype) for n, a in lp.items()} for lp in v]
                if k == "layers" else rj.ShapeDtypeStruct(v.shape, v.dtype))
            for k, v in params.items()}


def make_jitted(cfg: Config, params):
    """The prefills and decode steps, with explicit signatures: batch ``b``, prompt length
    ``s`` and cache length ``t`` symbolic."""
    H, hd, L, M = cfg.heads, cfg.head_dim, cfg.layers, cfg.max_len
    b = rj.dim("b", min=1, max=256)
    s = rj.dim("s", min=1, max=M)
    t = rj.dim("t", min=0, max=M - 1)               # the new token's position is t < max_len
    P = param_structs(params)
    i32 = "int32"
    f32 = "float32"

    def kv(length):
        return [(rj.ShapeDtypeStruct((b, length, H, hd), f32),) * 2 for _ in range(L)]
    prompt = rj.ShapeDtypeStruct((b, s), i32)
    token = rj.ShapeDtypeStruct((b,), i32)
    return {
        "prefill": rj.jit(lambda p, x: prefill(p, x, H), shapes=(P, prompt)),
        "prefill_prealloc": rj.jit(lambda p, x: prefill(p, x, H, M), shapes=(P, prompt)),
        # the caches are donated: the concatenation grows them where they are, into room
        # kept after each sequence, and writes the new position only (Relax's growing cache)
        "decode_concat": rj.jit(lambda p, x, c: decode_concat(p, x, c, H),
                                shapes=(P, token, kv(t)), donate_argnums=2),
        # the caches are donated (JAX's donate_argnums): each step writes its key and value
        # into the arrays it was given, instead of copying all max_len positions
        "decode_prealloc": rj.jit(lambda p, x, pos, c: decode_prealloc(p, x, pos, c, H),
                                  shapes=(P, token, rj.ShapeDtypeStruct((), i32), kv(M)),
                                  donate_argnums=3),
    }


def decode_numpy(p, token, pos, caches, heads):
    """The eager baseline for timing: one step in NumPy float32, the JAX-style cache written
    in place (``caches[l][0][:, pos] = k``), attention over positions 0..pos."""
    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b
    b, D = token.shape[0], p["wte"].shape[1]
    hd = D // heads
    x = p["wte"][token] + p["wpe"][pos]
    for lp, (kc, vc) in zip(p["layers"], caches):
        qkv = ln(x, lp["ln1_g"], lp["ln1_b"]) @ lp["w_qkv"] + lp["b_qkv"]
        q, k, v = (qkv[:, i * D:(i + 1) * D].reshape(b, heads, hd) for i in range(3))
        kc[:, pos], vc[:, pos] = k, v
        s = np.einsum("bhd,bthd->bht", q, kc[:, :pos + 1]) * (1 / math.sqrt(hd))
        w = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("bht,bthd->bhd", w / w.sum(-1, keepdims=True), vc[:, :pos + 1])
        x = x + a.reshape(b, D) @ lp["w_o"] + lp["b_o"]
        h = ln(x, lp["ln2_g"], lp["ln2_b"]) @ lp["w_fc"] + lp["b_fc"]
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))  # float32 (NEP 50)
        x = x + h @ lp["w_proj"] + lp["b_proj"]
    return ln(x, p["lnf_g"], p["lnf_b"]) @ p["wte"].T


def generate(fns, style, params, prompt, steps, forced=None):
    """Greedy decoding of ``steps`` tokens after ``prompt`` (or of the tokens ``forced``, when
    given) with cache style "concat" or "prealloc": the logits of the prefill and of every
    step (b, steps + 1, vocab), the tokens fed (b, steps), the prefill's time and each
    step's."""
    t0 = time.perf_counter()
    logits, caches = fns["prefill" if style == "concat" else "prefill_prealloc"](params, prompt)
    t_prefill = time.perf_counter() - t0
    out, tokens, times = [logits], [], []
    pos = prompt.shape[1]
    for i in range(steps):
        tok = forced[:, i] if forced is not None else np.argmax(logits, axis=-1).astype(np.int32)
        tokens.append(tok)
        t0 = time.perf_counter()
        if style == "concat":
            logits, caches = fns["decode_concat"](params, tok, caches)
        else:
            logits, caches = fns["decode_prealloc"](params, tok, np.int32(pos), caches)
        times.append(time.perf_counter() - t0)
        out.append(logits)
        pos += 1
    return np.stack(out, 1), np.stack(tokens, 1), t_prefill, np.array(times)


def median_ms(fn, repeats=5):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[len(times) // 2]


def main(small: bool) -> None:
    cfg = SMALL if small else Config()
    rng = np.random.default_rng(0)
    params = init_params(cfg, rng)
    params64 = {k: ([{n: a.astype(np.float64) for n, a in lp.items()} for lp in v]
                    if k == "layers" else v.astype(np.float64)) for k, v in params.items()}
    n_params = sum(a.size for k, v in params.items()
                   for a in ([x for lp in v for x in lp.values()] if k == "layers" else [v]))
    H, hd, M = cfg.heads, cfg.head_dim, cfg.max_len
    print(f"GPT-style decoder: {cfg.layers} layers, d_model {cfg.d_model}, {H} heads, FFN {cfg.ffn}, "
          f"vocab {cfg.vocab}, {n_params / 1e6:.2f}M parameters (float32), up to {M} positions")

    # -- explicit signatures: the first calls compile, once per function for every shape --
    fns = make_jitted(cfg, params)
    t0 = time.perf_counter()
    warm = rng.integers(0, cfg.vocab, (1, 3)).astype(np.int32)
    for style in ("concat", "prealloc"):
        generate(fns, style, params, warm, 2)
    print(f"compiling the 4 functions (or loading them from the persistent cache): "
          f"{time.perf_counter() - t0:.1f} s")

    for batch, plen in cfg.runs:
        steps = M - plen
        prompt = rng.integers(0, cfg.vocab, (batch, plen)).astype(np.int32)
        la, toks, tpa, ta = generate(fns, "concat", params, prompt, steps)
        lb, _, tpb, tb = generate(fns, "prealloc", params, prompt, steps, forced=toks)
        # the reference: the logits recomputed from the whole sequence in float64 (for the
        # first and last sequence of the batch), at a few cache lengths
        rows = sorted({0, batch - 1})
        checks = sorted({0, 1, 2, steps // 2, steps})
        seq = np.concatenate([prompt, toks], axis=1)[rows]
        ref = forward_np(params64, seq[:, :plen + checks[-1]], H)[:, plen - 1 + np.array(checks)]
        scale = np.abs(ref).max()
        err_a = np.abs(la[rows][:, checks] - ref).max() / scale
        err_b = np.abs(lb[rows][:, checks] - ref).max() / scale
        err_ab = np.abs(la - lb).max() / np.abs(la).max()
        agree = (np.argmax(lb[:, :-1], -1) == toks).mean()
        print(f"\nbatch {batch}, prompt {plen}, {steps} decode steps (cache length t = {plen}..{M - 1}):")
        print(f"  logits vs NumPy float64 (full recompute) at steps {checks} (0: the prefill): max "
              f"relative error concat {err_a:.1e}, prealloc {err_b:.1e}; concat vs prealloc over "
              f"all {steps + 1} logits {err_ab:.1e}, greedy tokens agree {agree:.0%}")
        assert la.shape == (batch, steps + 1, cfg.vocab) and np.isfinite(la).all()
        assert err_a < 1e-4 and err_b < 1e-4 and err_ab < 1e-4, (err_a, err_b, err_ab)
        w = min(16, steps // 4)                      # windows of steps at the first and last lengths
        t_lo, t_hi = plen + w // 2, M - 1 - w // 2
        for name, tp, tt in (("concat", tpa, ta), ("prealloc", tpb, tb)):
            steady = tt[1:]
            print(f"  {name:8s}: first token {(tp + tt[0]) * 1e3:6.1f} ms (prefill {tp * 1e3:.1f} ms), "
                  f"decode {batch * len(steady) / steady.sum():6.1f} tokens/s ({steady.mean() * 1e3:.2f} "
                  f"ms/step; median step at t ~ {t_lo}: {np.median(tt[:w]) * 1e3:.2f} ms, "
                  f"at t ~ {t_hi}: {np.median(tt[-w:]) * 1e3:.2f} ms)")
        # the eager NumPy float32 step (in-place cache), for scale
        caches = [(rng.standard_normal((batch, M, H, hd), dtype=np.float32),) * 2
                  for _ in range(cfg.layers)]
        tok = toks[:, 0]
        assert decode_numpy(params, tok, t_lo, caches, H).dtype == np.float32
        n_lo, n_hi = (median_ms(lambda: decode_numpy(params, tok, t, caches, H)) for t in (t_lo, t_hi))
        print(f"  NumPy float32 eager step, cache written in place: t = {t_lo}: {n_lo:.2f} ms, "
              f"t = {t_hi}: {n_hi:.2f} ms ({batch * 2e3 / (n_lo + n_hi):.1f} tokens/s)")

    print()
    for name, f in fns.items():
        info = f.cache_info()
        print(f"explicit {name}: compiles {info.compiles} ({info.hits} hits)")
        assert info.compiles == 1, (name, info)

    # -- automatic mode: plain rj.jit, the dims found at the first call --
    auto = {"prefill": rj.jit(lambda p, x: prefill(p, x, H)),
            "prefill_prealloc": rj.jit(lambda p, x: prefill(p, x, H, M)),
            "decode_concat": rj.jit(lambda p, x, c: decode_concat(p, x, c, H)),
            "decode_prealloc": rj.jit(lambda p, x, pos, c: decode_prealloc(p, x, pos, c, H),
                                      donate_argnums=3)}
    for batch, plen in ((1, 5), (8, 9), (3, 2)):
        prompt = rng.integers(0, cfg.vocab, (batch, plen)).astype(np.int32)
        la, toks, _, _ = generate(auto, "concat", params, prompt, 3)
        lb, _, _, _ = generate(auto, "prealloc", params, prompt, 3, forced=toks)
        le, _, _, _ = generate(fns, "concat", params, prompt, 3, forced=toks)
        assert np.allclose(la, le, rtol=1e-4, atol=1e-5) and np.allclose(lb, le, rtol=1e-4, atol=1e-5)
    after_prompts = {name: f.cache_info().compiles for name, f in auto.items()}
    # decoding from an empty cache (no prompt): cache lengths 0, 1, 2, in both modes
    tok = np.zeros(2, np.int32)
    ca = ce = [(np.zeros((2, 0, H, hd), np.float32),) * 2 for _ in range(cfg.layers)]
    for _ in range(3):
        la, ca = auto["decode_concat"](params, tok, ca)
        le, ce = fns["decode_concat"](params, tok, ce)
        assert np.allclose(la, le, rtol=1e-4, atol=1e-5)
    print(f"explicit decode_concat after decoding from an empty cache (t = 0, 1, 2): compiles "
          f"{fns['decode_concat'].cache_info().compiles}")
    assert fns["decode_concat"].cache_info().compiles == 1
    print("automatic mode (plain rj.jit): batch 1, 8, 3 with prompts of 5, 9, 2 tokens and 3 "
          "decode steps each, then decode_concat from an empty cache (batch 2, t = 0, 1, 2):")
    for name, f in auto.items():
        info = f.cache_info()
        extra = info.compiles - after_prompts[name]
        note = f" ({after_prompts[name]} for the prompts, {extra} more for the empty cache)" \
            if name == "decode_concat" else ""
        print(f"automatic {name}: compiles {info.compiles}{note}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a tiny model, 32 steps (a few seconds)")
    main(ap.parse_args().small)
