"""Ragged batches: one transformer encoder layer over batches of sentences of different
lengths, packed without padding (``relaxjax.ragged``) or padded to the workload's cap, in
relaxjax, NumPy, torch eager and torch's nested jagged tensors.

    python benchmarks/ragged.py                          # MNLI and SQuAD, 20 batches of 64 each
    python benchmarks/ragged.py --quick                  # the example's small layer, 3 batches of 8
    python benchmarks/ragged.py --peers relaxjax-ragged,torch-nested --workloads mnli --out r.md
    python benchmarks/ragged.py --batches mnli=20,squad=10

The layer, its weights (float32, seed 0), the two relaxjax versions and the float64 NumPy
reference are ``examples/ragged_encoder.py``'s (``examples/`` is put on ``sys.path``): 8
heads of 64 (d 512), FFN 2048, post layer norms, tanh GELU; ``--quick`` uses the example's
``--small`` layer (d 64, 2 heads, FFN 256) on batches of 8.  Workloads: batches of 64
sentences, lengths lognormal and clipped to [1, cap]:

- ``mnli``: mean of log 3.667, sd 0.468, cap 128 (the example's ``mnli_lengths``; ~43 tokens);
- ``squad``: mean of log 5.185, sd 0.371, cap 384 (SQuAD v2 question + context; ~190 tokens).

Batch i of a workload is drawn from the seed (workload, i), the same for every peer: lengths,
then each sentence's (n, d) float32 inputs.  Peers:

- ``relaxjax-ragged``: ``rj.jit`` of the example's ``encoder_ragged`` on a ``RaggedArray``
  (projections and FFN over the packed real tokens; ``ragged.dot_product_attention`` is one
  varlen call on the packed q/k/v and the offsets, nothing padded: each sentence's queries
  against its own keys);
- ``relaxjax-padded``: ``rj.jit`` of the example's ``encoder_padded``, every sentence padded
  to the workload's cap, attention masked by ``key_value_seq_lengths``;
- ``numpy-padded``: the layer in NumPy float32 (written here) on the padded batch, attention
  with an additive mask (0 / -inf on padded keys);
- ``torch-padded``: torch eager on the padded batch, ``F.scaled_dot_product_attention`` with
  a boolean key-padding mask;
- ``torch-nested``: torch eager on a jagged nested tensor
  (``torch.nested.nested_tensor(..., layout=torch.jagged)``): linear layers, layer norms and
  GELU on the jagged tensor, SDPA on jagged q/k/v.  On the CPU torch has only its MATH
  backend for jagged SDPA (flash / memory-efficient are CUDA-only), which converts q/k/v to
  strided-layout nested tensors and attends per sequence; it also needs q/k/v contiguous
  before the head transpose, so the chunks of the fused QKV projection are copied
  (``.contiguous()``).  If jagged SDPA raises anyway, the peer falls back to a per-sentence
  SDPA loop and the report says so.

Every (peer, workload) runs in a fresh process with ``--threads`` threads (default 2:
``*_NUM_THREADS``, ``torch.set_num_threads``, relaxjax's ``set_num_threads``; pinned when the
machine has more cores), cold: relaxjax with an empty ``RELAXJAX_CACHE_DIR``.  Turning the
sentences into the peer's input (packing, padding, the nested tensor) is not timed; the layer
call is, up to the result on the host.  Per (peer, workload):

- total s: the first call on each batch, summed over the batches (compiles included);
- compiles: relaxjax ``cache_info().compiles`` after all batches (``-``: eager peers);
- median ms/batch: each batch run 3 more times after its first call, the median of those;
  then the median over the batches;
- FLOPs: *needed* counts the products on the real tokens only (QKV, output projection and
  FFN: 2 n (4 d^2 + 2 d ffn) per sentence of n tokens) plus attention on n^2 per sentence
  (QK^T and AV: 4 n^2 d); *padded* the same with every n = cap.  *done* is an estimate of
  what the peer computes (relaxjax-ragged's varlen attention: needed; relaxjax-padded's
  kernel runs cap query rows but stops at the key length: 4 cap n d; dense SDPA and NumPy:
  4 cap^2 d); useful GFLOP/s = needed / median;
- max err: the peer's output for the first 4 sentences of the first batch (its first, cold
  call) against the example's ``encoder_numpy`` (float64, one sentence at a time), max
  absolute difference; tolerance 1e-3;
- bg cores: CPU that other processes used while the peer's process ran (before each process
  the script waits up to ``--quiet-max-wait`` s for a quiet machine), as ``decode.py``.

``--out`` writes the Markdown report there and the raw figures (every batch's lengths summary
and times) as JSON beside it (``report.write_report``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from report import write_report
from workers import run_cold_worker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = ["relaxjax-ragged", "relaxjax-padded", "numpy-padded", "torch-padded", "torch-nested"]
# workload: (mean of log length, sd of log length, cap, seed)
WORKLOADS = {"mnli": (3.667, 0.468, 128, 1), "squad": (5.185, 0.371, 384, 2)}
FULL = dict(d=512, heads=8, ffn=2048, batch=64, batches=20)
QUICK = dict(d=64, heads=2, ffn=256, batch=8, batches=3)       # the example's --small layer
WARM_REPS = 3
CHECKED = 4                  # sentences of the first batch checked against NumPy float64
TOLERANCE = 1e-3
NOISY = 0.3                  # rows whose process ran while others used more cores get a dagger


def example():
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import ragged_encoder
    return ragged_encoder


# ------------------------------------------------------------------------------ data
def draw_batch(workload: str, i: int, batch: int, d: int):
    """Batch i of a workload: its lengths (int64) and each sentence's (n, d) float32 input."""
    ex = example()
    mu, sd, cap, seed = WORKLOADS[workload]
    rng = np.random.default_rng([seed, i])
    if workload == "mnli":
        lengths = ex.mnli_lengths(rng, batch, cap)
    else:                                              # the same lognormal, SQuAD's figures
        lengths = np.clip(np.round(np.exp(rng.normal(mu, sd, batch))), 1, cap).astype(np.int64)
    return lengths, [rng.standard_normal((n, d)).astype(np.float32) for n in lengths]


def pad(sents, cap: int) -> np.ndarray:
    out = np.zeros((len(sents), cap, sents[0].shape[1]), np.float32)
    for b, s in enumerate(sents):
        out[b, :len(s)] = s
    return out


def flops(lengths, cap: int, d: int, ffn: int) -> dict:
    """FLOPs of one batch: needed (real tokens, attention n^2), padded (every n = cap,
    attention cap^2), and the mix relaxjax-padded computes (see the module docstring)."""
    n = np.asarray(lengths, np.float64)
    per_token = 2 * (4 * d * d + 2 * d * ffn)          # QKV (3 d^2), output (d^2), FFN (2 d ffn)
    att = 4 * d                                        # QK^T and AV, per (query, key) pair
    b = len(n)
    return {"needed": float(per_token * n.sum() + att * (n * n).sum()),
            "padded": float(b * (per_token * cap + att * cap * cap)),
            "padded_kv": float(b * per_token * cap + att * cap * n.sum())}     # relaxjax-padded


DONE = {"relaxjax-ragged": "needed", "relaxjax-padded": "padded_kv", "numpy-padded": "padded",
        "torch-padded": "padded", "torch-nested": "needed"}


# ------------------------------------------------------------------------------ peers
# Each builder returns (prepare, run, outputs, compiles, notes): prepare(lengths, sents) makes
# the peer's input (untimed), run(input) is the timed call, outputs(result, k) the first k
# sentences as NumPy arrays, compiles() the relaxjax compile count (None for eager peers).
def build_relaxjax(style, p, heads, cap, threads):
    import relaxjax as rj
    from relaxjax import ragged
    from relaxjax.backends.llvm import set_num_threads
    set_num_threads(threads)
    ex = example()
    notes = []
    if style == "ragged":
        fn = rj.jit(lambda p, x: ex.encoder_ragged(p, x, heads))
        return (lambda lengths, sents: ragged.from_list(sents), lambda x: fn(p, x),
                lambda out, k: out.to_list()[:k], lambda: fn.cache_info().compiles, notes)
    fn = rj.jit(lambda p, x, n: ex.encoder_padded(p, x, n, heads))
    return (lambda lengths, sents: (pad(sents, cap), lengths.astype(np.int32)),
            lambda xn: fn(p, *xn), lambda out, k: list(out[:k]),
            lambda: fn.cache_info().compiles, notes)


def ln_np(x, g, b):
    m = x.mean(-1, keepdims=True)
    c = x - m
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b


def gelu_np(x):
    c = np.float32(math.sqrt(2 / math.pi))
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(c * (x + np.float32(0.044715) * (x * x * x))))


def encoder_numpy_padded(p, x, lengths, heads: int) -> np.ndarray:
    """The layer in NumPy float32 on (batch, cap, d) padded sentences: the projections as one
    matrix product over all (padded) tokens, attention per (sentence, head) with an additive
    mask on the padded keys."""
    b, t, d = x.shape
    hd = d // heads
    flat = x.reshape(b * t, d)
    qkv = flat @ p["wqkv"] + p["bqkv"]
    q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(b, t, heads, hd).transpose(0, 2, 1, 3) for i in range(3))
    mask = np.where(np.arange(t)[None, :] < lengths[:, None], 0, -np.inf).astype(np.float32)
    s = q @ k.transpose(0, 1, 3, 2) * np.float32(1 / math.sqrt(hd)) + mask[:, None, None, :]
    s -= s.max(-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(-1, keepdims=True)
    a = (s @ v).transpose(0, 2, 1, 3).reshape(b * t, d)
    h = ln_np(flat + (a @ p["wo"] + p["bo"]), p["g1"], p["n1"])
    f = gelu_np(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return ln_np(h + f, p["g2"], p["n2"]).reshape(b, t, d)


def build_numpy(p, heads, cap, threads):
    return (lambda lengths, sents: (pad(sents, cap), lengths),
            lambda xn: encoder_numpy_padded(p, *xn, heads), lambda out, k: list(out[:k]),
            lambda: None, [])


def torch_layer(p, heads, threads):
    """The layer in torch eager, ``layer(x, attend)`` on a (padded or jagged) (b, t, d)
    tensor, ``attend(q, k, v)`` on (b, t, d) projections returning (b, t, d)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    # nn.Linear's layout: weights (out, in), contiguous
    W = {k: torch.from_numpy(np.ascontiguousarray(v.T) if v.ndim == 2 else v.copy()) for k, v in p.items()}
    d = p["wo"].shape[0]

    def layer(x, attend):
        q, k, v = F.linear(x, W["wqkv"], W["bqkv"]).chunk(3, dim=-1)
        a = attend(q, k, v)
        h = F.layer_norm(x + F.linear(a, W["wo"], W["bo"]), (d,), W["g1"], W["n1"], 1e-5)
        f = F.linear(F.gelu(F.linear(h, W["w1"], W["b1"]), approximate="tanh"), W["w2"], W["b2"])
        return F.layer_norm(h + f, (d,), W["g2"], W["n2"], 1e-5)
    return layer


def build_torch_padded(p, heads, cap, threads):
    import torch
    import torch.nn.functional as F
    layer = torch_layer(p, heads, threads)

    def prepare(lengths, sents):
        x = torch.from_numpy(pad(sents, cap))
        keep = torch.arange(cap)[None, :] < torch.from_numpy(lengths)[:, None]   # True: attend
        return x, keep[:, None, None, :]

    def run(inp):
        x, keep = inp
        b, t, d = x.shape

        def attend(q, k, v):
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, t, d)
        return layer(x, attend)
    return prepare, run, lambda out, k: [o.numpy() for o in out[:k]], lambda: None, []


def build_torch_nested(p, heads, cap, threads):
    import torch
    import torch.nn.functional as F
    layer = torch_layer(p, heads, threads)
    d = p["wo"].shape[0]
    notes, state = [], {"loop": False}

    def split_heads(z):                                # jagged (b, j, d) -> (b, heads, j, hd)
        return z.unflatten(-1, (heads, d // heads)).transpose(1, 2)

    def attend_jagged(q, k, v):
        # jagged SDPA on the CPU needs q/k/v contiguous before the head transpose: the
        # chunks of the fused projection are strided views, so they are copied
        q, k, v = (split_heads(z.contiguous()) for z in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)

    def attend_loop(q, k, v):                          # the fallback: SDPA sentence by sentence
        outs = [F.scaled_dot_product_attention(*(z.reshape(1, -1, heads, d // heads).transpose(1, 2)
                                                 for z in qkv)).transpose(1, 2).reshape(-1, d)
                for qkv in zip(q.unbind(), k.unbind(), v.unbind())]
        return torch.nested.nested_tensor_from_jagged(torch.cat(outs), q.offsets())

    def prepare(lengths, sents):
        return torch.nested.nested_tensor([torch.from_numpy(s) for s in sents], layout=torch.jagged)

    def run(x):
        if not state["loop"]:
            try:
                return layer(x, attend_jagged)
            except (RuntimeError, NotImplementedError) as e:
                state["loop"] = True
                notes.append(f"jagged SDPA failed ({type(e).__name__}: {str(e).splitlines()[0]}); "
                             f"fell back to a per-sentence SDPA loop")
        return layer(x, attend_loop)

    x = prepare(np.array([2, 3]), [np.ones((2, d), np.float32), np.ones((3, d), np.float32)])
    try:                                               # SDPA on the strided chunks, as written first
        q, k, v = F.linear(x, torch.ones(3 * d, d)).chunk(3, dim=-1)
        F.scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v))
    except RuntimeError as e:
        notes.append(f"jagged SDPA on the chunks of the fused QKV projection (strided views) fails "
                     f"({str(e).splitlines()[0]}): q/k/v are copied with .contiguous() first")
    try:                                               # which SDPA backend torch picks (private API)
        from torch.nested._internal.sdpa import _select_sdp_backend
        q = split_heads(x.contiguous())
        backend = _select_sdp_backend(q, q, q, None, 0.0, False, False)
        notes.append(f"jagged SDPA backend on the CPU: {backend.name}")
    except Exception as e:                             # noqa: BLE001 - informative only
        notes.append(f"jagged SDPA backend unknown ({type(e).__name__})")
    return prepare, run, lambda out, k: [o.numpy() for o in out.unbind()[:k]], lambda: None, notes


def build(peer, p, heads, cap, threads):
    if peer.startswith("relaxjax-"):
        return build_relaxjax(peer.split("-")[1], p, heads, cap, threads)
    return {"numpy-padded": build_numpy, "torch-padded": build_torch_padded,
            "torch-nested": build_torch_nested}[peer](p, heads, cap, threads)


# ----------------------------------------------------------------------------- worker
def worker(a) -> dict:
    ex = example()
    cfg = QUICK if a.quick else FULL
    d, heads, ffn, batch = cfg["d"], cfg["heads"], cfg["ffn"], cfg["batch"]
    cap = WORKLOADS[a.workload][2]
    p = ex.init(np.random.default_rng(0), d, ffn)
    prepare, run, outputs, compiles, notes = build(a.worker, p, heads, cap, a.threads)

    cold, warm, fl, lengths_seen, err = [], [], [], [], None
    for i in range(a.nbatches):
        lengths, sents = draw_batch(a.workload, i, batch, d)
        x = prepare(lengths, sents)
        t0 = time.perf_counter()
        out = run(x)
        cold.append(time.perf_counter() - t0)
        if i == 0:                                     # the cold call's result, against float64
            got = [np.asarray(g, np.float64)[:len(s)] for g, s in zip(outputs(out, CHECKED), sents)]
            want = [ex.encoder_numpy(p, s.astype(np.float64), heads) for s in sents[:CHECKED]]
            err = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
            finite = all(bool(np.isfinite(g).all()) for g in got)
        times = []
        for _ in range(WARM_REPS):
            t0 = time.perf_counter()
            run(x)
            times.append(time.perf_counter() - t0)
        warm.append(statistics.median(times))
        fl.append(flops(lengths, cap, d, ffn))
        lengths_seen.append([int(lengths.min()), float(lengths.mean()), int(lengths.max())])
        del out, x
    return {"peer": a.worker, "workload": a.workload, "batches": a.nbatches, "batch": batch,
            "cap": cap, "d": d, "heads": heads, "ffn": ffn, "total_s": sum(cold),
            "compiles": compiles(), "median_batch_s": statistics.median(warm),
            "max_err": err, "finite": finite, "notes": notes, "cold_s": cold, "warm_s": warm,
            "flops": {k: float(np.mean([f[k] for f in fl])) for k in fl[0]},
            "lengths": lengths_seen}


# ----------------------------------------------------------------------------- driver
def run_worker(peer: str, workload: str, nbatches: int, a) -> dict:
    args = ["--worker", peer, "--workload", workload, "--nbatches", str(nbatches),
            "--threads", str(a.threads)] + (["--quick"] if a.quick else [])
    res, out = run_cold_worker(
        os.path.abspath(__file__), args, threads=a.threads, timeout=a.worker_timeout,
        python=a.torch_python if peer.startswith("torch") else sys.executable,
        quiet_threshold=NOISY, quiet_max_wait=a.quiet_max_wait,
        label=f"{peer}, {workload}, {nbatches} batches", row={"peer": peer, "workload": workload},
        error_tail=2000)
    if out is not None and out.stderr and "error" not in res:
        res["stderr_tail"] = out.stderr[-1500:]
    print(f"   done in {res['process_s']:.1f} s" + (f": {res['error'].strip().splitlines()[-1]}" if "error" in res else
          f": total {res['total_s']:.2f} s, median {1e3 * res['median_batch_s']:.1f} ms, "
          f"compiles {res['compiles']}, err {res['max_err']:.1e}"), file=sys.stderr, flush=True)
    return res


def report(results, a, wall) -> str:
    cfg = QUICK if a.quick else FULL
    lines = [f"Ragged batches: one encoder layer (`examples/ragged_encoder.py`: d {cfg['d']}, {cfg['heads']} "
             f"heads, FFN {cfg['ffn']}, post-norm, tanh GELU, float32) on batches of {cfg['batch']} sentences; "
             f"{a.threads} threads, one cold process per peer and workload (compiles included).",
             f"total: the first call on every batch; median: each batch rerun {WARM_REPS} times, median, then "
             f"the median over batches; GFLOP per batch (mean over batches): needed = real tokens with "
             f"attention on n^2, done = what the peer computes (estimate); useful GFLOP/s = needed / median; "
             f"max err: first {CHECKED} sentences of the first batch against NumPy float64 "
             f"(tolerance {TOLERANCE:g})."]
    for wl in a.workload_list:
        mu, sd, cap, _ = WORKLOADS[wl]
        n = a.nbatches[wl]
        rows = [r for r in results if r["workload"] == wl]
        ok = [r for r in rows if "error" not in r]
        lines += ["", f"### {wl}: lengths lognormal (mean of log {mu}, sd {sd}), clipped to [1, {cap}]; "
                  f"{n} batches" + (f" (fewer than the default {cfg['batches']}: `--batches`)"
                                    if n < cfg["batches"] else "")]
        if ok:
            r0 = ok[0]
            mean_len = np.mean([m for _, m, _ in r0["lengths"]])
            f = r0["flops"]
            lines.append(f"mean length {mean_len:.1f} tokens ({100 * mean_len / cap:.0f} % of the padded "
                         f"tokens real), longest {max(x for _, _, x in r0['lengths'])}; per batch: needed "
                         f"{f['needed'] / 1e9:.3g} GFLOP, padded to {cap} {f['padded'] / 1e9:.3g} GFLOP "
                         f"({100 * f['needed'] / f['padded']:.0f} % of it needed).")
        lines += ["", "| peer | total s | compiles | median ms/batch | vs torch-padded | GFLOP done/batch "
                  "| useful GFLOP/s | max err | bg cores |", "|---|---|---|---|---|---|---|---|---|"]
        base = next((r for r in ok if r["peer"] == "torch-padded"), None)
        for peer in a.peer_list:
            r = next((r for r in rows if r["peer"] == peer), None)
            if r is None:
                continue
            if "error" in r:
                msg = r["error"].strip().splitlines()[-1] if r["error"].strip() else "?"
                lines.append(f"| {peer} | failed: {msg[:300]} |")
                continue
            flag = "" if r["max_err"] < TOLERANCE and r["finite"] else " **FAIL**"
            med, base_s = r["median_batch_s"], base["median_batch_s"] if base else None
            lines.append(
                f"| {peer} | {r['total_s']:.2f} | {'-' if r['compiles'] is None else r['compiles']} | "
                f"{1e3 * med:.1f} | {f'{base_s / med:.2f}x' if base else '-'} | "
                f"{r['flops'][DONE[peer]] / 1e9:.3g} | {r['flops']['needed'] / med / 1e9:.3g} | "
                f"{r['max_err']:.1e}{flag} | {r['bg_cores']:.2f}{' †' if r['bg_cores'] > NOISY else ''} |")
    notes = sorted({f"{r['peer']} ({r['workload']}): {n}" for r in results for n in r.get("notes", [])})
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines += ["", f"vs torch-padded: torch-padded's median / the peer's (> 1: faster). bg cores: CPU used by "
              f"other processes while the peer's process ran (†: above {NOISY}, its times are suspect). "
              f"Benchmark wall time: {wall / 60:.1f} min."]
    return "\n".join(lines)


def parse_batches(text: str, workloads, default: int) -> dict:
    """``--batches``: one count for every workload ("20") or per workload ("mnli=20,squad=10")."""
    if "=" not in text:
        return {w: int(text) for w in workloads}
    given = {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}
    return {w: given.get(w, default) for w in workloads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--workloads", default="mnli,squad")
    ap.add_argument("--batches", default=None,
                    help="batches per workload: N or mnli=N,squad=M (default 20; --quick 3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the example's small layer, 3 batches of 8")
    ap.add_argument("--torch-python", default=sys.executable, help="an interpreter with torch")
    ap.add_argument("--worker-timeout", type=float, default=3600)
    ap.add_argument("--quiet-max-wait", type=float, default=10,
                    help="wait up to this many s for a quiet machine before each process")
    ap.add_argument("--out", default=None, help="markdown report (and JSON beside it)")
    # internal: one (peer, workload) in this process
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workload", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--nbatches", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = worker(a)
        with open(a.worker_out, "w") as f:
            json.dump(res, f)
        return

    a.peer_list, a.workload_list = a.peers.split(","), a.workloads.split(",")
    for p in a.peer_list:
        if p not in PEERS:
            ap.error(f"unknown peer {p!r} (known: {', '.join(PEERS)})")
    for w in a.workload_list:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
    default = (QUICK if a.quick else FULL)["batches"]
    a.nbatches = parse_batches(a.batches or str(default), a.workload_list, default)
    if any(n < 1 for n in a.nbatches.values()):
        ap.error("--batches must be at least 1")
    t0 = time.perf_counter()
    results = [run_worker(peer, wl, a.nbatches[wl], a) for wl in a.workload_list for peer in a.peer_list]
    text = report(results, a, time.perf_counter() - t0)
    write_report(text, a.out, {"args": {k: v for k, v in vars(a).items()
                                        if k not in ("worker", "workload", "worker_out")},
                               "results": results})


if __name__ == "__main__":
    main()
