"""relaxjax's CUDA backend against GPU peers, in one run: CuPy (eager), torch (eager and
torch.compile) and jax.jit, on the five reference workloads (benchmarks/relaxjax_plugin.py),
at sizes that fill a GPU.  Prints medians, ratios (peer time / relaxjax time) and the share
of the measured device-to-device copy bandwidth (memory-bound workloads) or of cuBLAS alone
(the matmul workloads: the same gemms through cupy.matmul).

    python benchmarks/gpu.py [--reps 50] [--out gpu.json]
    python benchmarks/gpu.py --emulated      # smoke test of this script without a GPU:
                                             # relaxjax on the CPU emulator, tiny sizes, no peers

Peers that are not installed are skipped with a note.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relaxjax_plugin import workloads  # noqa: E402

SIZES = {"W1": [16384, 131072], "W2": [16384, 131072], "W3": [16384, 131072], "W4": [1024, 16384],
         "W5": [1024, 4096]}
TINY = {"W1": [37], "W2": [37], "W3": [37], "W4": [5], "W5": [33]}
GELU_C = math.sqrt(2.0 / math.pi)


def inputs(name: str, n: int, rng) -> list:
    f = np.float32
    if name in ("W1", "W2"):
        return [rng.standard_normal((n, 1024), f)]
    if name == "W3":
        return [rng.standard_normal((n, 768), f), rng.standard_normal(768, f), rng.standard_normal(768, f)]
    if name == "W4":
        return [rng.standard_normal((n, 512), f), rng.standard_normal((512, 2048), f) * 0.05,
                rng.standard_normal(2048, f), rng.standard_normal((2048, 512), f) * 0.05,
                rng.standard_normal(512, f)]
    return [rng.standard_normal((n, 64), f) for _ in range(3)]


def bytes_moved(name: str, xs: list) -> int:
    """Compulsory traffic: inputs read once, the output written once."""
    x = xs[0]
    out = x.size if name != "W4" else x.shape[0] * 512
    return 4 * (sum(a.size for a in xs) + out)


def flops(name: str, xs: list) -> int:
    n = xs[0].shape[0]
    return 2 * n * 512 * 2048 * 2 if name == "W4" else 2 * 2 * n * n * 64


def peer_fns(xp):
    """The workloads written against an array namespace (cupy, torch or jax.numpy)."""
    torch_like = xp.__name__ == "torch"
    kw = {"keepdim": True} if torch_like else {"keepdims": True}

    def amax(x):
        return x.amax(-1, **kw) if torch_like else x.max(axis=-1, **kw)

    def mean(x):
        return x.mean(-1, **kw)

    def softmax(x):
        e = xp.exp(x - amax(x))
        return e / e.sum(-1, **kw)

    def w3(x, g, b):
        xc = x - mean(x)
        return xc * (1.0 / xp.sqrt(mean(xc * xc) + 1e-5)) * g + b

    def w4(x, w1, b1, w2, b2):
        h = x @ w1 + b1
        return (0.5 * h * (1.0 + xp.tanh(GELU_C * (h + 0.044715 * h * h * h)))) @ w2 + b2

    def w5(q, k, v):
        return softmax((q @ k.T) * (1.0 / math.sqrt(q.shape[-1]))) @ v
    return {"W1": lambda x: xp.tanh(xp.exp(x) * 2.0 + 1.0) - x, "W2": softmax, "W3": w3, "W4": w4, "W5": w5}


def median_time(fn, sync, reps: int) -> float:
    for _ in range(3):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out")
    ap.add_argument("--emulated", action="store_true")
    ap.add_argument("--peers", default="cupy,torch,torch.compile,jax",
                    help="comma-separated peers to run (torch.compile's first compiles take minutes)")
    ap.add_argument("--only", help="comma-separated workloads (default: all)")
    args = ap.parse_args(argv)
    import relaxjax as rj
    rng = np.random.default_rng(0)
    rows, notes, peers = [], [], {}
    if args.emulated:
        to_dev, sync, sizes, copy_bw = (lambda a: a), (lambda: None), TINY, None
        jitted = {k: rj.jit(f.fun, shapes=f.shapes, backend="cuda-emulated") for k, f in workloads().items()}
        notes.append("emulated: relaxjax's generated CUDA C on the CPU emulator; no peers, no limits")
    else:
        import cupy as cp
        to_dev, sync, sizes = cp.asarray, cp.cuda.Device().synchronize, SIZES
        jitted = workloads()              # CuPy arguments select the CUDA backend
        big, dst = cp.ones(1 << 28, cp.float32), cp.empty(1 << 28, cp.float32)
        copy_bw = 2 * big.nbytes / median_time(lambda: cp.copyto(dst, big), sync, 20)
        wanted = set(args.peers.split(","))
        if "cupy" in wanted:
            peers["cupy"] = (peer_fns(cp), to_dev, sync)
        if wanted & {"torch", "torch.compile"}:
            try:
                import torch
                tdev = lambda a: torch.as_tensor(a, device="cuda")          # noqa: E731
                if "torch" in wanted:
                    peers["torch"] = (peer_fns(torch), tdev, torch.cuda.synchronize)
                if "torch.compile" in wanted:
                    peers["torch.compile"] = ({k: torch.compile(f, dynamic=True) for k, f in peer_fns(torch).items()},
                                              tdev, torch.cuda.synchronize)
            except ImportError:
                notes.append("torch not installed: skipped")
        if "jax" in wanted:
            try:
                import jax
                import jax.numpy as jnp
                jdev = lambda a: jax.device_put(a, jax.devices("gpu")[0])     # noqa: E731
                # jax dispatches asynchronously: each timed call waits for its own result
                peers["jax"] = ({k: (lambda *a, f=jax.jit(f): f(*a).block_until_ready())
                                 for k, f in peer_fns(jnp).items()}, jdev, lambda: None)
            except (ImportError, RuntimeError) as e:
                notes.append(f"jax on GPU unavailable ({e}): skipped")
    only = set(args.only.split(",")) if args.only else set(sizes)
    for name, ns in sizes.items():
        if name not in only:
            continue
        for n in ns:
            xs = inputs(name, n, rng)
            dx = [to_dev(a) for a in xs]
            f = jitted[name]
            t_rj = median_time(lambda: f(*dx), sync, args.reps)
            row = {"workload": name, "n": n, "relaxjax": t_rj}
            if not args.emulated:
                if name in ("W4", "W5"):       # the gemms alone, through cuBLAS
                    import cupy as cp
                    if name == "W4":
                        h = cp.empty((n, 2048), cp.float32)
                        gem = lambda: (cp.matmul(dx[0], dx[1], out=h), cp.matmul(h, dx[3]))  # noqa: E731
                    else:
                        gem = lambda: cp.matmul(cp.matmul(dx[0], dx[1].T), dx[2])          # noqa: E731
                    t_blas = median_time(gem, sync, args.reps)
                    row["cublas_only"] = t_blas
                    row["share"] = f"{t_blas / t_rj:.0%} of cuBLAS alone"
                else:
                    row["share"] = f"{bytes_moved(name, xs) / t_rj / copy_bw:.0%} of copy bandwidth"
                for pname, (fns, dev, psync) in peers.items():
                    px = [dev(a) for a in xs]
                    try:
                        row[pname] = median_time(lambda: fns[name](*px), psync, args.reps)
                    except Exception as e:       # noqa: BLE001  (a peer failing is reported, not fatal)
                        notes.append(f"{pname} {name} n={n}: {type(e).__name__}: {e}")
            rows.append(row)
            print({k: (f"{v * 1e3:.3f} ms" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    cols = ["relaxjax"] + list(peers)
    print("| workload | n | " + " | ".join(cols) + " | best peer / relaxjax | share |")
    print("|---|---|" + "---|" * (len(cols) + 2))
    for r in rows:
        ts = [f"{r[c] * 1e3:.3f} ms" if c in r else "-" for c in cols]
        best = min((r[c] for c in peers if c in r), default=None)
        ratio = f"{best / r['relaxjax']:.2f}x" if best else "-"
        print(f"| {r['workload']} | {r['n']} | " + " | ".join(ts) + f" | {ratio} | {r.get('share', '-')} |")
    if copy_bw:
        print(f"\ndevice-to-device copy: {copy_bw / 1e9:.0f} GB/s (bytes read + written)")
    for note in notes:
        print(f"- {note}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rows": rows, "copy_bandwidth": copy_bw, "notes": notes}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
