"""NPBench's kernels in relaxjax against NumPy, numba and jax.jit, in one run.

    python benchmarks/npbench_suite.py --npbench ~/npbench                 # all kernels, preset S
    python benchmarks/npbench_suite.py --npbench DIR --preset M --kernels gemm,lu --out r.md
    python benchmarks/npbench_suite.py --npbench DIR --busy                # one core kept busy

``--npbench DIR`` is a checkout of https://github.com/spcl/npbench: its ``bench_info/*.json``
give each kernel's sizes (presets S, M, L), its initializers make the inputs, and its
``*_numpy.py``, ``*_numba_<variant>.py`` and ``*_jax.py`` are the peers; nothing of it is
copied into this project.  relaxjax's versions are ``benchmarks/npbench_kernels``.

Each kernel runs in its own subprocess (a crash or a hang costs that kernel only) with the
shared harness's thread environment (``--threads``, default 2: OMP/BLAS/numba pools;
pinned to that many CPUs when fewer than the machine's).  In it:

- the inputs of the preset come from NPBench's initializer; NPBench's NumPy version gives
  the reference outputs (its return values, then its output arguments);
- relaxjax: ``rj.jit`` of the kernel, first call (compile + run), then the median of
  steady calls (the harness's ``measure``); compile s = first call - median; the results
  are checked against the reference (``np.allclose`` with rtol 1e-5, 1e-4 for float32,
  else NPBench's relative norm error); then one call at each of two more sizes (the
  presets S, M and a size between them: three sizes in all) and
  ``cache_info().compiles``;
- a kernel that fails jitted is also run eagerly on NumPy arrays (its control flow as
  Python loops) and checked against the reference: the "eager" column;
- NumPy, numba (the nopython variants in ``--numba-variants``, best median) and jax: the
  median of calls on fresh copies of the array arguments (NumPy and numba write into
  them), less the median of making those copies.

A kernel that fails records its status (error type and first line); the suite goes on.
Prints a markdown table (``--out FILE`` also writes it, with the JSON beside it): kernel,
status, relaxjax median, NumPy / relaxjax, best of numba and jax / relaxjax, compile s,
compiles over the three sizes; then geometric means over the kernels that ran correctly.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def load_harness(path: str | None):
    """The shared peer harness (``thread_env``, ``measure``, ``background_now``)."""
    cands = [path, os.environ.get("RELAXJAX_BENCH_HARNESS"),
             os.path.join(os.path.dirname(REPO), "shared", "bench", "bench_peers.py")]
    for cand in cands:
        if cand and os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("bench_peers", cand)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    sys.exit("npbench_suite.py: the shared harness bench_peers.py was not found; pass "
             "--harness PATH or set RELAXJAX_BENCH_HARNESS")


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------- NPBench's side
class NPBench:
    """One NPBench benchmark read from a checkout: sizes, inputs and peer versions."""

    def __init__(self, root: str, name: str):
        self.root = root
        with open(os.path.join(root, "bench_info", name + ".json")) as f:
            self.info = json.load(f)["benchmark"]
        self.dir = os.path.join(root, "npbench", "benchmarks", self.info["relative_path"])
        self.module = self.info["module_name"]

    def params(self, preset: str) -> dict:
        p = self.info["parameters"]
        if preset != "mid":
            return dict(p[preset])
        # a size between S and M: the geometric mean of each integer parameter
        s, m = p["S"], p["M"]
        return {k: (int(round(math.sqrt(s[k] * m[k]))) if isinstance(s[k], int)
                    and not isinstance(s[k], bool) and s[k] > 0 else s[k]) for k in s}

    def data(self, preset: str) -> dict:
        data = self.params(preset)
        init = self.info.get("init")
        if init:
            mod = load_module(os.path.join(self.dir, self.module + ".py"), "npb_init_" + self.module)
            outs = getattr(mod, init["func_name"])(*[data[a] for a in init["input_args"]])
            if len(init["output_args"]) == 1:
                outs = (outs,)
            data.update(zip(init["output_args"], outs))
        return data

    def impl(self, postfix: str):
        path = os.path.join(self.dir, f"{self.module}_{postfix}.py")
        if not os.path.isfile(path):
            return None
        return getattr(load_module(path, f"npb_{self.module}_{postfix}"), self.info["func_name"])

    def call_args(self, data: dict, copy_arrays: bool, written=None) -> list:
        """The arguments; with ``copy_arrays``, fresh copies of the arrays the kernel writes
        (``written``, default every array argument)."""
        arrays = set(self.info.get("array_args", []))
        if written is not None:
            arrays &= set(written)
        return [data[a].copy() if copy_arrays and a in arrays else data[a]
                for a in self.info["input_args"]]

    def outputs(self, result, args: list) -> list:
        """NPBench's output list: the return values, then the output arguments."""
        out = [] if result is None else (list(result) if isinstance(result, (tuple, list))
                                         else [result])
        names = self.info["input_args"]
        return out + [args[names.index(a)] for a in self.info.get("output_args", [])]


def compare(ref, got, info: dict) -> tuple[bool, float]:
    """NPBench's validation: allclose, else the relative norm error."""
    import numpy as np
    worst = 0.0
    for r, g in zip(ref, got):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape:
            return False, float("inf")
        f32 = np.float32 in (r.dtype, g.dtype) or np.complex64 in (r.dtype, g.dtype)
        rtol = max(info.get("rtol", 1e-5), 1e-4 if f32 else 1e-5)
        if np.allclose(r, g, rtol=rtol, atol=info.get("atol", 1e-8), equal_nan=True):
            continue
        den = np.linalg.norm(r.astype(complex).ravel())
        err = float(np.linalg.norm((r - g).astype(complex).ravel()) / (den if den else 1.0))
        worst = max(worst, err)
        if not err < max(info.get("norm_error", 1e-5), 1e-4 if f32 else 1e-5):
            return False, worst
    return True, worst


def first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160] if msg else ''}"


# -------------------------------------------------------------------------- worker
def worker(args) -> dict:
    sys.path[:0] = [REPO, HERE]
    import numpy as np
    H = load_harness(args.harness)
    import npbench_kernels as K
    import relaxjax as rj

    name = args.worker
    k = K.KERNELS[name]
    nb = NPBench(args.npbench, name)
    res = {"kernel": name, "source": k.source, "needs": sorted(k.needs)}
    data = nb.data(args.preset)
    res["params"] = nb.params(args.preset)
    budget = args.budget

    # the reference: NPBench's NumPy version
    np_impl = nb.impl("numpy")
    a = nb.call_args(data, True)
    ref = nb.outputs(np_impl(*a), a)
    if k.npb_out is not None:
        ref = [ref[i] for i in k.npb_out]
    ref += [a[nb.info["input_args"].index(n)] for n in k.written]

    # only the arrays NumPy and numba write are copied for each timed call (copying a large
    # read-only matrix and subtracting the copy's median left noise, even 1 ns, for mvt or bicg)
    written = set(nb.info.get("output_args", [])) | set(k.written)

    def copies():
        return nb.call_args(data, True, written)

    copy_cost, _ = H.measure(copies, lambda o: None, min(budget, 0.2))
    res["copy_s"] = copy_cost["median_s"]

    def timed_peer(fn, sync=lambda o: None, mutates=True):
        if mutates:
            stats, _ = H.measure(lambda: fn(*copies()), sync, budget)
            t = max(stats["median_s"] - res["copy_s"], 1e-9)
        else:
            fixed = nb.call_args(data, False)
            stats, _ = H.measure(lambda: fn(*fixed), sync, budget)
            t = stats["median_s"]
        return {"median_s": t, "first_call_s": stats["first_call_s"], "iqr_pct": stats["iqr_pct"],
                "bg_cores": stats["bg_cores"]}

    # relaxjax
    try:
        f = rj.jit(k.fn, static_argnums=k.static_argnums())
        packed = k.arguments(data)
        t0 = time.perf_counter()
        out = f(*packed)
        first = time.perf_counter() - t0
        ok, err = compare(ref, k.outputs(out), nb.info)
        if len(ref) != len(k.outputs(out)):
            ok, err = False, float("inf")
        stats, _ = H.measure(lambda: f(*packed), lambda o: None, budget)
        res["relaxjax"] = {"median_s": stats["median_s"], "first_call_s": first,
                           "compile_s": max(first - stats["median_s"], 0.0),
                           "iqr_pct": stats["iqr_pct"], "bg_cores": stats["bg_cores"],
                           "rel_err": err}
        res["status"] = "ok" if ok else f"wrong (relative error {err:.1e})"
        # three sizes: S, between S and M, M; one first call each (the preset's is done)
        for preset in ("S", "mid", "M"):
            if preset == args.preset:
                continue
            try:
                f(*k.arguments(nb.data(preset)))
            except Exception as e:              # noqa: BLE001  (recorded)
                res.setdefault("size_errors", {})[preset] = first_line(e)
        res["relaxjax"]["compiles"] = f.cache_info().compiles
    except Exception as e:                      # noqa: BLE001  (recorded, never fatal)
        res["status"] = first_line(e)
        res["traceback"] = traceback.format_exc(limit=-4)

    # a kernel that did not run jitted: its algorithm run eagerly on NumPy arrays (control
    # flow as Python loops, in-place updates on copies) against NPBench's NumPy version
    if res.get("status") != "ok":
        try:
            ok, err = compare(ref, k.outputs(k.fn(*k.arguments(data))), nb.info)
            res["eager"] = "ok" if ok else f"wrong (relative error {err:.1e})"
        except Exception as e:                  # noqa: BLE001
            res["eager"] = first_line(e)

    # the peers
    peers = {"numpy": (lambda: np_impl, True, lambda o: None)}
    if not args.no_numba:
        for v in args.numba_variants.split(","):
            peers[f"numba_{v}"] = (lambda v=v: nb.impl(f"numba_{v}"), True, lambda o: None)
    if not args.no_jax:
        def jax_sync(o):
            import jax
            jax.block_until_ready(o)
        peers["jax"] = (lambda: nb.impl("jax"), False, jax_sync)
    for peer, (get, mutates, sync) in peers.items():
        try:
            fn = get()
            if fn is None:
                continue
            res[peer] = timed_peer(fn, sync, mutates)
        except Exception as e:                  # noqa: BLE001
            res[peer] = {"error": first_line(e)}
    return res


# ---------------------------------------------------------------------------- main
def peer_env(args) -> dict:
    import importlib.util as iu
    have = {m: iu.find_spec(m) is not None for m in ("numba", "jax")}
    return have


def run_kernel(args, H, name: str) -> dict:
    fd, path = tempfile.mkstemp(prefix=f"npb_{name}_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--worker-out", path,
           "--npbench", args.npbench, "--preset", args.preset, "--budget", str(args.budget),
           "--numba-variants", args.numba_variants]
    if args.harness:
        cmd += ["--harness", args.harness]
    for flag in ("no_numba", "no_jax"):
        if getattr(args, flag):
            cmd.append("--" + flag.replace("_", "-"))
    env = H.thread_env(args.threads, {"JAX_ENABLE_X64": "1"})
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    ncpu = os.cpu_count() or args.threads
    pin = (lambda: os.sched_setaffinity(0, set(range(args.threads)))) if args.threads < ncpu else None
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, timeout=args.timeout, preexec_fn=pin,
                              capture_output=True, text=True)
        if proc.returncode == 0:
            with open(path) as f:
                res = json.load(f)
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            res = {"kernel": name, "status": f"worker exited {proc.returncode}: "
                   + (tail[-1][:160] if tail else "")}
    except subprocess.TimeoutExpired:
        res = {"kernel": name, "status": f"timeout after {args.timeout} s"}
    finally:
        os.unlink(path)
    res["wall_s"] = time.perf_counter() - t0
    return res


def fmt_t(s):
    if s is None:
        return "-"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def table(results: list, args) -> str:
    lines = ["| kernel | status | relaxjax | NumPy | best numba / jax | NumPy / rj | best peer / rj "
             "| compile s | compiles (3 sizes) | eager |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    vs_np, vs_best, comp, once = [], [], [], 0
    for r in results:
        rj_ = r.get("relaxjax", {})
        t = rj_.get("median_s")
        npy = r.get("numpy", {}).get("median_s")
        best, best_name = None, "-"
        for peer, d in r.items():
            if (peer.startswith("numba") or peer == "jax") and isinstance(d, dict) \
                    and d.get("median_s") and (best is None or d["median_s"] < best):
                best, best_name = d["median_s"], peer
        ok = r.get("status") == "ok"
        rn = npy / t if ok and npy and t else None
        rb = best / t if ok and best and t else None
        if ok:
            vs_np.append(rn)
            vs_best.append(rb)
            comp.append(rj_.get("compile_s"))
            once += rj_.get("compiles") == 1
        status = r.get("status", "?").replace("|", "/")
        c = rj_.get("compile_s")
        cells = [r["kernel"], status, fmt_t(t) if ok else "-", fmt_t(npy),
                 f"{fmt_t(best)} ({best_name})", f"{rn:.2f}" if rn else "-",
                 f"{rb:.2f}" if rb else "-", f"{c:.2f}" if ok and c is not None else "-",
                 str(rj_.get("compiles", "-")) if ok else "-", r.get("eager", "")]
        lines.append("| " + " | ".join(cells) + " |")
    n_ok = sum(r.get("status") == "ok" for r in results)
    g_np, g_best = geomean(vs_np), geomean(vs_best)
    lines += ["", f"- correct: {n_ok} of {len(results)} kernels "
              f"({100.0 * n_ok / max(len(results), 1):.0f} %)",
              f"- geomean NumPy / relaxjax over the correct kernels: "
              f"{f'{g_np:.2f}x' if g_np else '-'}",
              f"- geomean best of numba and jax / relaxjax: {f'{g_best:.2f}x' if g_best else '-'}",
              f"- compile (first call - median) <= 1 s: "
              f"{sum(c is not None and c <= 1.0 for c in comp)} of {len(comp)}; "
              f"median {sorted(comp)[len(comp) // 2]:.2f} s" if comp else "- compile: -",
              f"- one compile across the three sizes: {once} of {n_ok}"]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--npbench", required=True, help="a checkout of spcl/npbench")
    p.add_argument("--preset", default="S", choices=["S", "M", "L", "paper"])
    p.add_argument("--kernels", default="", help="comma-separated names (default: all)")
    p.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    p.add_argument("--out", help="markdown file (the JSON goes beside it)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget", type=float, default=0.5, help="timing seconds per peer")
    p.add_argument("--timeout", type=int, default=600, help="seconds per kernel")
    p.add_argument("--numba-variants", default="n,npr",
                   help="NPBench's numba variants to time (n, np, npr; the best counts)")
    p.add_argument("--no-numba", action="store_true")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--harness", help="path of the shared bench_peers.py")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.npbench = os.path.abspath(os.path.expanduser(args.npbench))
    if not os.path.isdir(os.path.join(args.npbench, "bench_info")):
        sys.exit(f"npbench_suite.py: {args.npbench} is not an NPBench checkout (no bench_info/)")
    if args.worker:
        res = worker(args)
        with open(args.worker_out, "w") as f:
            json.dump(res, f, default=str)
        return

    sys.path[:0] = [REPO, HERE]
    H = load_harness(args.harness)
    import npbench_kernels as K
    have = peer_env(args)
    for m, ok in have.items():
        if not ok:
            print(f"note: {m} does not import; its column is empty", file=sys.stderr)
            setattr(args, f"no_{m}", True)
    names = [n for n in args.kernels.split(",") if n] or sorted(K.KERNELS)
    unknown = [n for n in names if n not in K.KERNELS]
    if unknown:
        sys.exit(f"npbench_suite.py: unknown kernel(s) {', '.join(unknown)}")
    burner = None
    if args.busy:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    results = []
    try:
        for name in names:
            r = run_kernel(args, H, name)
            rj_ = r.get("relaxjax", {})
            print(f"{name:26s} {r.get('status', '?')[:70]:70s} {fmt_t(rj_.get('median_s'))} "
                  f"({r['wall_s']:.0f} s)", file=sys.stderr, flush=True)
            results.append(r)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    md = (f"NPBench preset {args.preset}, {args.threads} threads"
          f"{', one core busy' if args.busy else ''}, {time.strftime('%Y-%m-%d')}\n\n"
          + table(results, args))
    write_report(md, args.out, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
