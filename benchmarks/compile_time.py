"""Start-up, tracing and compile time in fresh processes (issue 17), against jax.jit.

    python benchmarks/compile_time.py [--runs 5] [--sizes 100,1000,10000] [--no-jax] [--out F.md]

Every measurement is a new Python process (median of ``--runs``):

- ``import``: ``import relaxjax`` (``import jax`` for jax), wall time inside the process;
- for each program -- the five shared workloads (``relaxjax_plugin.workloads``: W1 elementwise,
  W2 softmax, W3 layer norm, W4 MLP block, W5 attention) and straight-line chains of 100,
  1 000 and 10 000 elementwise ops on a (64, 64) float32 array -- three phases timed apart:
  ``trace`` (``jit(f).lower(*args)``), ``compile`` (``.compile()``) and ``run`` (its first
  call), each with an empty persistent cache (cold) and with one a previous process filled
  (warm); ``first call`` is their sum, what a user's first ``f(x)`` costs;
- jax: the same phases with ``jax.jit(f).lower(*args).compile()`` and its persistent
  compilation cache (``jax_compilation_cache_dir``, every compile cached).

- torch.compile (``--torch-python``, or this interpreter when it has torch): the first call
  (trace and compile inside it) less a second call's run, Inductor's FX graph cache on and
  kept in the cache directory.

Python's bytecode cache is warmed first and kept in a temporary
``PYTHONPYCACHEPREFIX``, so module compilation does not blur the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
FW, PROG = {fw!r}, {prog!r}
if FW == "relaxjax":
    import relaxjax as rj
    import relaxjax.numpy as xp
elif FW == "torch":
    import torch
    torch.set_num_threads({threads})
    xp = torch
else:
    import jax
    jax.config.update("jax_compilation_cache_dir", {cache!r})
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax.numpy as xp
t_import = time.perf_counter() - t0
import numpy as np
sys.path.insert(0, {here!r})
rng = np.random.default_rng(0)
f32 = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)

def chain(n):
    def f(x):
        y = x
        for k in range(n // 2):
            y = xp.tanh(y * 0.5 + 0.25) if k % 2 else y * 0.9 + 0.1
        return y
    return f, (f32(64, 64),)

if PROG.startswith("chain"):
    fun, args = chain(int(PROG[5:]))
else:
    from relaxjax_plugin import workloads
    import math
    if FW == "relaxjax":
        fun = workloads()[PROG]
        fun = getattr(fun, "__wrapped__", fun)
    else:
        gelu_c = math.sqrt(2.0 / math.pi)
        kw = dict(dim=-1, keepdim=True) if FW == "torch" else dict(axis=-1, keepdims=True)
        rowmax = (lambda x: torch.amax(x, **kw)) if FW == "torch" else (lambda x: xp.max(x, **kw))
        def softmax(x):
            e = xp.exp(x - rowmax(x))
            return e / xp.sum(e, **kw)
        def gelu(h):
            return 0.5 * h * (1.0 + xp.tanh(gelu_c * (h + 0.044715 * h * h * h)))
        def ln(x, g, b):
            mu = xp.mean(x, **kw)
            xc = x - mu
            return xc * (1.0 / xp.sqrt(xp.mean(xc * xc, **kw) + 1e-5)) * g + b
        fun = {{"W1": lambda x: xp.tanh(xp.exp(x) * 2.0 + 1.0) - x, "W2": softmax, "W3": ln,
               "W4": lambda x, W1, b1, W2, b2: gelu(x @ W1 + b1) @ W2 + b2,
               "W5": lambda q, k, v: softmax((q @ k.T) * (1.0 / math.sqrt(q.shape[-1]))) @ v}}[PROG]
    args = {{"W1": (f32(256, 1024),), "W2": (f32(256, 1024),),
            "W3": (f32(256, 768), f32(768), f32(768)),
            "W4": (f32(16, 512), f32(512, 2048), f32(2048), f32(2048, 512), f32(512)),
            "W5": (f32(256, 64), f32(256, 64), f32(256, 64))}}[PROG]
if FW == "torch":
    # torch.compile traces and compiles inside the first call: that call less a second
    # call's run is its compile time (its trace is inside it, reported as 0)
    args = tuple(torch.from_numpy(a) for a in args)
    compiled = torch.compile(fun)
    t0 = time.perf_counter(); compiled(*args); t_first = time.perf_counter() - t0
    t0 = time.perf_counter(); compiled(*args); t_run = time.perf_counter() - t0
    t_trace, t_compile = 0.0, t_first - t_run
else:
    jitted = rj.jit(fun) if FW == "relaxjax" else jax.jit(fun)
    t0 = time.perf_counter(); lowered = jitted.lower(*args); t_trace = time.perf_counter() - t0
    t0 = time.perf_counter(); compiled = lowered.compile(); t_compile = time.perf_counter() - t0
    t0 = time.perf_counter(); out = compiled(*args)
    if FW == "jax":
        out.block_until_ready()
    t_run = time.perf_counter() - t0
print(json.dumps(dict(import_s=t_import, trace_s=t_trace, compile_s=t_compile, run_s=t_run)))
"""


def child(fw: str, prog: str, cache_dir: str, env: dict, python: str, threads: int) -> dict:
    src = CHILD.format(fw=fw, prog=prog, cache=cache_dir, here=HERE, threads=threads)
    # torch.compile's persistent caches (Inductor's FX graph and kernel caches) live here
    env = dict(env, RELAXJAX_CACHE_DIR=cache_dir, TORCHINDUCTOR_CACHE_DIR=cache_dir,
               TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    r = subprocess.run([python, "-c", src], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", default="100,1000,10000", help="straight-line chain lengths")
    ap.add_argument("--programs", default="W1,W2,W3,W4,W5")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--frameworks", default="relaxjax,jax,torch",
                    help="which to measure (those --no-jax / --no-torch leave out are dropped)")
    ap.add_argument("--torch-python", help="a Python interpreter with torch (default: this one, "
                    "when it has torch); e.g. a venv's, so torch's own libraries stay out of "
                    "the environment the tests run in")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="markdown file (the JSON goes beside it)")
    a = ap.parse_args()
    progs = [p for p in a.programs.split(",") if p] + [f"chain{n}" for n in a.sizes.split(",") if n]
    torch_python = a.torch_python or (sys.executable if _has("torch") else None)
    fws = [fw for fw in a.frameworks.split(",") if fw and not (fw == "jax" and a.no_jax) and
           not (fw == "torch" and (a.no_torch or not torch_python))]
    python = {"relaxjax": sys.executable, "jax": sys.executable, "torch": torch_python}
    tmp = tempfile.mkdtemp(prefix="relaxjax-compile-time-")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"), OMP_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS=str(a.threads), JAX_PLATFORMS="cpu")
    env.pop("RELAXJAX_CACHE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # else every process compiles every module anew
    res: dict = {}
    try:
        for fw in fws:
            run = lambda prog, cache_dir: child(fw, prog, cache_dir, env, python[fw], a.threads)  # noqa: E731
            run("W1", os.path.join(tmp, "throwaway"))                     # warms pycache
            for prog in progs:
                warm = os.path.join(tmp, f"warm-{fw}-{prog}")
                run(prog, warm)                                             # fills warm
                for k in range(a.runs):          # interleaved: machine load hits both alike
                    cold = os.path.join(tmp, f"cold-{fw}-{prog}-{k}")
                    res.setdefault((fw, prog, "cold"), []).append(run(prog, cold))
                    shutil.rmtree(cold, ignore_errors=True)
                    res.setdefault((fw, prog, "warm"), []).append(run(prog, warm))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(rows, key):
        vals = [r[key] for r in rows if key in r]
        return statistics.median(vals) * 1e3 if vals else float("nan")

    lines = [f"Fresh process per run, median of {a.runs}; ms. first call = trace + compile + run.", "",
             "| program | framework | import | trace | compile cold | run cold | first call cold | "
             "compile warm | first call warm | cold / warm |", "|---|---|---|---|---|---|---|---|---|---|"]
    for prog in progs:
        for fw in fws:
            if (fw, prog, "cold") not in res:
                continue
            cold, warm = res[(fw, prog, "cold")], res[(fw, prog, "warm")]
            errs = [r["error"] for r in cold + warm if "error" in r]
            if errs:
                lines.append(f"| {prog} | {fw} | error: {errs[0]} |||||||")
                continue
            first = lambda rows: statistics.median(r["trace_s"] + r["compile_s"] + r["run_s"] for r in rows) * 1e3
            fc, fw_ = first(cold), first(warm)
            lines.append(f"| {prog} | {fw} | {med(cold, 'import_s'):.0f} | {med(cold, 'trace_s'):.1f} | "
                         f"{med(cold, 'compile_s'):.1f} | {med(cold, 'run_s'):.2f} | {fc:.1f} | "
                         f"{med(warm, 'compile_s'):.1f} | {fw_:.1f} | {fc / fw_:.1f}x |")
    if "torch" not in fws and "torch" in a.frameworks.split(","):
        lines += ["", "torch.compile: not measured (" + ("--no-torch" if a.no_torch else
                                                          "no torch: see --torch-python") + ")"]
    elif "torch" in fws:
        lines += ["", "torch.compile: its trace happens inside the first call, so its `trace` is 0 "
                  "and `compile` is the first call less a second call's run."]
    write_report("\n".join(lines), a.out, {"|".join(k): v for k, v in res.items()})


def _has(mod: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(mod) is not None


if __name__ == "__main__":
    main()
