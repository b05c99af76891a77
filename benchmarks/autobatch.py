"""Auto-batching (issue 21): models written for one instance in plain Python over trees,
sentences and lattices, run per instance or batched across instances.

    python benchmarks/autobatch.py                          # 3 workloads, 64 instances, 2 threads
    python benchmarks/autobatch.py --quick                  # small cells, 16 instances (seconds)
    python benchmarks/autobatch.py --threads 1,2 --torch-python .venv-bench/bin/python --out ab.md
    python benchmarks/autobatch.py --workloads tree,lattice --repeats 5

Workloads (``examples/autobatch_models.py``, float32, seed 0; ``examples/`` is put on
``sys.path``): ``tree``, the binary TreeLSTM of ``examples/tree_lstm.py`` (hidden 256) over
64 random binary trees with SST-like sizes; ``bilstm``, a BiLSTM tagger (embeddings 64,
hidden 128, 16 tags) over 64 sentences of lognormal lengths (about 20 words); ``lattice``,
a lattice LSTM (embeddings 64, hidden 128) over 64 random lattices (a character chain with
words of 2-4 characters: three cells); ``exits``, an early-exit classifier (Berxit-like:
12 residual layers of width 128, after each a 4-class head; an instance exits at the first
layer whose top class probability exceeds 0.9, after about 6 layers on average), written as
a generator that yields the confidence.  Peers, per workload:

- ``numpy``: the model's NumPy twin, one instance at a time (eager);
- ``rj.jit``: the model's ``@rj.jit`` cells called one instance at a time (no batching; for
  ``exits``, the plain-function version testing ``float(conf)``);
- ``by hand``: NumPy batched by hand (the TreeLSTM level by level, the tagger step by step
  over the sentences still running, longest first, the classifier layer by layer over the
  instances not exited yet); none for the lattice;
- ``torch``: the NumPy twin's math on torch tensors, eager, one instance at a time, in a
  process of ``--torch-python`` (skipped without it or where torch does not import);
- ``autobatch <policy>``: ``rj.autobatch(model, policy)`` with the memory layout on (for
  ``exits``, the generator: every instance suspended at its test, one flush per layer);
- ``autobatch depth, host gathers``: ``scatter=False``, every operand gathered on the host
  before the batched call (a slice or ``np.take``), not read through index arrays inside
  it (absent when the relaxjax measured has no ``scatter``: an older tree on PYTHONPATH);
- ``autobatch <policy> float()`` (``exits`` only): the plain-function version autobatched,
  each ``float(conf)`` running everything recorded so far (one instance's nodes at a time).

Each thread count runs in a fresh worker process (``*_NUM_THREADS``, relaxjax's
``set_num_threads``, pinned when the machine has more cores; ``workers.run_cold_worker``).
Per peer: the first pass over the instances (compiles and the fsm's training included),
then ``--repeats`` passes: ms per pass, the best and the median, and instances/s from the
best (the record/plan/run split and the counts are the mean over those passes); speedups
against NumPy per instance and against the hand-batched version (best passes); batches
launched per pass; gather KB per pass (bytes copied to build batch operands, on the host
and by the batched cells) with the layout and, from one more pass with ``layout=False``,
without it; operands sliced, gathered and indexed (read through an index array inside the
batched cell); compiles (relaxjax: of the batched cells for autobatch,
of the cells for ``rj.jit``); the record/plan/run split of an autobatch pass per node; max
abs error against NumPy float64 per instance.  bg cores: CPU other processes used while the
worker ran (the machine may be busy; above 0.3 the times are suspect).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time

import numpy as np

from report import write_report
from workers import run_cold_worker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKLOADS = ("tree", "bilstm", "lattice", "exits")
POLICIES = ("depth", "agenda", "fsm")
FULL = {"tree": dict(hidden=256, count=64), "bilstm": dict(hidden=128, count=64),
        "lattice": dict(hidden=128, count=64), "exits": dict(hidden=128, count=64)}
QUICK = {name: dict(hidden=16, count=16) for name in WORKLOADS}
NOISY = 0.3
TOLERANCE = 1e-3


def models():
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import autobatch_models
    return autobatch_models


def workload(name: str, quick: bool, dtype=np.float32):
    return models().WORKLOADS[name](np.random.default_rng(0), dtype=dtype, **(QUICK if quick else FULL)[name])


def max_err(name: str, got, want) -> float:
    if name == "bilstm":
        return max(float(np.abs(np.asarray(a, np.float64) - b).max()) for g, w in zip(got, want) for a, b in zip(g, w))
    if name == "exits":                       # an instance exiting elsewhere: an infinite error
        return max(float(np.abs(np.asarray(g[1], np.float64) - w[1]).max()) if g[0] == w[0] else float("inf")
                   for g, w in zip(got, want))
    return max(float(np.abs(np.asarray(g, np.float64) - w).max()) for g, w in zip(got, want))


def timed(fn, repeats: int):
    """(result, first pass s, best s, median s of the passes after the first)."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return out, first, min(times), float(np.median(times))


# ----------------------------------------------------------------------------- workers
def worker_relaxjax(a) -> list:
    import relaxjax as rj
    from relaxjax.backends.llvm import set_num_threads
    set_num_threads(a.threads)
    rows = []
    for name in a.workload_list:
        w = workload(name, a.quick)
        # the oracle: the same parameters and instances in float64
        w64 = workload(name, a.quick, np.float64)
        want = [w64.numpy(x) for x in w64.instances]
        nodes = w.nodes()
        base = dict(workload=name, instances=len(w.instances), nodes=nodes)

        peers = [("numpy", lambda: [w.numpy(x) for x in w.instances], None)]
        one = w.flushing or w.fn               # a plain function (exits: fn is a generator)
        peers.append(("rj.jit", lambda: [one(x) for x in w.instances], None))
        if w.by_hand is not None:
            peers.append(("by hand", lambda: w.by_hand(w.instances), None))
        for policy in POLICIES:
            peers.append((f"autobatch {policy}", w.fn, policy))
        if "scatter" in inspect.signature(rj.autobatch).parameters:
            peers.append(("autobatch depth, host gathers", w.fn, "depth/host"))
        if w.flushing is not None:
            for policy in POLICIES:
                peers.append((f"autobatch {policy} float()", w.flushing, policy))
        for peer, fn, policy in peers:
            row = dict(base, peer=peer)
            if policy is None:
                before = [c.cache_info().compiles for c in w.cells]
                out, first, best, median = timed(fn, a.repeats)
                if peer == "rj.jit":
                    row["compiles"] = sum(c.cache_info().compiles for c in w.cells) - sum(before)
            else:
                model = fn
                policy, _, host = policy.partition("/")
                opts = dict(scatter=False) if host else {}
                b = rj.autobatch(model, policy=policy, **opts)
                marks = []
                out, first, best, median = timed(lambda: (b(w.instances), marks.append(b.stats()))[0], a.repeats)
                s0, s = marks[0], marks[-1]                # after the first pass, after the last
                d = {k: (s.get(k, 0) - s0.get(k, 0)) / a.repeats
                     for k in ("batches", "gather_bytes", "operands_sliced", "operands_gathered", "operands_indexed",
                               "record_s", "plan_s", "run_s")}
                row.update(compiles=s["compiles"], batches=d["batches"], gather_kb=d["gather_bytes"] / 1024,
                           sliced=d["operands_sliced"], gathered=d["operands_gathered"],
                           indexed=d["operands_indexed"],
                           record_us=1e6 * d["record_s"] / nodes, plan_us=1e6 * d["plan_s"] / nodes,
                           run_us=1e6 * d["run_s"] / nodes, first_batches=s0["batches"])
                if policy == "fsm":
                    row["fsm_states"], row["fsm_fallbacks"] = s["fsm_states"], s["fsm_fallbacks"]
                flat = rj.autobatch(model, policy=policy, layout=False, policy_file=None, **opts)
                if policy == "fsm":                       # the same learned table, no layout
                    path = os.path.join(os.path.dirname(a.worker_out), f"fsm-{name}.json")
                    b.save_policy(path)
                    flat = rj.autobatch(model, policy="fsm", layout=False, policy_file=path, **opts)
                flat(w.instances)
                row["gather_kb_no_layout"] = flat.stats()["gather_bytes"] / 1024
            row.update(first_s=first, best_ms=1e3 * best, median_ms=1e3 * median, max_err=max_err(name, out, want))
            rows.append(row)
            print(f"   {name} {peer}: {1e3 * best:.1f} ms", file=sys.stderr, flush=True)
    return rows


def worker_torch(a) -> list:
    import torch
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    m = models()
    rows = []
    for name in a.workload_list:
        w = workload(name, a.quick)
        w64 = workload(name, a.quick, np.float64)
        want = [w64.numpy(x) for x in w64.instances]
        if name != "exits":
            p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in w.params.items()}
        if name == "tree":
            def one(t):
                def go(t):
                    if isinstance(t, tuple):
                        (hl, cl), (hr, cr) = go(t[0]), go(t[1])
                        return m.tree_lstm.node_math(hl, cl, hr, cr, p["wl"], p["wr"], p["b"], torch)
                    return m.tree_lstm.leaf_math(p["emb"][t], torch)
                return go(t)[0]
        elif name == "bilstm":
            def one(s):
                return m.bilstm(s, p, lambda *x: m.lstm_math(*x, torch), lambda *x: m.tag_math(*x, torch))
        elif name == "exits":
            p = {k: [torch.from_numpy(np.ascontiguousarray(v)) for v in vs] for k, vs in w.params.items()}

            def one(x):
                return m.early_exit_flushing(torch.from_numpy(x), p, m.EXIT_THRESHOLD,
                                             (lambda *a: m.exit_layer_math(*a, torch),
                                              lambda *a: m.exit_head_math(*a, torch)))
        else:
            def one(x):
                return m.lattice(x, p, (lambda *x: m.lstm_math(*x, torch), lambda *x: m.word_math(*x, torch),
                                        lambda *x: m.merge_math(*x, torch)))
        out, first, best, median = timed(lambda: [one(x) for x in w.instances], a.repeats)
        if name == "bilstm":
            out = [[t.numpy() for t in o] for o in out]
        elif name == "exits":
            out = [(k, t.numpy()) for k, t in out]
        else:
            out = [o.numpy() for o in out]
        rows.append(dict(workload=name, peer="torch", instances=len(w.instances), nodes=w.nodes(),
                         first_s=first, best_ms=1e3 * best, median_ms=1e3 * median, max_err=max_err(name, out, want)))
        print(f"   {name} torch: {1e3 * best:.1f} ms", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- driver
def run(kind: str, threads: int, a) -> list:
    args = ["--worker", kind, "--threads", str(threads), "--workloads", ",".join(a.workload_list),
            "--repeats", str(a.repeats)] + (["--quick"] if a.quick else [])
    res, _ = run_cold_worker(os.path.abspath(__file__), args, threads=threads, timeout=a.worker_timeout,
                             python=a.torch_python if kind == "torch" else sys.executable,
                             quiet_threshold=NOISY, quiet_max_wait=a.quiet_max_wait,
                             label=f"{kind}, {threads} threads", row={"peer": kind}, error_tail=2000)
    if "error" in res:
        print(f"   {kind} failed: {res['error'].strip().splitlines()[-1]}", file=sys.stderr)
        return [dict(peer=kind, workload=w, threads=threads, error=res["error"]) for w in a.workload_list]
    return [dict(r, threads=threads, bg_cores=res["bg_cores"]) for r in res["rows"]]


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def report(rows: list, a, wall: float) -> str:
    sizes = "--quick: hidden 16, 16 instances" if a.quick else "64 instances, sizes in the docstring"
    lines = [f"Auto-batching: {', '.join(a.workload_list)} ({sizes}); "
             f"float32; best of {a.repeats} passes after a first one (compiles, fsm training); one worker "
             f"process per thread count (and one for torch)."]
    for name in a.workload_list:
        for threads in a.thread_list:
            rs = [r for r in rows if r["workload"] == name and r["threads"] == threads]
            ok = [r for r in rs if "error" not in r]
            if not ok:
                continue
            r0 = ok[0]
            ref = next((r for r in ok if r["peer"] == "numpy"), None)
            hand = next((r for r in ok if r["peer"] == "by hand"), None)
            lines += ["", f"### {name}, {threads} thread{'s' if threads > 1 else ''}: {r0['instances']} instances, "
                      f"{r0['nodes']} cell calls per pass", "",
                      "| peer | ms/pass best / median | instances/s | vs numpy | vs by hand | batches "
                      "| gather KB (layout / none) | sliced / gathered / indexed operands | compiles | first pass s "
                      "| record / plan / run us per node | max err | bg cores |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in rs:
                if "error" in r:
                    lines.append(f"| {r['peer']} | failed: {r['error'].strip().splitlines()[-1][:200]} |")
                    continue
                ms = r["best_ms"]
                gkb = (f"{r['gather_kb']:.0f} / {r['gather_kb_no_layout']:.0f}" if "gather_kb" in r else "-")
                ops = f"{r['sliced']:.0f} / {r['gathered']:.0f} / {r['indexed']:.0f}" if "sliced" in r else "-"
                split = (f"{r['record_us']:.1f} / {r['plan_us']:.1f} / {r['run_us']:.1f}" if "record_us" in r else "-")
                err = f"{r['max_err']:.1e}" + ("" if r["max_err"] < TOLERANCE else " **FAIL**")
                lines.append(
                    f"| {r['peer']} | {ms:.1f} / {r['median_ms']:.1f} | {1e3 * r['instances'] / ms:.0f} | "
                    f"{fmt(ref and ref['best_ms'] / ms, '.2f')}x | {fmt(hand and hand['best_ms'] / ms, '.2f')}x | "
                    f"{fmt(r.get('batches'), '.0f')} | {gkb} | {ops} | {fmt(r.get('compiles'), 'd')} | "
                    f"{r['first_s']:.2f} | {split} | {err} | "
                    f"{r['bg_cores']:.2f}{' †' if r['bg_cores'] > NOISY else ''} |")
    lines += ["", f"vs numpy / vs by hand: that peer's time over this one's (> 1: faster), best passes; instances/s "
              f"from the best pass. gather KB: bytes copied "
              f"to build batch operands per pass (on the host and by the batched cells), with ED-Batch's layout and "
              f"without (the policy's order); operands sliced (views of an arena), gathered (copied) or indexed (read "
              f"through an index array inside the batched cell; host gathers: scatter=False). "
              f"compiles: autobatch's batched cells (one per cell and argument layout), rj.jit's cells. "
              f"†: other processes used more than {NOISY} cores meanwhile. Wall time {wall / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--threads", default="2", help="comma-separated thread counts, e.g. 1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="hidden 16, 16 instances")
    ap.add_argument("--torch-python", default=None, help="an interpreter with torch (else no torch row)")
    ap.add_argument("--worker-timeout", type=float, default=1800)
    ap.add_argument("--quiet-max-wait", type=float, default=10)
    ap.add_argument("--out", default=None, help="markdown report (and JSON beside it)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.workload_list = [w for w in a.workloads.split(",") if w]
    bad = [w for w in a.workload_list if w not in WORKLOADS]
    if bad:
        ap.error(f"--workloads: unknown {bad}; known: {', '.join(WORKLOADS)}")
    if a.worker:
        a.threads = int(a.threads)
        rows = worker_torch(a) if a.worker == "torch" else worker_relaxjax(a)
        with open(a.worker_out, "w") as f:
            json.dump({"rows": rows}, f)
        return
    a.thread_list = [int(t) for t in a.threads.split(",")]
    t0 = time.perf_counter()
    rows = []
    for threads in a.thread_list:
        rows += run("relaxjax", threads, a)
        if a.torch_python:
            rows += run("torch", threads, a)
    write_report(report(rows, a, time.perf_counter() - t0), a.out, rows)


if __name__ == "__main__":
    main()
