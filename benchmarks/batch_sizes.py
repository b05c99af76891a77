"""Many batch sizes, cold: what a jitted function costs when every call brings a new shape.

    python benchmarks/batch_sizes.py                     # W1..W5, 50 sizes each, all peers
    python benchmarks/batch_sizes.py --quick             # smoke test: W1,W5, 5 sizes
    python benchmarks/batch_sizes.py --workloads W1,W2 --peers relaxjax,jax.jit --out bs.json

For each workload of the shared peer benchmark (W1-W4: batch n; W5: sequence length s) it
calls one jitted function with ``--count`` distinct sizes drawn with a fixed seed from
[1, --max-size] (default 50 sizes from [1, 512], in random order), each peer in a fresh
process (compile caches cold: torch.compile gets an empty inductor cache dir, relaxjax an empty
persistent cache) with threads
pinned (``--threads``, default 2: *_NUM_THREADS set before any import, torch.set_num_threads,
relaxjax's LLVM runtime threads, CPU affinity when there are more cores).

Peers: relaxjax (``workloads()`` of benchmarks/relaxjax_plugin.py: one symbolic signature per
workload), jax.jit, torch.compile (default: static first, then automatic dynamic),
torch.compile.dynamic (``dynamic=True``), numpy (no compiles; reference time).

Per (workload, peer) it prints: total s (the cold pass over all sizes, compiles included),
compiles (relaxjax: ``Jitted.cache_info().compiles``; jax: ``jitted._cache_size()``; torch:
dynamo's ``counters["stats"]["unique_graphs"]``), mean per call ms (total / sizes), the first
call, a second pass over the same sizes (everything compiled by then: total - 2nd pass is
about the compile cost), init s (one-time runtime start-up in the process: the first compile
of an unrelated trivial function, before the timed pass and not in the total), the max
relative error of the cold pass's outputs against a float64 NumPy reference, and bg cores
(CPU used by other processes while the process ran; before each process it waits up to
``--quiet-max-wait`` s for the machine to be quiet).  ``--out`` keeps per-call times.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = ["relaxjax", "jax.jit", "torch.compile", "torch.compile.dynamic", "numpy"]
NEEDS = {"relaxjax": ["relaxjax"], "jax.jit": ["jax", "jaxlib"], "torch.compile": ["torch"],
         "torch.compile.dynamic": ["torch"], "numpy": ["numpy"]}
LABEL = {"torch.compile": "torch.compile (default)",
         "torch.compile.dynamic": "torch.compile(dynamic=True)"}
WORKLOADS = ["W1", "W2", "W3", "W4", "W5"]
QUICK_WORKLOADS = ["W1", "W5"]
ARGS = {"W1": ["x"], "W2": ["x"], "W3": ["x", "g", "b"], "W4": ["x", "W1", "b1", "W2", "b2"],
        "W5": ["q", "k", "v"]}
FEAT = {"W1": 1024, "W2": 1024, "W3": 768}
D_IN, D_HID, HEAD_D = 512, 2048, 64
LN_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)
NOISY = 0.3        # rows timed while other processes used more cores than this get a dagger


def draw_sizes(count: int, max_size: int, seed: int) -> list[int]:
    import numpy as np
    if count > max_size:
        raise SystemExit(f"--count {count} distinct sizes do not fit in [1, {max_size}]")
    perm = np.random.default_rng(seed).permutation(np.arange(1, max_size + 1))
    return [int(v) for v in perm[:count]]          # --count 5 takes the first 5 of the 50


# ------------------------------------------------------------------ inputs, reference
def make_weights(wl):
    """Arguments that do not depend on n (same for every call, like a model's parameters)."""
    import numpy as np
    rng = np.random.default_rng(100 + int(wl[1]))
    f32 = np.float32

    def randn(*shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=f32) * f32(scale)).astype(f32)
    if wl == "W3":
        return {"g": randn(768, scale=0.5) + f32(1.0), "b": randn(768, scale=0.1)}
    if wl == "W4":
        return {"W1": randn(D_IN, D_HID, scale=1 / math.sqrt(D_IN)), "b1": randn(D_HID, scale=0.1),
                "W2": randn(D_HID, D_IN, scale=1 / math.sqrt(D_HID)), "b2": randn(D_IN, scale=0.1)}
    return {}


def make_inputs(wl, n, weights):
    import numpy as np
    rng = np.random.default_rng(n * 7 + int(wl[1]))
    f32 = np.float32

    def randn(*shape):
        return rng.standard_normal(shape, dtype=f32)
    if wl in ("W1", "W2"):
        return {"x": randn(n, FEAT[wl])}
    if wl == "W3":
        return {"x": randn(n, 768) * f32(2.0) + f32(0.5), **weights}
    if wl == "W4":
        return {"x": randn(n, D_IN), **weights}
    return {"q": randn(n, HEAD_D), "k": randn(n, HEAD_D), "v": randn(n, HEAD_D)}


def reference(wl, inp):
    import numpy as np
    d = {k: v.astype(np.float64) for k, v in inp.items()}
    if wl == "W1":
        x = d["x"]
        return np.tanh(np.exp(x) * 2.0 + 1.0) - x
    if wl == "W2":
        x = d["x"]
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if wl == "W3":
        x = d["x"]
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + LN_EPS) * d["g"] + d["b"]
    if wl == "W4":
        h = d["x"] @ d["W1"] + d["b1"]
        h = 0.5 * h * (1.0 + np.tanh(GELU_C * (h + 0.044715 * h * h * h)))
        return h @ d["W2"] + d["b2"]
    s = d["q"] @ d["k"].T / math.sqrt(HEAD_D)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ d["v"]


# ------------------------------------------------------------------------- peers
# Each builder returns (fn, prep, sync, to_np, compiles, trivial) for one workload:
# prep(inputs) -> args, sync(out) blocks, compiles() -> compiles so far, trivial() runs
# the first compile of an unrelated function (runtime start-up, not timed in the total).
def build_relaxjax(wl, threads):
    import numpy as np
    sys.path.insert(0, HERE)
    import relaxjax_plugin
    import relaxjax as rj
    from relaxjax.backends import llvm as rj_llvm
    rj_llvm.set_num_threads(threads)
    fn = relaxjax_plugin.workloads()[wl]
    names = relaxjax_plugin.ARGS[wl]

    def trivial():
        f = rj.jit(lambda a: a * 2.0 + 1.0)
        f(np.ones((3, 5), np.float32))
    return (fn, lambda inp: [inp[k] for k in names], lambda o: None, np.asarray,
            lambda: fn.cache_info().compiles, trivial)


def build_jax(wl, threads):
    import numpy as np
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")

    def w1(x):
        return jnp.tanh(jnp.exp(x) * 2.0 + 1.0) - x

    def w2(x):
        return jax.nn.softmax(x, axis=-1)

    def w3(x, g, b):
        mu = jnp.mean(x, -1, keepdims=True)
        xc = x - mu
        var = jnp.mean(xc * xc, -1, keepdims=True)
        return xc * jax.lax.rsqrt(var + LN_EPS) * g + b

    def w4(x, W1, b1, W2, b2):
        return jax.nn.gelu(x @ W1 + b1, approximate=True) @ W2 + b2

    def w5(q, k, v):
        return jax.nn.softmax((q @ k.T) * (1.0 / math.sqrt(HEAD_D)), axis=-1) @ v

    jf = jax.jit({"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5}[wl])
    names = ARGS[wl]
    events = [0]

    def on_event(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            events[0] += 1
    try:
        jax.monitoring.register_event_duration_secs_listener(on_event)
    except Exception:  # noqa: BLE001 - only a fallback counter
        pass

    def compiles():
        return jf._cache_size() if hasattr(jf, "_cache_size") else events[0]

    def trivial():
        jax.jit(lambda a: a * 2.0 + 1.0)(jnp.ones((3, 5), jnp.float32)).block_until_ready()
    return (jf, lambda inp: [jax.device_put(inp[k]) for k in names],
            lambda o: o.block_until_ready(), np.asarray, compiles, trivial)


def build_torch(wl, threads, dynamic):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)

    def w1(x):
        return torch.tanh(torch.exp(x) * 2.0 + 1.0) - x

    def w2(x):
        return torch.softmax(x, dim=-1)

    def w3(x, g, b):
        return F.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)

    def w4(x, W1, b1, W2, b2):
        return F.gelu(x @ W1 + b1, approximate="tanh") @ W2 + b2

    def w5(q, k, v):
        return torch.softmax((q @ k.T) * (1.0 / math.sqrt(HEAD_D)), dim=-1) @ v

    kw = {"dynamic": True} if dynamic else {}
    fn = torch.compile({"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5}[wl], **kw)
    names = ARGS[wl]
    from torch._dynamo.utils import counters

    def trivial():
        torch.compile(lambda a: a * 2.0 + 1.0, **kw)(torch.ones(3, 5))
        counters.clear()          # count the workload's graphs only
    return (fn, lambda inp: [torch.from_numpy(inp[k]) for k in names], lambda o: None,
            lambda o: o.numpy(), lambda: counters["stats"]["unique_graphs"], trivial)


def build_numpy(wl, threads):
    import numpy as np
    f32 = np.float32

    def w1(x):
        return np.tanh(np.exp(x) * f32(2.0) + f32(1.0)) - x

    def w2(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def w3(x, g, b):
        xc = x - x.mean(-1, keepdims=True)
        var = (xc * xc).mean(-1, keepdims=True)
        return xc * (f32(1.0) / np.sqrt(var + f32(LN_EPS))) * g + b

    def w4(x, W1, b1, W2, b2):
        h = x @ W1 + b1
        h = f32(0.5) * h * (f32(1.0) + np.tanh(f32(GELU_C) * (h + f32(0.044715) * h * h * h)))
        return h @ W2 + b2

    def w5(q, k, v):
        s = (q @ k.T) * f32(1.0 / math.sqrt(HEAD_D))
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v

    names = ARGS[wl]
    return ({"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5}[wl],
            lambda inp: [inp[k] for k in names], lambda o: None, lambda o: o, lambda: 0,
            lambda: None)


def worker(args) -> dict:
    import numpy as np
    pc = time.perf_counter
    t0 = pc()
    peer, wl, threads = args.worker, args.workload, args.threads
    if peer == "relaxjax":
        built = build_relaxjax(wl, threads)
    elif peer == "jax.jit":
        built = build_jax(wl, threads)
    elif peer in ("torch.compile", "torch.compile.dynamic"):
        built = build_torch(wl, threads, dynamic=peer.endswith("dynamic"))
    elif peer == "numpy":
        built = build_numpy(wl, threads)
    else:
        raise SystemExit(f"unknown peer {peer}")
    fn, prep, sync, to_np, compiles, trivial = built
    import_s = pc() - t0
    t = pc()
    trivial()
    init_s = pc() - t
    sizes = [int(s) for s in args.sizes.split(",")]
    weights = make_weights(wl)
    inputs = [make_inputs(wl, n, weights) for n in sizes]
    fargs = [prep(inp) for inp in inputs]
    c0 = compiles()
    gc.collect()
    gc.disable()
    times, compiled_at, outs = [], [], []
    try:
        for a in fargs:                       # cold pass: every size once, compiles included
            k = compiles()
            t = pc()
            o = fn(*a)
            sync(o)
            times.append(pc() - t)
            compiled_at.append(compiles() - k)
            outs.append(o)
        c1 = compiles()
        t = pc()
        for a in fargs:                       # second pass: same sizes, all compiled
            sync(fn(*a))
        second = pc() - t
    finally:
        gc.enable()
    errs = []
    for inp, o in zip(inputs, outs):
        ref = reference(wl, inp)
        got = np.asarray(to_np(o), dtype=np.float64)
        errs.append(float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                    if got.shape == ref.shape else float("nan"))
    extra = {}
    if peer.startswith("torch"):
        from torch._dynamo.utils import counters
        extra["dynamo_counters"] = {k: dict(v) for k, v in counters.items()
                                    if k in ("stats", "frames", "recompiles", "graph_break")}
    return {"peer": peer, "workload": wl, "sizes": sizes, "call_s": times,
            "compiles_per_call": compiled_at, "total_s": sum(times), "compiles": c1 - c0,
            "compiles_second_pass": compiles() - c1, "first_call_s": times[0],
            "second_pass_s": second, "init_s": init_s, "import_build_s": import_s,
            "max_rel_err": max(errs), **extra}


# ------------------------------------------------------------------- orchestrator
def busy_cpu_s() -> float:
    """CPU seconds all processes have used (busy incl. steal), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def background_cores(window=0.5) -> float:
    b0, c0, t0 = busy_cpu_s(), children_cpu_s(), time.perf_counter()
    time.sleep(window)
    return max(0.0, busy_cpu_s() - b0 - (children_cpu_s() - c0)) / (time.perf_counter() - t0)


def wait_quiet(threshold, max_wait) -> float:
    """Wait up to max_wait s while other processes use more than threshold cores."""
    t0 = time.perf_counter()
    bg = background_cores()
    while bg > threshold and time.perf_counter() - t0 < max_wait:
        time.sleep(0.5)
        bg = background_cores()
    return time.perf_counter() - t0


def run_worker(peer, wl, sizes, args) -> dict:
    fd, path = tempfile.mkstemp(prefix=f"bs_{peer}_{wl}_", suffix=".json")
    os.close(fd)
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[k] = str(args.threads)
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)       # no persistent jax cache: cold
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cache_dir = None
    if peer.startswith("torch"):
        cache_dir = tempfile.mkdtemp(prefix="inductor_cold_")
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    elif peer == "relaxjax":                         # an empty persistent cache: cold
        cache_dir = tempfile.mkdtemp(prefix="relaxjax_cold_")
        env["RELAXJAX_CACHE_DIR"] = cache_dir
        env.pop("RELAXJAX_CACHE", None)
    ncpu = os.cpu_count() or args.threads
    pin = None
    if args.threads < ncpu:
        cpus = set(range(args.threads))
        pin = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", peer, "--workload", wl,
           "--sizes", ",".join(map(str, sizes)), "--threads", str(args.threads),
           "--worker-out", path]
    waited = wait_quiet(args.quiet_threshold, args.quiet_max_wait) if args.quiet_max_wait else 0.0
    print(f"== {wl} {peer} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    b0, c0 = busy_cpu_s(), children_cpu_s()
    try:
        proc = subprocess.run(cmd, env=env, preexec_fn=pin, timeout=args.worker_timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = time.perf_counter() - t0
    bg = max(0.0, busy_cpu_s() - b0 - (children_cpu_s() - c0)) / wall
    if rc == 0:
        with open(path) as f:
            res = json.load(f)
    else:
        res = {"peer": peer, "workload": wl, "error": f"worker exited {rc}"}
    os.unlink(path)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)
    res.update(process_wall_s=wall, bg_cores=bg, quiet_wait_s=waited)
    print(f"== {wl} {peer} done in {wall:.1f} s (other processes used {bg:.2f} cores)",
          file=sys.stderr, flush=True)
    return res


def table(results) -> str:
    rows = ["| workload | peer | total s | compiles | mean per call ms | first call s | "
            "2nd pass s | init s | max rel err | bg cores |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        name = LABEL.get(r["peer"], r["peer"])
        if "error" in r:
            rows.append(f"| {r['workload']} | {name} | ERROR: {r['error']} | | | | | | | |")
            continue
        rows.append(f"| {r['workload']} | {name} | {r['total_s']:.3f} | {r['compiles']} | "
                    f"{r['total_s'] / len(r['sizes']) * 1e3:.2f} | {r['first_call_s']:.3f} | "
                    f"{r['second_pass_s']:.3f} | {r['init_s']:.2f} | {r['max_rel_err']:.1e} | "
                    f"{r['bg_cores']:.2f}{' †' if r['bg_cores'] > NOISY else ''} |")
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke test: {','.join(QUICK_WORKLOADS)} (unless --workloads), 5 sizes")
    ap.add_argument("--workloads", default=None, help="comma-separated from W1..W5 (default all)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"from {','.join(PEERS)}")
    ap.add_argument("--count", type=int, default=None, help="distinct sizes (default 50; 5 --quick)")
    ap.add_argument("--max-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker-timeout", type=int, default=900)
    ap.add_argument("--quiet-threshold", type=float, default=0.3,
                    help="before each process, wait while other processes use more cores than this")
    ap.add_argument("--quiet-max-wait", type=float, default=10.0,
                    help="longest wait per process, s (0: never wait)")
    ap.add_argument("--out", default=None, help="also write the results (per-call times) as JSON")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = worker(args)
        with open(args.worker_out, "w") as f:
            json.dump(res, f)
        return

    wls = (args.workloads.split(",") if args.workloads
           else QUICK_WORKLOADS if args.quick else WORKLOADS)
    bad = [w for w in wls if w not in WORKLOADS]
    if bad:
        sys.exit(f"batch_sizes.py: unknown workload(s) {bad}; known: {WORKLOADS}")
    peers = [p for p in args.peers.split(",") if p]
    bad = [p for p in peers if p not in PEERS]
    if bad:
        sys.exit(f"batch_sizes.py: unknown peer(s) {bad}; known: {PEERS}")
    sys.path.insert(0, HERE)
    from peers import importable
    status = importable(sorted({m for p in peers for m in NEEDS[p]}))
    keep = []
    for p in peers:
        why = [f"{m} ({status[m]})" for m in NEEDS[p] if status.get(m)]
        if not why and p.startswith("torch.compile") and not (shutil.which("c++") or
                                                               shutil.which("g++")):
            why = ["a C++ compiler (inductor's CPU backend needs one)"]
        if why:
            print(f"note: skipping peer {p}: cannot import " + ", ".join(why), flush=True)
        else:
            keep.append(p)
    count = args.count or (5 if args.quick else 50)
    sizes = draw_sizes(count, args.max_size, args.seed)
    print(f"{count} distinct sizes from [1, {args.max_size}] (seed {args.seed}), in this order: "
          f"{', '.join(map(str, sizes))}; threads={args.threads}; one fresh process per "
          f"(workload, peer)", flush=True)
    t0 = time.perf_counter()
    results = [run_worker(p, wl, sizes, args) for wl in wls for p in keep]
    print(f"\n## {count} batch sizes, cold (W1-W4: n, W5: s; total = all {count} calls of the "
          f"first pass, compiles included; init = runtime start-up, not in the total)\n")
    print(table(results))
    print(f"\n† other processes used more than {NOISY} cores during that process: shared, noisy "
          f"machine; rerun before trusting it.\nwall {time.perf_counter() - t0:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"sizes": sizes, "threads": args.threads, "seed": args.seed,
                       "python": sys.version, "results": results}, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
