"""relaxjax against NumPy, numba, jax and torch on the five workloads of the shared peer
benchmark, in one run of its harness (``bench_peers.py``), plus a table of relaxjax's
ratio to every peer.

    python benchmarks/peers.py                      # full run: limits probes + n = 64, 1024, 16384
    python benchmarks/peers.py --quick              # smoke test (n = 64, 256)
    python benchmarks/peers.py --peers numpy,jax --workloads W1,W4 --out rj.json

The harness is ``--harness PATH``, else ``$RELAXJAX_BENCH_HARNESS``, else
``../shared/bench/bench_peers.py`` next to the repository.  It runs every peer in its own
subprocess with threads pinned (``--threads``, default 2); this script adds relaxjax
through ``benchmarks/relaxjax_plugin.py`` and keeps the peers importable in this
interpreter (each skipped one is named).  It prints the harness's tables, then one row per
workload and size: relaxjax's median, its share of the machine limit (W1-W3: copy
bandwidth of the cache tier the minimum traffic fits in; W4/W5: best sgemm GFLOP/s), its
share of the harness's roofline-style floor, its first call, and peer median / relaxjax
median for each peer (> 1: relaxjax is faster).

A full run measures the machine's limits first (a few minutes); ``--reuse-limits FILE``
takes them from an earlier results JSON instead.  ``--quick`` measures none, so it reuses
the harness's ``baseline-*.json`` when one sits beside it.  Other options are passed to the
harness unchanged (e.g. ``--budget 0.3``, ``--rounds 2``).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PLUGIN = os.path.join(HERE, "relaxjax_plugin.py")
# peer name -> (harness worker, modules it imports)
PEERS = {
    "numpy": ("numpy", ["numpy"]),
    "numba": ("numba", ["numba"]),
    "jax": ("jax", ["jax", "jaxlib"]),
    "torch": ("torch", ["torch"]),
    "torch.sdpa": ("torch", ["torch"]),          # timed by the torch worker (W5 only)
    "torch.compile": ("torch.compile", ["torch"]),
}
DEFAULT_PEERS = list(PEERS)
ORDER = ["numpy", "numba", "jax", "torch", "torch.sdpa", "torch.compile"]
NOISY = 0.3     # as the harness: other processes used more cores than this while timing


def find_harness(arg: str | None) -> str:
    for cand, how in ((arg, "--harness"), (os.environ.get("RELAXJAX_BENCH_HARNESS"),
                                           "$RELAXJAX_BENCH_HARNESS")):
        if cand:
            if not os.path.isfile(cand):
                sys.exit(f"peers.py: {how} = {cand!r} is not a file")
            return os.path.abspath(cand)
    default = os.path.join(os.path.dirname(REPO), "shared", "bench", "bench_peers.py")
    if not os.path.isfile(default):
        sys.exit(f"peers.py: the peer harness bench_peers.py was not found at {default}.\n"
                 f"Pass --harness /path/to/bench_peers.py or set RELAXJAX_BENCH_HARNESS.")
    return default


def importable(modules: list[str]) -> dict:
    """{module: None if it imports in this interpreter, else the error} (one subprocess,
    so a module that crashes on import does not take this script down)."""
    code = ("import importlib, json, sys\nout = {}\n"
            "for m in sys.argv[1:]:\n"
            "    try:\n        importlib.import_module(m); out[m] = None\n"
            "    except BaseException as e:\n        out[m] = f'{type(e).__name__}: {e}'[:200]\n"
            "print(json.dumps(out))\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                       env=env, timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {m: f"import check failed: {r.stderr.strip()[-200:]}" for m in modules}


def select_peers(requested: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(harness workers to run, peer names expected in the results, notes)."""
    unknown = [p for p in requested if p not in PEERS and p != "relaxjax"]
    if unknown:
        sys.exit(f"peers.py: unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    wanted = [p for p in requested if p != "relaxjax"]
    mods = sorted({m for p in wanted for m in PEERS[p][1]} | {"relaxjax", "numpy"})
    status = importable(mods)
    if status.get("relaxjax"):
        sys.exit(f"peers.py: relaxjax does not import in {sys.executable}: {status['relaxjax']}")
    workers, names, notes = [], [], []
    for p in wanted:
        worker, need = PEERS[p]
        bad = [f"{m} ({status[m]})" for m in need if status.get(m)]
        if not bad and p == "torch.compile" and not (shutil.which("c++") or shutil.which("g++")):
            bad = ["a C++ compiler (inductor's CPU backend needs one)"]
        if bad:
            notes.append(f"note: skipping peer {p}: cannot import " + ", ".join(bad))
            continue
        names.append(p)
        if worker not in workers:
            workers.append(worker)
    if "torch.sdpa" in names and "torch" not in names:
        names.append("torch")
        notes.append("note: torch.sdpa is timed by the harness's torch worker, which also times "
                     "eager torch")
    return workers + ["relaxjax"], names, notes


def fmt_t(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def ratio_table(res: dict) -> str:
    """One row per (workload, size): relaxjax's median, % of limit and floor, first call,
    and peer median / relaxjax median for every peer."""
    cases = {(c["workload"], c["size"], c["peer"]): c for c in res.get("cases", [])}
    peers = [p for p in ORDER if any(k[2] == p for k in cases)]
    peers += sorted({k[2] for k in cases} - set(peers) - {"relaxjax"})
    keys = sorted({(k[0], k[1]) for k in cases}, key=lambda k: (k[0], k[1]))
    hdr = ["wl", "n/s", "relaxjax median", "% limit (tier)", "% floor", "1st call"] + \
        [f"{p} / rj" for p in peers]
    rows = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    logs: dict = {p: [] for p in peers}
    for wl, n in keys:
        rj = cases.get((wl, n, "relaxjax"))
        if rj is None or "median_s" not in rj:
            err = (rj or {}).get("error", "not run")
            rows.append(f"| {wl} | {n} | ERROR: {err[:60]} |" + " |" * (len(hdr) - 3))
            continue
        lim = (f"{rj['pct_limit']:.0f}% ({rj['limit_tier']})"
               if rj.get("pct_limit") is not None else "-")
        flo = f"{rj['pct_floor']:.0f}%" if rj.get("pct_floor") is not None else "-"
        noisy = "†" if rj.get("bg_cores", 0) > NOISY else ""
        cells = [wl, str(n), fmt_t(rj["median_s"]) + noisy, lim, flo, fmt_t(rj.get("first_call_s"))]
        for p in peers:
            c = cases.get((wl, n, p))
            if c is None:
                cells.append("")
            elif "median_s" not in c:
                cells.append("ERR")
            else:
                r = c["median_s"] / rj["median_s"]
                logs[p].append(math.log(r))
                cells.append(f"{r:.2f}")
        rows.append("| " + " | ".join(cells) + " |")
    geo = ["geomean", "", "", "", "", ""] + [
        f"{math.exp(sum(v) / len(v)):.2f} ({sum(x > 0 for x in v)}/{len(v)} won)" if v else ""
        for v in (logs[p] for p in peers)]
    rows.append("| " + " | ".join(geo) + " |")
    return "\n".join(rows)


def limits_line(res: dict, reuse: str | None) -> str:
    lim = res.get("limits") or {}
    bw = lim.get("bandwidth_gbps") or {}
    if not bw and not lim.get("matmul_peak_gflops"):
        return "No machine limits in this run (--quick without a baseline): % columns are '-'."
    src, warn = reuse, ""
    if reuse:
        try:
            with open(reuse) as f:
                old = json.load(f).get("meta", {})
            now = res.get("meta", {})
            keys = ("cpu_model", "cpu_count", "avx512f", "avx2")
            if any(old.get(k) != now.get(k) for k in keys):
                warn = ("\nWARNING: the reused limits come from another machine kind ("
                        + ", ".join(f"{k} {old.get(k)} there, {now.get(k)} here" for k in keys
                                    if old.get(k) != now.get(k))
                        + "): read the % columns as rough.")
        except (OSError, ValueError):
            pass
    parts = [f"{t} {v:.1f} GB/s" for t, v in bw.items()]
    if lim.get("matmul_peak_gflops"):
        parts.append(f"sgemm {lim['matmul_peak_gflops']:.0f} GFLOP/s "
                     f"({lim.get('matmul_peak_source')})")
    return ("Limits: " + ", ".join(parts)
            + (f" (reused from {src})" if src else " (measured in this run)") + warn)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: small sizes, no limit probes")
    ap.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                    help=f"comma-separated, from {','.join(PEERS)} (relaxjax is always run)")
    ap.add_argument("--workloads", default="W1,W2,W3,W4,W5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--harness", default=None, help="path to bench_peers.py")
    ap.add_argument("--out", default=None,
                    help="results JSON (the harness writes a .md beside it); default: a new file "
                         "in the temp dir")
    ap.add_argument("--reuse-limits", default=None,
                    help="take the machine limits from this earlier results JSON")
    args, passthrough = ap.parse_known_args(argv)

    harness = find_harness(args.harness)
    requested = [p.strip() for p in args.peers.split(",") if p.strip()]
    workers, names, notes = select_peers(requested)
    for n in notes:
        print(n, flush=True)
    reuse = args.reuse_limits
    if reuse is None and args.quick:
        base = sorted(glob.glob(os.path.join(os.path.dirname(harness), "baseline-*.json")))
        if base:
            reuse = base[-1]
            print(f"note: --quick measures no limits; using those of {reuse}", flush=True)
    out = args.out or os.path.join(tempfile.gettempdir(),
                                   time.strftime("relaxjax-peers-%Y%m%d-%H%M%S.json"))
    out = os.path.abspath(out)
    cmd = [sys.executable, harness, "--peers", ",".join(workers), "--workloads", args.workloads,
           "--threads", str(args.threads), "--plugin", f"relaxjax={PLUGIN}:build", "--out", out]
    if args.quick:
        cmd.append("--quick")
    if reuse:
        cmd += ["--reuse-limits", os.path.abspath(reuse)]
    cmd += passthrough
    env = dict(os.environ)
    # the workers import this checkout's relaxjax even where it is not installed
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    print("running: " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0 or not os.path.isfile(out):
        sys.exit(f"peers.py: the harness exited with {r.returncode}")
    with open(out) as f:
        res = json.load(f)
    missing = [p for p in names if not any(c["peer"] == p for c in res.get("cases", []))]
    if missing:
        print(f"note: no results for {', '.join(missing)} (see the harness output above)")
    print("\n## relaxjax against each peer (peer median / relaxjax median; > 1: relaxjax is "
          "faster)\n")
    print(limits_line(res, reuse and os.path.abspath(reuse)) + "\n")
    print(ratio_table(res))
    print(f"\n† other processes used more than {NOISY} cores while relaxjax was timed; the "
          f"harness's Noise table has each worker's figure.")
    print(f"\nresults: {out} (and {os.path.splitext(out)[0]}.md); compare two runs with "
          f"`python {harness} --compare A.json B.json`")


if __name__ == "__main__":
    main()
