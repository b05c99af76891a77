"""A training step -- loss, gradient and an SGD update -- of the shared MLP block (W4:
``gelu_tanh(x @ W1 + b1) @ W2 + b2``, a mean squared error against a target), compiled by
relaxjax (``rj.jit`` of ``rj.value_and_grad`` and the update), ``jax.jit(jax.value_and_grad)``,
torch eager (autograd) and ``torch.compile`` (the loss compiled, autograd's backward).

    python benchmarks/train_step.py                       # 50 batch sizes, then steady state
    python benchmarks/train_step.py --quick               # 8 sizes, small steady batches
    python benchmarks/train_step.py --peers relaxjax,jax --torch-python .venv-bench/bin/python

Each peer runs in a fresh process (relaxjax with an empty persistent cache, torch with an
empty inductor cache) with ``--threads`` threads (default 2).  Two phases per process:

- cold: one step at each of ``--count`` batch sizes drawn with a fixed seed from
  [1, ``--max-size``] (default 50 from [1, 512], random order), compiles included: total
  time and the number of compiles (relaxjax: ``cache_info().compiles``; jax:
  ``_cache_size()``; torch: dynamo's unique graphs);
- steady: the median step time at batch 64, 1024 and 16384 (warm, ``--reps`` repetitions).

Every step's loss is checked against a float64 NumPy computation of the same step, and the
updated parameters of one step against NumPy's gradient (finite differences are not
needed: the gradient of this block is written out in ``numpy_step``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = ["relaxjax", "jax", "torch", "torch.compile"]
D_IN, D_HID = 512, 2048
LR = 1e-2

CHILD = r"""
import json, math, os, statistics, sys, time
import numpy as np
PEER, SIZES, STEADY, REPS, THREADS, LR = {peer!r}, {sizes!r}, {steady!r}, {reps}, {threads}, {lr}
D_IN, D_HID = {d_in}, {d_hid}
C = math.sqrt(2.0 / math.pi)
rng = np.random.default_rng(0)
P0 = [(rng.standard_normal((D_IN, D_HID)) / math.sqrt(D_IN)).astype(np.float32),
      np.zeros(D_HID, np.float32),
      (rng.standard_normal((D_HID, D_IN)) / math.sqrt(D_HID)).astype(np.float32),
      np.zeros(D_IN, np.float32)]


def numpy_step(p, x, t):
    W1, b1, W2, b2 = [a.astype(np.float64) for a in p]
    x, t = x.astype(np.float64), t.astype(np.float64)
    a = x @ W1 + b1
    u = C * (a + 0.044715 * a ** 3)
    th = np.tanh(u)
    h = 0.5 * a * (1 + th)
    y = h @ W2 + b2
    loss = np.mean((y - t) ** 2)
    gy = 2 * (y - t) / y.size
    gW2, gb2 = h.T @ gy, gy.sum(0)
    gh = gy @ W2.T
    ga = gh * (0.5 * (1 + th) + 0.5 * a * (1 - th ** 2) * C * (1 + 3 * 0.044715 * a ** 2))
    gW1, gb1 = x.T @ ga, ga.sum(0)
    return loss, [W - LR * g for W, g in zip((W1, b1, W2, b2), (gW1, gb1, gW2, gb2))]


def loss_fn(xp, p, x, t):          # the block's loss, for every peer's array module xp
    W1, b1, W2, b2 = p
    a = x @ W1 + b1
    h = 0.5 * a * (1.0 + xp.tanh(C * (a + 0.044715 * a * a * a)))
    return xp.mean((h @ W2 + b2 - t) ** 2)


def data(n, seed):
    r = np.random.default_rng(seed)
    return r.standard_normal((n, D_IN)).astype(np.float32), r.standard_normal((n, D_IN)).astype(np.float32)


if PEER == "relaxjax":
    import relaxjax as rj, relaxjax.numpy as rnp
    from relaxjax.backends.llvm import set_num_threads
    set_num_threads(THREADS)

    @rj.jit
    def step(p, x, t):
        l, g = rj.value_and_grad(lambda p, x, t: loss_fn(rnp, p, x, t))(p, x, t)
        return tuple(w - LR * gw for w, gw in zip(p, g)), l
    state = tuple(P0)
    run = lambda p, x, t: step(p, x, t)
    sync = lambda out: out
    compiles = lambda: step.cache_info().compiles
elif PEER == "jax":
    import jax, jax.numpy as jnp

    @jax.jit
    def step(p, x, t):
        l, g = jax.value_and_grad(lambda p, x, t: loss_fn(jnp, p, x, t))(p, x, t)
        return tuple(w - LR * gw for w, gw in zip(p, g)), l
    state = tuple(jnp.asarray(a) for a in P0)
    run = lambda p, x, t: step(p, jnp.asarray(x), jnp.asarray(t))
    sync = lambda out: jax.block_until_ready(out)
    compiles = lambda: step._cache_size()
else:
    import torch
    torch.set_num_threads(THREADS)

    def torch_loss(W1, b1, W2, b2, x, t):
        return loss_fn(torch, (W1, b1, W2, b2), x, t)
    f = torch.compile(torch_loss) if PEER == "torch.compile" else torch_loss

    def run(p, x, t):
        ps = [w.detach().requires_grad_(True) for w in p]
        l = f(*ps, torch.from_numpy(x), torch.from_numpy(t))
        l.backward()
        with torch.no_grad():
            return tuple(w - LR * w.grad for w in ps), l.detach()
    state = tuple(torch.from_numpy(a.copy()) for a in P0)
    sync = lambda out: out
    if PEER == "torch.compile":
        from torch._dynamo.utils import counters
        compiles = lambda: counters["stats"]["unique_graphs"]
    else:
        compiles = lambda: 0

worst = 0.0
t0 = time.perf_counter()
for k, n in enumerate(SIZES):
    x, t = data(n, k)
    new, l = sync(run(state, x, t))
    want, _ = numpy_step(P0, x, t)
    worst = max(worst, abs(float(l) - want) / max(abs(want), 1e-30))
cold = time.perf_counter() - t0
cold_compiles = int(compiles())
x, t = data(7, 99)
new, _ = sync(run(state, x, t))
_, want = numpy_step(P0, x, t)
param_err = max(float(np.max(np.abs(np.asarray(a, np.float64) - w)) / (np.max(np.abs(w)) + 1e-30))
                for a, w in zip(new, want))
steady = {{}}
for n in STEADY:
    x, t = data(n, n)
    sync(run(state, x, t))
    ts = []
    for _ in range(REPS):
        s = time.perf_counter()
        sync(run(state, x, t))
        ts.append(time.perf_counter() - s)
    steady[n] = statistics.median(ts)
print("RESULT " + json.dumps({{"cold_s": cold, "compiles": cold_compiles, "loss_err": worst,
                              "param_err": param_err, "steady_s": steady}}))
"""


def run_peer(peer: str, sizes, steady, reps: int, threads: int, python: str) -> dict:
    tmp = tempfile.mkdtemp(prefix="rj-train-")
    env = dict(os.environ, RELAXJAX_CACHE_DIR=os.path.join(tmp, "rj"), TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "ti"),
               JAX_PLATFORMS="cpu", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    env["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    code = CHILD.format(peer=peer, sizes=list(sizes), steady=list(steady), reps=reps, threads=threads,
                        lr=LR, d_in=D_IN, d_hid=D_HID)
    try:
        out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=3600)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (out.stderr or out.stdout)[-800:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--max-size", type=int, default=512)
    ap.add_argument("--steady", default="64,1024,16384")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-python", default=sys.executable, help="an interpreter with torch")
    ap.add_argument("--quick", action="store_true", help="8 sizes, steady batches 64 and 256")
    ap.add_argument("--out", default=None, help="markdown report (and JSON beside it)")
    a = ap.parse_args()
    import numpy as np
    count, steady = (8, [64, 256]) if a.quick else (a.count, [int(s) for s in a.steady.split(",")])
    sizes = np.random.default_rng(1234).choice(np.arange(1, a.max_size + 1), count, replace=False).tolist()
    results = {}
    for peer in a.peers.split(","):
        python = a.torch_python if peer.startswith("torch") else sys.executable
        results[peer] = r = run_peer(peer, sizes, steady, a.reps, a.threads, python)
        print(f"{peer}: {json.dumps(r)}", file=sys.stderr)
    lines = [f"Training step of the W4 block (loss + grad + SGD), {a.threads} threads, one process per "
             f"peer; cold: {count} batch sizes from [1, {a.max_size}] (compiles included); steady: "
             f"median of {a.reps} warm steps.", "",
             "| peer | cold total s | compiles | " + " | ".join(f"step ms @ {n}" for n in steady) +
             " | loss rel err | param rel err |",
             "|---|---|---|" + "---|" * len(steady) + "---|---|"]
    for peer, r in results.items():
        if "error" in r:
            lines.append(f"| {peer} | failed: {r['error'].splitlines()[-1] if r['error'] else '?'} |")
            continue
        st = [f"{1e3 * r['steady_s'][str(n)]:.2f}" for n in steady]
        lines.append(f"| {peer} | {r['cold_s']:.2f} | {r['compiles']} | " + " | ".join(st) +
                     f" | {r['loss_err']:.1e} | {r['param_err']:.1e} |")
    if "relaxjax" in results and "error" not in results["relaxjax"]:
        rj = results["relaxjax"]
        lines += ["", "peer step time / relaxjax step time (> 1: relaxjax faster):", "",
                  "| peer | " + " | ".join(f"@ {n}" for n in steady) + " |", "|---|" + "---|" * len(steady)]
        for peer, r in results.items():
            if peer != "relaxjax" and "error" not in r:
                lines.append(f"| {peer} | " + " | ".join(
                    f"{r['steady_s'][str(n)] / rj['steady_s'][str(n)]:.2f}" for n in steady) + " |")
    write_report("\n".join(lines), a.out, results)


if __name__ == "__main__":
    main()
