"""Multi-head attention on a GPU: relaxjax's flash kernel (``nn.dot_product_attention``, one
jitted function with symbolic batch and lengths) against torch's
``scaled_dot_product_attention`` and ``jax.nn.dot_product_attention``, float32, causal and
not, long sequences and decode steps (one query against a cache).  Prints medians, the
achieved TFLOP/s (4 * B * N * T * S * H flops, halved when causal) and relaxjax's largest
relative difference from torch's result.

    python benchmarks/gpu_attention.py [--reps 20]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu import median_time  # noqa: E402

CASES = [  # (B, T, S, N, H, causal)
    (1, 1024, 1024, 8, 64, False), (1, 4096, 4096, 8, 64, False), (1, 4096, 4096, 8, 64, True),
    (8, 1024, 1024, 6, 64, True), (8, 1, 1024, 6, 64, False), (1, 1, 4096, 32, 128, False),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import cupy as cp
    import relaxjax as rj
    import relaxjax.nn as rnn
    sync = cp.cuda.Device().synchronize
    f_rj = {c: rj.jit(lambda q, k, v, c=c: rnn.dot_product_attention(q, k, v, is_causal=c)) for c in (False, True)}
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = None
    try:
        import jax
        jf = {c: jax.jit(lambda q, k, v, c=c: jax.nn.dot_product_attention(q, k, v, is_causal=c)) for c in (False, True)}
    except ImportError:
        jax = None
    rng = np.random.default_rng(0)
    print("| B | T | S | N | H | causal | relaxjax | torch sdpa | jax | relaxjax TFLOP/s | max rel diff vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for B, T, S, N, H, causal in CASES:
        q = rng.standard_normal((B, T, N, H), np.float32)
        k, v = rng.standard_normal((B, S, N, H), np.float32), rng.standard_normal((B, S, N, H), np.float32)
        dq, dk, dv = (cp.asarray(x) for x in (q, k, v))
        t_rj = median_time(lambda: f_rj[causal](dq, dk, dv), sync, args.reps)
        got = cp.asnumpy(f_rj[causal](dq, dk, dv))
        row = [f"{t_rj * 1e3:.3f} ms"]
        diff = "-"
        if torch is not None:
            tq, tk, tv = (torch.as_tensor(x, device="cuda").transpose(1, 2) for x in (q, k, v))
            ts = median_time(lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal),
                             torch.cuda.synchronize, args.reps)
            ref = F.scaled_dot_product_attention(tq.double(), tk.double(), tv.double(), is_causal=causal)
            ref = ref.transpose(1, 2).cpu().numpy()
            diff = f"{np.max(np.abs(got - ref)) / np.max(np.abs(ref)):.1e}"
            row.append(f"{ts * 1e3:.3f} ms")
        else:
            row.append("-")
        if jax is not None:
            jq, jk, jv = (jax.device_put(x) for x in (q, k, v))
            tj = median_time(lambda: jf[causal](jq, jk, jv).block_until_ready(), lambda: None, args.reps)
            row.append(f"{tj * 1e3:.3f} ms")
        else:
            row.append("-")
        flops = 4 * B * N * T * S * H * (0.5 if causal else 1.0)
        print(f"| {B} | {T} | {S} | {N} | {H} | {causal} | " + " | ".join(row)
              + f" | {flops / t_rj / 1e12:.1f} | {diff} |", flush=True)
    print(f"\nrelaxjax compiles: {[f.cache_info().compiles for f in f_rj.values()]}")


if __name__ == "__main__":
    main()
