"""LLM decoding, cold: the GPT-style decoder of ``examples/llm_decode.py`` generating tokens
greedily with a KV cache, in relaxjax, NumPy, ``jax.jit``, torch eager and ``torch.compile``.

    python benchmarks/decode.py                          # 16-token prompt, 1008 steps, batch 1 and 8
    python benchmarks/decode.py --quick                  # small model, 64 steps (a few minutes)
    python benchmarks/decode.py --peers relaxjax-concat,jax-max --batches 1 --out decode.md

The model, its random weights (float32, seed 0), the relaxjax prefill and decode steps and
the NumPy references are the example's (``examples/`` is put on ``sys.path``); the same model
is written here once for jax and once for torch, reading the same weights.  Generation: a
prompt of ``--prompt`` tokens (16) through a causal prefill, then ``--steps`` decode steps
(1008, so the cache ends holding 1024 positions, the model's maximum), each feeding back the
argmax of the previous logits.  The cache grows by one position per step, which is what
makes decoding hard for a compiler that specializes on shapes.  Peers:

- ``numpy``: eager float32, the cache preallocated at the maximum length and written in
  place (the example's ``decode_numpy``; its prefill written here);
- ``jax``: ``jax.jit`` of a step taking a cache of the current length and returning it one
  position longer (``concatenate``): a new shape every step, so a compile every step;
- ``jax-bucket128``: the cache padded to a multiple of 128 positions, written with
  ``dynamic_update_slice`` at a traced position and attention masked to the filled part; the
  cache is padded by 128 more when full, so a compile per bucket (8 for 1024 positions);
- ``jax-max``: the same with the cache padded to the maximum length: one compile;
  (both masked jax peers donate the cache, ``donate_argnums``, so the write is in place);
- ``torch``: eager, the cache grown with ``torch.cat`` (layout ``(b, heads, t, hd)``,
  ``F.scaled_dot_product_attention``), no grad;
- ``torch.compile``: the same prefill and step under ``torch.compile(dynamic=True)`` (the
  prefill returns contiguous caches, as ``torch.cat`` does: else the second step recompiles
  for the new strides);
- ``relaxjax-concat``, ``relaxjax-prealloc``: the example's two cache styles with explicit
  symbolic signatures (``make_jitted``): a concatenated cache of symbolic length ``t``, and a
  max-length cache written with ``dynamic_update_slice`` and masked attention; one compile
  each for every batch size and cache length.
- ``relaxjax-concat-warm``, ``relaxjax-prealloc-warm``: the same, measured in a second
  process over the first one's persistent cache (what every run on a machine after its
  first sees: executables loaded, nothing compiled).

Every (peer, batch) runs in a fresh process (like ``train_step.py``) with ``--threads``
threads (default 2: ``*_NUM_THREADS``, ``XLA_FLAGS``, ``torch.set_num_threads``, relaxjax's
``set_num_threads``; pinned to that many cores when the machine has more), cold: relaxjax with
an empty persistent cache (``RELAXJAX_CACHE_DIR`` a fresh temp dir), torch with an empty
inductor cache (``TORCHINDUCTOR_CACHE_DIR``), jax with its persistent compilation cache off.
Imports and moving the weights into the framework are not timed.  Per (peer, batch):

- total s: the prefill and every step, compiles and the host argmax included (from the
  prefill call to the last step's logits on the host);
- compiles: of the decode step only (relaxjax ``cache_info().compiles``; jax the jitted
  step's ``_cache_size()``; torch.compile dynamo's ``counters["stats"]["unique_graphs"]``
  counted from after the prefill's compile; none for the eager peers);
- first token ms: the prefill plus the first decode step (cold: their compiles included);
- steady ms/step and tokens/s: the median step time over the last 256 steps (cache lengths
  769..1023 by default), tokens = batch per step; for ``jax`` every one of those steps
  compiles, so this is its real cost per step and not an execution time;
- warm step ms: the last step run again (5 times, median) with its inputs, all compiled:
  the execution time of a step at the peer's longest cache, compile-free for every peer;
- warm prefill ms: the prompt's prefill run again (5 times, median), compiled (the issue's
  prefill target is at ``--prompt 512``);
- max rel err: the logits of the prefill and of steps 1, 2, steps/2 and the last against the
  example's NumPy float64 model (``forward_np``, the whole sequence recomputed, on the
  peer's own tokens; first and last sequence of the batch), as max |diff| / max |ref|; the
  float32 tolerance is 1e-4 (the example's);
- tokens: whether the greedy tokens equal the ``numpy`` peer's (else the first step where
  they differ: float32 near-ties can flip an argmax, after which sequences diverge);
- bg cores: CPU that other processes used meanwhile (before each process the script waits
  up to ``--quiet-max-wait`` s, default 10, for a quiet machine), as ``batch_sizes.py``.

``jax`` compiles every step (about 0.8-1.3 s each for this model on 2 cores), so by default it
runs only the first 256 of the 1008 steps (``--peer-steps jax=256``; ``--quick``: 16 of 64)
with the same model; the table says so, gives its steady window's cache lengths and the
total its median step extrapolates to for all the steps.  ``--peer-steps ''`` runs every peer
for every step.  ``--steps`` sets the cache's maximum (prompt + steps: the weights are drawn
for that many positions).  ``--out`` writes the Markdown table there and the raw figures
(every step time) as JSON beside it (``report.write_report``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from report import write_report
from workers import run_cold_worker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = ["numpy", "jax", "jax-bucket128", "jax-max", "torch", "torch.compile",
         "relaxjax-concat", "relaxjax-prealloc", "relaxjax-concat-warm", "relaxjax-prealloc-warm"]
WARM = "-warm"      # the same peer in a second process over the first one's persistent cache
BUCKET = 128
STEADY_WINDOW = 256
WARM_REPS = 5
TOLERANCE = 1e-4
NOISY = 0.3          # rows whose process ran while others used more cores than this get a dagger


def model_config(quick: bool, prompt: int, steps: int):
    """The example's model (``SMALL`` for ``--quick``) with room for exactly prompt + steps
    positions (1024 for the defaults: the example's own config and weights)."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import llm_decode
    base = llm_decode.SMALL if quick else llm_decode.Config()
    return dataclasses.replace(base, max_len=prompt + steps)


# ------------------------------------------------------------------------------ peers
# Each builder returns a Peer: prefill(prompt) -> (logits as NumPy, state), step(token, pos,
# state) -> (logits as NumPy, state) where pos is the new token's position, compiles() (None
# for eager peers) and copy_state(state), a copy that stays valid after a step consumed the
# original (needed only where the cache is donated or written in place).
@dataclasses.dataclass
class Peer:
    prefill: callable
    step: callable
    compiles: callable = lambda: None
    copy_state: callable = lambda s: s


def ln_np(x, g, b):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b


def gelu_np(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))


def prefill_numpy(p, tokens, heads, caches):
    """The prompt through causal attention in NumPy float32, its keys and values written into
    the preallocated ``caches`` [(k, v)] of (b, max_len, heads, hd): last logits (b, vocab)."""
    b, s = tokens.shape
    D = p["wte"].shape[1]
    hd = D // heads
    x = p["wte"][tokens] + p["wpe"][:s]
    causal = np.tril(np.ones((s, s), bool))
    for lp, (kc, vc) in zip(p["layers"], caches):
        qkv = ln_np(x, lp["ln1_g"], lp["ln1_b"]) @ lp["w_qkv"] + lp["b_qkv"]
        q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(b, s, heads, hd) for i in range(3))
        kc[:, :s], vc[:, :s] = k, v
        sc = np.where(causal, np.einsum("bqhd,bkhd->bhqk", q, k) * (1 / math.sqrt(hd)), -np.inf)
        w = np.exp(sc - sc.max(-1, keepdims=True))
        a = np.einsum("bhqk,bkhd->bqhd", w / w.sum(-1, keepdims=True), v)
        x = x + a.reshape(b, s, D) @ lp["w_o"] + lp["b_o"]
        x = x + gelu_np(ln_np(x, lp["ln2_g"], lp["ln2_b"]) @ lp["w_fc"] + lp["b_fc"]) @ lp["w_proj"] + lp["b_proj"]
    return ln_np(x[:, -1], p["lnf_g"], p["lnf_b"]) @ p["wte"].T


def build_numpy(cfg, params, threads):
    from llm_decode import decode_numpy
    H, hd = cfg.heads, cfg.head_dim

    def prefill(prompt):
        shape = (prompt.shape[0], cfg.max_len, H, hd)
        caches = [(np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(cfg.layers)]
        return prefill_numpy(params, prompt, H, caches), caches
    return Peer(prefill, lambda tok, pos, caches: (decode_numpy(params, tok, pos, caches, H), caches))


def build_relaxjax(style, cfg, params, threads):
    from llm_decode import make_jitted
    from relaxjax.backends.llvm import set_num_threads
    set_num_threads(threads)
    fns = make_jitted(cfg, params)
    if style == "concat":
        step_fn = fns["decode_concat"]
        return Peer(lambda prompt: fns["prefill"](params, prompt),
                    lambda tok, pos, caches: step_fn(params, tok, caches),
                    lambda: step_fn.cache_info().compiles)
    step_fn = fns["decode_prealloc"]
    return Peer(lambda prompt: fns["prefill_prealloc"](params, prompt),
                lambda tok, pos, caches: step_fn(params, tok, np.int32(pos), caches),
                lambda: step_fn.cache_info().compiles)


def build_jax(variant, cfg, params, threads):
    """The model in jax.numpy, layout (b, t, heads, hd) as the example's; ``variant`` "concat"
    (a growing cache), "bucket" (padded to multiples of BUCKET) or "max" (padded to max_len)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_compilation_cache", False)
    H, M = cfg.heads, cfg.max_len
    P = jax.device_put(params)

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b

    def forward(p, x, attends):
        """x (b, T, D) through the blocks, each attending with its ``attend(q, k, v) -> (a,
        cache)``: the last position's logits and the caches."""
        b, T, D = x.shape
        caches = []
        for lp, attend in zip(p["layers"], attends):
            qkv = ln(x, lp["ln1_g"], lp["ln1_b"]) @ lp["w_qkv"] + lp["b_qkv"]
            q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(b, T, H, D // H) for i in range(3))
            a, cache = attend(q, k, v)
            caches.append(cache)
            x = x + a.reshape(b, T, D) @ lp["w_o"] + lp["b_o"]
            h = jax.nn.gelu(ln(x, lp["ln2_g"], lp["ln2_b"]) @ lp["w_fc"] + lp["b_fc"], approximate=True)
            x = x + h @ lp["w_proj"] + lp["b_proj"]
        return ln(x[:, -1], p["lnf_g"], p["lnf_b"]) @ p["wte"].T, caches

    def pad(caches, length):
        return [tuple(jnp.pad(c, ((0, 0), (0, length - c.shape[1]), (0, 0), (0, 0))) for c in kv)
                for kv in caches]

    def prefill(p, tokens, pad_to):
        s = tokens.shape[1]
        x = p["wte"][tokens] + p["wpe"][:s]
        causal = lambda q, k, v: (jax.nn.dot_product_attention(q, k, v, is_causal=True), (k, v))  # noqa: E731
        logits, caches = forward(p, x, [causal] * cfg.layers)
        return logits, (caches if pad_to is None else pad(caches, pad_to))

    def step_concat(p, token, caches):
        t = caches[0][0].shape[1]                      # static: one compile per length
        x = p["wte"][token][:, None, :] + p["wpe"][t]

        def attender(kc, vc):
            def attend(q, k, v):
                k, v = jnp.concatenate([kc, k], axis=1), jnp.concatenate([vc, v], axis=1)
                return jax.nn.dot_product_attention(q, k, v), (k, v)
            return attend
        return forward(p, x, [attender(kc, vc) for kc, vc in caches])

    def step_masked(p, token, pos, caches):
        L = caches[0][0].shape[1]
        D = p["wte"].shape[1]
        x = p["wte"][token][:, None, :] + jax.lax.dynamic_slice(p["wpe"], (pos, 0), (1, D))
        mask = (jnp.arange(L) <= pos)[None, None, None, :]

        def attender(kc, vc):
            def attend(q, k, v):
                k = jax.lax.dynamic_update_slice(kc, k, (0, pos, 0, 0))
                v = jax.lax.dynamic_update_slice(vc, v, (0, pos, 0, 0))
                return jax.nn.dot_product_attention(q, k, v, mask=mask), (k, v)
            return attend
        return forward(p, x, [attender(kc, vc) for kc, vc in caches])

    if variant == "concat":
        jprefill = jax.jit(lambda p, t: prefill(p, t, None))
        jstep = jax.jit(step_concat)
        return Peer(lambda prompt: (lambda lc: (np.asarray(lc[0]), lc[1]))(jprefill(P, prompt)),
                    lambda tok, pos, caches: (lambda lc: (np.asarray(lc[0]), lc[1]))(jstep(P, tok, caches)),
                    jstep._cache_size)

    def length_for(pos):                               # the padded cache length holding pos
        return M if variant == "max" else min(M, BUCKET * (pos // BUCKET + 1))
    jstep = jax.jit(step_masked, donate_argnums=(3,))
    grow = jax.jit(pad, static_argnums=(1,), donate_argnums=(0,))
    jprefills = {}

    def run_prefill(prompt):
        L = length_for(prompt.shape[1])
        if L not in jprefills:
            jprefills[L] = jax.jit(lambda p, t: prefill(p, t, L))
        logits, caches = jprefills[L](P, prompt)
        return np.asarray(logits), caches

    def run_step(tok, pos, caches):
        if caches[0][0].shape[1] <= pos:               # bucket full: pad to the next one
            caches = grow(caches, length_for(pos))
        logits, caches = jstep(P, tok, np.int32(pos), caches)
        return np.asarray(logits), caches
    return Peer(run_prefill, run_step, jstep._cache_size,
                lambda caches: jax.tree.map(lambda a: a.copy(), caches))


def build_torch(compiled, cfg, params, threads):
    """The model in torch, layout (b, heads, t, hd) for ``F.scaled_dot_product_attention``;
    the weights are captured by the functions (as a module's parameters would be)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    H = cfg.heads
    P = {k: ([{n: torch.from_numpy(a.copy()) for n, a in lp.items()} for lp in v]
             if k == "layers" else torch.from_numpy(v.copy())) for k, v in params.items()}

    def forward(x, attends):
        b, T, D = x.shape
        caches = []
        for lp, attend in zip(P["layers"], attends):
            qkv = F.layer_norm(x, (D,), lp["ln1_g"], lp["ln1_b"], 1e-5) @ lp["w_qkv"] + lp["b_qkv"]
            q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(b, T, H, D // H).transpose(1, 2)
                       for i in range(3))
            a, cache = attend(q, k, v)
            caches.append(cache)
            x = x + a.transpose(1, 2).reshape(b, T, D) @ lp["w_o"] + lp["b_o"]
            h = F.layer_norm(x, (D,), lp["ln2_g"], lp["ln2_b"], 1e-5) @ lp["w_fc"] + lp["b_fc"]
            x = x + F.gelu(h, approximate="tanh") @ lp["w_proj"] + lp["b_proj"]
        return F.layer_norm(x[:, -1], (D,), P["lnf_g"], P["lnf_b"], 1e-5) @ P["wte"].T, caches

    def prefill(tokens):
        x = P["wte"][tokens] + P["wpe"][:tokens.shape[1]]
        # contiguous caches, as torch.cat returns them: else torch.compile compiles the
        # first step for the strides of the transposed views and the second one again
        causal = lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True),  # noqa: E731
                                  (k.contiguous(), v.contiguous()))
        return forward(x, [causal] * cfg.layers)

    def step(token, caches):
        t = caches[0][0].shape[2]                      # the new token's position
        x = P["wte"][token][:, None, :] + P["wpe"][t:t + 1]

        def attender(kc, vc):
            def attend(q, k, v):
                k, v = torch.cat([kc, k], dim=2), torch.cat([vc, v], dim=2)
                return F.scaled_dot_product_attention(q, k, v), (k, v)
            return attend
        return forward(x, [attender(kc, vc) for kc, vc in caches])

    compiles = lambda: None  # noqa: E731
    if compiled:
        from torch._dynamo.utils import counters
        prefill, step = torch.compile(prefill, dynamic=True), torch.compile(step, dynamic=True)
        after_prefill = [0]

        def compiles():
            return counters["stats"]["unique_graphs"] - after_prefill[0]

    def run_prefill(prompt):
        logits, caches = prefill(torch.from_numpy(prompt))
        if compiled:
            after_prefill[0] = counters["stats"]["unique_graphs"]
        return logits.numpy(), caches

    def run_step(tok, pos, caches):
        logits, caches = step(torch.from_numpy(tok), caches)
        return logits.numpy(), caches
    return Peer(run_prefill, run_step, compiles)


def build(peer, cfg, params, threads) -> Peer:
    if peer == "numpy":
        return build_numpy(cfg, params, threads)
    if peer.startswith("relaxjax-"):
        return build_relaxjax(peer.split("-")[1], cfg, params, threads)
    if peer.startswith("jax"):
        return build_jax({"jax": "concat", "jax-bucket128": "bucket", "jax-max": "max"}[peer],
                         cfg, params, threads)
    if peer in ("torch", "torch.compile"):
        return build_torch(peer == "torch.compile", cfg, params, threads)
    raise ValueError(f"unknown peer {peer!r}")


# ----------------------------------------------------------------------------- worker
def generate(peer: Peer, prompt, steps: int, keep: set):
    """Greedy decoding, timed: the logits of the prefill (step 0) and of the steps in
    ``keep``, the tokens fed (b, steps), the total time, the prefill's, each step's, and
    the inputs of the last step (for warm reruns)."""
    t0 = time.perf_counter()
    logits, state = peer.prefill(prompt)
    t_prefill = time.perf_counter() - t0
    kept, tokens, times, untimed = {0: logits}, [], [], 0.0
    pos = prompt.shape[1]
    last = None
    for i in range(1, steps + 1):
        tok = np.argmax(logits, axis=-1).astype(np.int32)
        tokens.append(tok)
        if i == steps:                                 # a copy for the reruns, not timed
            c0 = time.perf_counter()
            last = (tok, pos, peer.copy_state(state))
            untimed += time.perf_counter() - c0
        s = time.perf_counter()
        logits, state = peer.step(tok, pos, state)
        times.append(time.perf_counter() - s)
        if i in keep:
            kept[i] = logits
        pos += 1
    total = time.perf_counter() - t0 - untimed
    return kept, np.stack(tokens, 1), total, t_prefill, np.array(times), last


def worker(a) -> dict:
    import llm_decode
    cfg = model_config(a.quick, a.prompt, a.max_steps)
    rng = np.random.default_rng(0)
    params = llm_decode.init_params(cfg, rng)          # the example's weights (the same draw)
    prompt = np.random.default_rng(1000 + a.batch).integers(0, cfg.vocab, (a.batch, a.prompt)).astype(np.int32)
    steps = a.steps
    checks = sorted({0, 1, 2, steps // 2, steps})

    t0 = time.perf_counter()
    peer = build(a.worker, cfg, params, a.threads)
    setup = time.perf_counter() - t0
    kept, toks, total, t_prefill, times, (tok, pos, state) = generate(peer, prompt, steps, set(checks))
    compiles = peer.compiles()

    warm = []                                          # the last step again, compiled
    for _ in range(WARM_REPS):
        st = peer.copy_state(state)
        s = time.perf_counter()
        peer.step(tok, pos, st)
        warm.append(time.perf_counter() - s)
    warm_prefill = []                                  # the prompt again, compiled
    for _ in range(WARM_REPS):
        s = time.perf_counter()
        peer.prefill(prompt)
        warm_prefill.append(time.perf_counter() - s)

    # the reference: the example's float64 model on the peer's own tokens, whole sequences
    rows = sorted({0, a.batch - 1})
    params64 = {k: ([{n: x.astype(np.float64) for n, x in lp.items()} for lp in v]
                    if k == "layers" else v.astype(np.float64)) for k, v in params.items()}
    seq = np.concatenate([prompt, toks], axis=1)[rows]
    ref = llm_decode.forward_np(params64, seq[:, :a.prompt + checks[-1]], cfg.heads)[:, a.prompt - 1 + np.array(checks)]
    got = np.stack([kept[c][rows] for c in checks], 1).astype(np.float64)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    finite = bool(all(np.isfinite(kept[c]).all() for c in checks))

    window = times[-min(STEADY_WINDOW, steps):]
    steady = float(np.median(window))
    return {"peer": a.worker, "batch": a.batch, "steps": steps, "prompt": a.prompt,
            "max_len": cfg.max_len, "setup_s": setup, "total_s": total, "prefill_s": t_prefill,
            "first_token_s": t_prefill + float(times[0]), "compiles": compiles,
            "steady_step_s": steady, "steady_window": len(window),
            "steady_cache_lengths": [a.prompt + steps - len(window), a.prompt + steps - 1],
            "tokens_per_s": a.batch / steady, "warm_step_s": float(np.median(warm)),
            "warm_prefill_s": float(np.median(warm_prefill)),
            "max_rel_err": err, "finite": finite, "checked_steps": checks,
            "tokens": toks.tolist(), "step_s": times.tolist()}


# ----------------------------------------------------------------------------- driver
def run_worker(peer: str, batch: int, steps: int, a) -> dict:
    """One (peer, batch) in a fresh process; a ``-warm`` peer runs twice over one persistent
    cache and reports the second process (its executables loaded, not compiled: what every
    run after the first on a machine sees)."""
    if peer.endswith(WARM):
        cache_dir = tempfile.mkdtemp(prefix="rj-warm-cache-")
        try:
            first = _run_worker_once(peer[:-len(WARM)], batch, steps, a, {"RELAXJAX_CACHE_DIR": cache_dir})
            if "error" in first:
                return dict(first, peer=peer)
            return dict(_run_worker_once(peer[:-len(WARM)], batch, steps, a, {"RELAXJAX_CACHE_DIR": cache_dir}),
                        peer=peer)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return _run_worker_once(peer, batch, steps, a)


def _run_worker_once(peer: str, batch: int, steps: int, a, env: dict | None = None) -> dict:
    args = ["--worker", peer, "--batch", str(batch), "--steps", str(steps), "--max-steps", str(a.steps),
            "--prompt", str(a.prompt), "--threads", str(a.threads)] + (["--quick"] if a.quick else [])
    res, _ = run_cold_worker(
        os.path.abspath(__file__), args, threads=a.threads, timeout=a.worker_timeout,
        python=a.torch_python if peer.startswith("torch") else sys.executable,
        quiet_threshold=NOISY, quiet_max_wait=a.quiet_max_wait,
        label=f"{peer}, batch {batch}, {steps} steps", row={"peer": peer, "batch": batch},
        error_tail=1500, env_in_tmp={"TORCHINDUCTOR_CACHE_DIR": "ti"},
        env={"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
             "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={a.threads}",
             **(env or {})},
        drop_env=("JAX_COMPILATION_CACHE_DIR",))
    print(f"   done in {res['process_s']:.1f} s" + (f": {res['error']}" if "error" in res else
          f": total {res['total_s']:.2f} s, compiles {res['compiles']}, err {res['max_rel_err']:.1e}"),
          file=sys.stderr, flush=True)
    return res


def token_agreement(r, ref) -> str:
    """'same' when r fed the same tokens as ref (over the steps both ran), else the first
    step where they differ."""
    if ref is None or "error" in ref:
        return "-"
    x, y = np.array(r["tokens"]), np.array(ref["tokens"])
    n = min(x.shape[1], y.shape[1])
    diff = np.nonzero((x[:, :n] != y[:, :n]).any(0))[0]
    return "same" if not len(diff) else f"differ from step {diff[0] + 1}"


def report(results, a, wall) -> str:
    cfg = model_config(a.quick, a.prompt, a.steps)
    short = [r for r in results if "error" not in r and r["steps"] != a.steps]
    lines = [f"LLM decode (`examples/llm_decode.py`'s model: {cfg.layers} layers, d_model {cfg.d_model}, "
             f"{cfg.heads} heads, FFN {cfg.ffn}, vocab {cfg.vocab}, float32), greedy: a {a.prompt}-token "
             f"prompt, then {a.steps} decode steps (cache up to {a.prompt + a.steps} positions); "
             f"{a.threads} threads, one cold process per peer and batch (compiles included).",
             "steady: median step over the last "
             f"{min(STEADY_WINDOW, a.steps)} steps; warm step: the last step rerun, compiled; "
             f"max rel err: logits at steps 0 (prefill), 1, 2, mid and last against NumPy float64 "
             f"(tolerance {TOLERANCE:g}); compiles: the decode step's.", ""]
    for r in short:
        lo, hi = r["steady_cache_lengths"]
        lines.append(f"Fewer steps: {r['peer']} at batch {r['batch']} ran {r['steps']} of the {a.steps} steps "
                     f"(too slow for all), so its steady window is at cache lengths {lo}..{hi}; at its median "
                     f"step the {a.steps} steps would take about "
                     f"{r['total_s'] + (a.steps - r['steps']) * r['steady_step_s']:.0f} s in total.")
    lines += ["" if short else None,
              "| peer | batch | steps | total s | compiles | first token ms | steady ms/step | tokens/s "
              "| warm step ms | warm prefill ms | max rel err | tokens vs numpy | bg cores |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines = [x for x in lines if x is not None]
    by_key = {(r["peer"], r["batch"]): r for r in results}
    for batch in a.batch_list:
        for peer in a.peer_list:
            r = by_key.get((peer, batch))
            if r is None:
                continue
            if "error" in r:
                msg = r["error"].strip().splitlines()[-1] if r["error"].strip() else "?"
                lines.append(f"| {peer} | {batch} | failed: {msg} |")
                continue
            flag = "" if r["max_rel_err"] < TOLERANCE and r["finite"] else " **FAIL**"
            lines.append(
                f"| {peer} | {batch} | {r['steps']} | {r['total_s']:.2f} | "
                f"{'-' if r['compiles'] is None else r['compiles']} | {1e3 * r['first_token_s']:.1f} | "
                f"{1e3 * r['steady_step_s']:.2f} | {r['tokens_per_s']:.1f} | {1e3 * r['warm_step_s']:.2f} | "
                f"{1e3 * r['warm_prefill_s']:.2f} | "
                f"{r['max_rel_err']:.1e}{flag} | "
                f"{'-' if peer == 'numpy' else token_agreement(r, by_key.get(('numpy', batch)))} | "
                f"{r['bg_cores']:.2f}{' †' if r['bg_cores'] > NOISY else ''} |")
    lines += ["", f"bg cores: CPU used by other processes while the peer's process ran (†: above {NOISY}, "
              f"its times are suspect). Benchmark wall time: {wall / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=16, help="prompt length")
    ap.add_argument("--steps", type=int, default=None, help="decode steps (default 1008; --quick 64)")
    ap.add_argument("--peer-steps", default=None,
                    help="fewer steps for slow peers (default jax=256; --quick jax=16; '' for none)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the example's small model, 64 steps")
    ap.add_argument("--torch-python", default=sys.executable, help="an interpreter with torch")
    ap.add_argument("--worker-timeout", type=float, default=3600)
    ap.add_argument("--quiet-max-wait", type=float, default=10,
                    help="wait up to this many s for a quiet machine before each process")
    ap.add_argument("--out", default=None, help="markdown report (and JSON beside it)")
    # internal: one (peer, batch) in this process
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--max-steps", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps is None:
        a.steps = 64 if a.quick else 1008
    if a.peer_steps is None:
        a.peer_steps = "jax=16" if a.quick else "jax=256"
    if a.worker:
        sys.path.insert(0, os.path.join(REPO, "examples"))
        res = worker(a)
        with open(a.worker_out, "w") as f:
            json.dump(res, f)
        return

    a.peer_list = a.peers.split(",")
    a.batch_list = [int(b) for b in a.batches.split(",")]
    for p in a.peer_list:
        if p not in PEERS:
            ap.error(f"unknown peer {p!r} (known: {', '.join(PEERS)})")
    peer_steps = {p: min(int(s), a.steps) for p, s in (kv.split("=") for kv in a.peer_steps.split(",") if kv)}
    if any(s < 1 for s in peer_steps.values()):
        ap.error("--peer-steps must be at least 1")
    t0 = time.perf_counter()
    results = []
    for batch in a.batch_list:
        for peer in a.peer_list:
            results.append(run_worker(peer, batch, peer_steps.get(peer, a.steps), a))
    text = report(results, a, time.perf_counter() - t0)
    for r in results:                                  # the JSON keeps step times, not tokens
        r.pop("tokens", None)
    write_report(text, a.out, {"args": {k: v for k, v in vars(a).items() if k != "worker"},
                               "results": results})

if __name__ == "__main__":
    main()
