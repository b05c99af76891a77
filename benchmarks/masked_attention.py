"""Attention with a key-length mask written by hand, as JAX and NumPy users write it, in
relaxjax (which compiles it to the key-lengths attention call), NumPy and torch eager (the
same code; and ``F.scaled_dot_product_attention`` with the boolean mask):

- ``decode``: one decode step's attention over a cache preallocated at 1024 positions, the
  new key and value written at ``pos`` (``dynamic_update_slice``; in place, the caches
  donated) and the scores masked with ``arange(1024) <= pos`` (``-1e9``), q ``(b, 1, 6, 64)``,
  caches ``(b, 1024, 6, 64)``, at pos 100, 500 and 1000, batch 1 and 8;
- ``decode+bias``: the same with a bias added to the scores (ALiBi-like, ``(1024,)``), which
  relaxjax does not take to the attention call: its scores path, formed in full;
- ``padded``: self-attention over a padded batch, ``(8, T, 6, 64)``, keys masked to each
  sequence's length (``arange(T)[None, :] < lengths[:, None]``, ``-inf``), lengths drawn in
  [T/4, T], T 128 and 512.

    python benchmarks/masked_attention.py [--threads 2] [--repeats 50]

float32; median ms per call after 10 warm calls; relaxjax compiles once per workload (not
timed: every shape of a workload is one symbolic signature).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

HEADS, HD, MAX_LEN = 6, 64, 1024


def softmax_np(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def decode_np(q, kc, vc, k, v, pos, bias=None):
    kc[:, pos], vc[:, pos] = k[:, 0], v[:, 0]
    qh, kh, vh = (x.swapaxes(1, 2) for x in (q, kc, vc))
    s = qh @ kh.swapaxes(-1, -2) / 8.0
    s = np.where(np.arange(kc.shape[1]) <= pos, s if bias is None else s + bias, np.float32(-1e9))
    return (softmax_np(s) @ vh).swapaxes(1, 2), kc, vc


def padded_np(q, k, v, lengths):
    qh, kh, vh = (x.swapaxes(1, 2) for x in (q, k, v))
    keep = np.arange(k.shape[1])[None, :] < lengths[:, None]
    s = np.where(keep[:, None, None, :], qh @ kh.swapaxes(-1, -2) / 8.0, np.float32(-np.inf))
    return (softmax_np(s) @ vh).swapaxes(1, 2)


def relaxjax_peers():
    import relaxjax as rj
    import relaxjax.numpy as rnp
    from relaxjax.lax import dynamic_update_slice

    def softmax(s):
        e = rnp.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def decode(q, kc, vc, k, v, pos, bias=None):
        kc = dynamic_update_slice(kc, k, (0, pos, 0, 0))
        vc = dynamic_update_slice(vc, v, (0, pos, 0, 0))
        qh, kh, vh = (rnp.swapaxes(x, 1, 2) for x in (q, kc, vc))
        s = qh @ rnp.swapaxes(kh, -1, -2) / 8.0
        s = rnp.where(rnp.arange(kc.shape[1]) <= pos, s if bias is None else s + bias, -1e9)
        return rnp.swapaxes(softmax(s) @ vh, 1, 2), kc, vc

    def padded(q, k, v, lengths):
        qh, kh, vh = (rnp.swapaxes(x, 1, 2) for x in (q, k, v))
        keep = rnp.arange(k.shape[1])[None, :] < lengths[:, None]
        s = rnp.where(keep[:, None, None, :], qh @ rnp.swapaxes(kh, -1, -2) / 8.0, -rnp.inf)
        return rnp.swapaxes(softmax(s) @ vh, 1, 2)
    return rj.jit(decode, donate_argnums=(1, 2)), rj.jit(padded), rj.jit(decode, donate_argnums=(1, 2))


def torch_peers():
    import torch
    import torch.nn.functional as F

    def decode(q, kc, vc, k, v, pos, bias=None):
        kc[:, pos], vc[:, pos] = k[:, 0], v[:, 0]
        qh, kh, vh = (x.transpose(1, 2) for x in (q, kc, vc))
        s = qh @ kh.transpose(-1, -2) / 8.0
        s = torch.where(torch.arange(kc.shape[1]) <= pos, s if bias is None else s + bias, -1e9)
        return (torch.softmax(s, -1) @ vh).transpose(1, 2), kc, vc

    def decode_sdpa(q, kc, vc, k, v, pos, bias=None):
        kc[:, pos], vc[:, pos] = k[:, 0], v[:, 0]
        qh, kh, vh = (x.transpose(1, 2) for x in (q, kc, vc))
        keep = (torch.arange(kc.shape[1]) <= pos)[None, :]
        mask = keep if bias is None else torch.where(keep, bias, -torch.inf)
        return F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask).transpose(1, 2), kc, vc

    def padded(q, k, v, lengths):
        qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
        keep = torch.arange(k.shape[1])[None, :] < lengths[:, None]
        s = torch.where(keep[:, None, None, :], qh @ kh.transpose(-1, -2) / 8.0, -torch.inf)
        return (torch.softmax(s, -1) @ vh).transpose(1, 2)

    def padded_sdpa(q, k, v, lengths):
        qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
        keep = torch.arange(k.shape[1])[None, :] < lengths[:, None]
        return F.scaled_dot_product_attention(qh, kh, vh, attn_mask=keep[:, None, None, :]).transpose(1, 2)
    return torch, {"torch": (decode, padded), "torch.sdpa": (decode_sdpa, padded_sdpa)}


def median_ms(call, repeats: int) -> float:
    for _ in range(10):
        call()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    from relaxjax.backends.llvm import set_num_threads
    set_num_threads(a.threads)
    rj_decode, rj_padded, rj_decode_bias = relaxjax_peers()
    peers = {"numpy": (decode_np, padded_np), "relaxjax": (rj_decode, rj_padded)}
    try:
        torch, more = torch_peers()
        torch.set_num_threads(a.threads)
        peers.update(more)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    bias = (-0.01 * np.arange(MAX_LEN)[::-1]).astype(np.float32)
    for b, biased in ((1, False), (8, False), (1, True), (8, True)):
        caches = [rng.standard_normal((b, MAX_LEN, HEADS, HD)).astype(np.float32) for _ in range(2)]
        q, k, v = (rng.standard_normal((b, 1, HEADS, HD)).astype(np.float32) for _ in range(3))
        for pos in (100, 500, 1000):
            want = decode_np(q, *(c.copy() for c in caches), k, v, pos, *([bias] if biased else []))[0]
            row = [f"decode{'+bias' if biased else ''} b={b} pos={pos}"]
            for name, (fn, _) in peers.items():
                fn = rj_decode_bias if biased and name == "relaxjax" else fn
                args = [q, *(c.copy() for c in caches), k, v] + ([bias] if biased else [])
                if name.startswith("torch"):
                    args = [torch.from_numpy(x) for x in args]
                args, extra = args[:5], args[5:]
                state = {"caches": args[1:3]}

                def call():
                    out, *state["caches"] = fn(args[0], *state["caches"], *args[3:], pos, *extra)
                    return out
                got = np.asarray(call())
                assert np.abs(got - want).max() < 1e-4, (name, np.abs(got - want).max())
                row.append(median_ms(call, a.repeats))
            rows.append(row)
    for t in (128, 512):
        q, k, v = (rng.standard_normal((8, t, HEADS, HD)).astype(np.float32) for _ in range(3))
        lengths = rng.integers(t // 4, t + 1, 8).astype(np.int32)
        want = padded_np(q, k, v, lengths)
        row = [f"padded T={t}"]
        for name, (_, fn) in peers.items():
            args = [q, k, v, lengths]
            if name.startswith("torch"):
                args = [torch.from_numpy(x) for x in args]
            got = np.asarray(fn(*args))
            assert np.abs(got - want).max() < 1e-4, (name, np.abs(got - want).max())
            row.append(median_ms(lambda: fn(*args), a.repeats))
        rows.append(row)
    names = list(peers)
    print(f"| workload | {' | '.join(n + ' ms' for n in names)} | relaxjax vs best peer |")
    print("|---|" + "---|" * (len(names) + 1))
    for label, *ms in rows:
        r = dict(zip(names, ms))
        best = min(v for n, v in r.items() if n != "relaxjax")
        print(f"| {label} | {' | '.join(f'{r[n]:.3f}' for n in names)} | {best / r['relaxjax']:.1f}x |")


if __name__ == "__main__":
    main()
