"""Matrix products (issue 23): the generated product against BLAS, NumPy, jax.jit and torch,
by shape class, with and without an epilogue, and against the machine's best sgemm.

    python benchmarks/gemm.py [--threads 2] [--peers numpy,jax,torch] [--torch-python PY]
                              [--quick] [--out F.md]

Every implementation runs in its own process (thread pools of OpenBLAS, OpenMP, XLA and
torch otherwise fight for the two cores), timed as the median of 7 repetitions of a
loop lasting at least 20 ms; GFLOP/s = 2 M N K / time.  Rows:

- ``relaxjax``: ``rj.jit(f)`` end to end (the rule in ``backends/llvm/gemm.py`` picks the
  generated product or OpenBLAS per call);
- ``generated`` / ``openblas``: the generated product's function alone, and the CBLAS
  gemm that NumPy and relaxjax call (the rule's evidence);
- ``numpy``, ``jax`` (``jax.jit``), ``torch`` (eager; ``--torch-python`` names an
  interpreter with torch, e.g. a venv's).

Shape classes: square, short (a decode-sized batch of M rows), shallow (K = 64, attention's
scores), narrow (N = 64), batched (attention heads, ``einsum("bqd,bkd->bqk")``), short B^T
(``a @ b.T`` with b (N, K): a decoder's logits from its tied embedding, a torch-style
``Linear``), each float32 and float64; ``+epi`` adds ``tanh(a @ b + bias)``.  ``gemv`` rows report GB/s of
the matrix streamed against the DRAM bandwidth the shared harness measured (the baseline
JSON beside it).  The peak row: the best float32 GFLOP/s any implementation reached on a
2048^3 product in this run, OpenBLAS with ``OPENBLAS_CORETYPE=SkylakeX`` included.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, batch, M, K, N, epilogue)
CASES = [("square", 0, n, n, n, False) for n in (256, 512, 1024, 2048)] + \
    [("square+epi", 0, 1024, 1024, 1024, True)] + \
    [("short", 0, m, 512, 2048, False) for m in (2, 8, 16, 32)] + \
    [("short", 0, 16, 2048, 512, False), ("short+epi", 0, 16, 512, 2048, True)] + \
    [("shallow", 0, 1024, 64, 1024, False), ("shallow", 0, 4096, 64, 4096, False),
     ("narrow", 0, 1024, 1024, 64, False), ("batched", 8, 256, 64, 256, False)] + \
    [("short B^T", 0, m, 384, 8192, False) for m in (1, 2, 8, 16)] + \
    [("short B^T", 0, 8, 4096, 4096, False)]
QUICK = [c for c in CASES if c[2] * c[3] * c[4] <= 1024 ** 3]
GEMV = [(4096, 4096), (8192, 8192)]

CHILD = r"""
import json, statistics, sys, time, os
import numpy as np
IMPL, CASES, GEMV, THREADS = {impl!r}, {cases!r}, {gemv!r}, {threads}
rng = np.random.default_rng(0)

def timeit(f):
    f()
    t = time.perf_counter(); f(); one = time.perf_counter() - t
    n = max(1, int(0.02 / max(one, 1e-7)))
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            f()
        ts.append((time.perf_counter() - t) / n)
    return statistics.median(ts)

def operands(batch, m, k, n, dtype, nt):
    lead = (batch,) if batch else ()
    a = rng.uniform(-1, 1, lead + (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, lead + (n, k) if batch or nt else (k, n)).astype(dtype)
    bias = rng.uniform(-1, 1, n).astype(dtype)
    return a, b, bias

if IMPL in ("relaxjax", "generated"):
    import relaxjax as rj
if IMPL == "generated":
    import ctypes
    from relaxjax.backends.llvm import engine, gemm
    engine.prepare_process()
    # batch, sa, sb, sc, M, N, K, then (pointer, leading dimension) for A, B and C
    sig = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 7 + [ctypes.c_void_p, ctypes.c_int64] * 3
                                   + [ctypes.c_void_p] * 2))   # (no epilogue)
if IMPL == "jax":
    import jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
if IMPL == "torch":
    import torch
    torch.set_num_threads(THREADS)

def product(batch, epi, xp, nt):
    if batch or nt:
        mm = lambda a, b: xp.matmul(a, xp.swapaxes(b, -1, -2))
    else:
        mm = lambda a, b: a @ b
    return (lambda a, b, bias: xp.tanh(mm(a, b) + bias)) if epi else (lambda a, b, bias: mm(a, b))

out = {{}}
for name, batch, m, k, n, epi in CASES:
    for dtype in ("float32", "float64"):
        nt = name.endswith("B^T")
        a, b, bias = operands(batch, m, k, n, dtype, nt)
        key = f"{{name}}|{{batch}}|{{m}}|{{k}}|{{n}}|{{dtype}}"
        if IMPL in ("generated", "openblas") and (batch or epi):
            continue
        if IMPL == "relaxjax":
            f = rj.jit(product(batch, epi, np, nt))
            f(a, b, bias)
            t = timeit(lambda: f(a, b, bias))
        elif IMPL == "generated":
            v = gemm.gemm_symbol("s" if dtype == "float32" else "d", False, nt)
            engine.use_gemms([v])
            g = sig(engine._GEMMS[v].address(v))
            c = np.empty((m, n), dtype)
            ldb = k if nt else n
            t = timeit(lambda: g(1, 0, 0, 0, m, n, k, a.ctypes.data, k, b.ctypes.data, ldb, c.ctypes.data, n, None, None))
        elif IMPL == "openblas":
            c = np.empty((m, n), dtype)
            bb = b.T if nt else b
            t = timeit(lambda: np.matmul(a, bb, out=c))
        elif IMPL == "numpy":
            f = product(batch, epi, np, nt)
            t = timeit(lambda: f(a, b, bias))
        elif IMPL == "jax":
            f = jax.jit(product(batch, epi, jnp, nt))
            ja, jb, jbias = (jnp.asarray(x) for x in (a, b, bias))
            t = timeit(lambda: f(ja, jb, jbias).block_until_ready())
        else:
            f = product(batch, epi, torch, nt)
            ta, tb, tbias = (torch.from_numpy(x) for x in (a, b, bias))
            t = timeit(lambda: f(ta, tb, tbias))
        out[key] = t
for k_, n_ in GEMV:
    a = rng.uniform(-1, 1, (1, k_)).astype(np.float32)
    w = rng.uniform(-1, 1, (k_, n_)).astype(np.float32)
    key = f"gemv|0|1|{{k_}}|{{n_}}|float32"
    if IMPL == "relaxjax":
        f = rj.jit(lambda a, w: a @ w)
        t = timeit(lambda: f(a, w))
    elif IMPL in ("numpy", "openblas"):
        t = timeit(lambda: a @ w)
    elif IMPL == "jax":
        f = jax.jit(lambda a, w: a @ w)
        ja, jw = jnp.asarray(a), jnp.asarray(w)
        t = timeit(lambda: f(ja, jw).block_until_ready())
    elif IMPL == "torch":
        ta, tw = torch.from_numpy(a), torch.from_numpy(w)
        t = timeit(lambda: ta @ tw)
    else:
        continue
    out[key] = t
print(json.dumps(out))
"""


def child(impl: str, cases, gemv, threads: int, python: str, extra_env: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}",
               **(extra_env or {}))
    src = CHILD.format(impl=impl, cases=cases, gemv=gemv, threads=threads)
    r = subprocess.run([python, "-c", src], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        print(f"{impl}: failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
        return {}
    return json.loads(r.stdout.strip().splitlines()[-1])


def dram_bandwidth() -> float | None:
    """The shared harness's DRAM bandwidth (GB/s) from its baseline JSON, if beside it."""
    for path in sorted(glob.glob(os.path.join(ROOT, "..", "shared", "bench", "baseline-*.json"))):
        with open(path) as f:
            return json.load(f)["limits"]["bandwidth_gbps"]["DRAM"]
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", default="numpy,jax,torch")
    ap.add_argument("--torch-python", help="an interpreter with torch (default: this one, if it has torch)")
    ap.add_argument("--quick", action="store_true", help="products up to 1024^3 only")
    ap.add_argument("--cases", help="only the shape classes named (comma-separated, e.g. 'short B^T')")
    ap.add_argument("--out", help="markdown file (the JSON goes beside it)")
    a = ap.parse_args()
    cases = QUICK if a.quick else CASES
    if a.cases:
        peak_case = ("square", 0, 2048, 2048, 2048, False)          # (the peak's row)
        cases = [c for c in cases if c[0] in a.cases.split(",") or c == peak_case]
    impls = ["relaxjax", "generated", "openblas"] + [p for p in a.peers.split(",") if p]
    py = {i: sys.executable for i in impls}
    if "torch" in impls:
        import importlib.util
        py["torch"] = a.torch_python or (sys.executable if importlib.util.find_spec("torch") else None)
        if py["torch"] is None:
            impls.remove("torch")
    res = {i: child(i, cases, GEMV, a.threads, py[i]) for i in impls}
    skylake = child("openblas", [("square", 0, 2048, 2048, 2048, False)], [], a.threads, sys.executable,
                    {"OPENBLAS_CORETYPE": "SkylakeX"})

    def gflops(key, t):
        _, batch, m, k, n, _ = key.split("|")
        return 2 * max(int(batch), 1) * int(m) * int(k) * int(n) / t / 1e9

    keys = [k for k in res["relaxjax"] if not k.startswith("gemv")]
    peak_key = "square|0|2048|2048|2048|float32"
    peaks = {i: gflops(peak_key, r[peak_key]) for i, r in res.items() if peak_key in r}
    if peak_key in skylake:
        peaks["openblas (SkylakeX)"] = gflops(peak_key, skylake[peak_key])
    peak = max(peaks.values()) if peaks else float("nan")
    peers = [p for p in impls if p not in ("relaxjax", "generated", "openblas")]
    lines = [f"{a.threads} threads, one process per implementation, median of 7; GFLOP/s "
             "(higher is better); last columns: relaxjax's time ratio to each peer (> 1: relaxjax faster).", "",
             "| case | dtype | M x K x N | " + " | ".join(impls) + " | rj % of peak | " +
             " | ".join(f"rj vs {p}" for p in peers) + " |",
             "|---|---|---|" + "---|" * (len(impls) + 1 + len(peers))]
    for key in keys:
        name, batch, m, k, n, dtype = key.split("|")
        shape = (f"{batch} x " if int(batch) else "") + f"{m} x {k} x {n}"
        cells = [f"{gflops(key, res[i][key]):.1f}" if key in res[i] else "-" for i in impls]
        rj = res["relaxjax"][key]
        pct = f"{100 * gflops(key, rj) / peak:.0f} %" if dtype == "float32" else "-"
        ratios = [f"{res[p][key] / rj:.2f}" if key in res[p] else "-" for p in peers]
        lines.append(f"| {name} | {dtype} | {shape} | " + " | ".join(cells) + f" | {pct} | " + " | ".join(ratios) + " |")
    bw = dram_bandwidth()
    lines += ["", "Matrix-vector products (float32, 1 x K @ K x N): GB/s of the matrix streamed"
              + (f"; DRAM bandwidth (shared harness baseline): {bw:.1f} GB/s" if bw else ""), "",
              "| K x N | " + " | ".join(i for i in impls if i != "generated") + " | rj % of DRAM |",
              "|---|" + "---|" * (len(impls) - 1) + "---|"]
    for k_, n_ in GEMV:
        key = f"gemv|0|1|{k_}|{n_}|float32"
        cells = [f"{4 * k_ * n_ / res[i][key] / 1e9:.1f}" if key in res[i] else "-"
                 for i in impls if i != "generated"]
        rjbw = 4 * k_ * n_ / res["relaxjax"][key] / 1e9 if key in res["relaxjax"] else float("nan")
        pct = f"{100 * rjbw / bw:.0f} %" if bw else "-"
        lines.append(f"| {k_} x {n_} | " + " | ".join(cells) + f" | {pct} |")
    lines += ["", "float32 2048^3 GFLOP/s by implementation (the peak is the best): " +
              ", ".join(f"{i} {g:.1f}" for i, g in sorted(peaks.items(), key=lambda x: -x[1]))]
    write_report("\n".join(lines), a.out, {"results": res, "skylakex": skylake, "peaks": peaks})


if __name__ == "__main__":
    main()
