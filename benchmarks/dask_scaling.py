"""Dask scaling: a compute-bound chunked workload on 1 and 2 workers, relaxjax against NumPy
and ``jax.jit`` mapped over the chunks the same way.

The workload is ``examples/dask_stencil.py``'s: a periodic n x n plate cut into ragged chunks
(equal ones and a short last one per axis), each chunk extended by a halo of ``steps`` cells
(``map_overlap``, periodic) and stepped ``steps`` times (explicit heat equation, 5-point
Laplacian) in one call per chunk, the halo then trimmed.  A chunk's call sweeps its block
(8 MB at the default size, in the last-level cache; 1-2 MB blocks, in L2, ran only 20% faster
per update) ``steps`` times, so the work of a chunk is arithmetic on cached data, not DRAM
traffic, and scales with the cores that run chunks at once.  Peers, each one call per chunk:

- ``relaxjax``: ``relaxjax.dask.map_overlap`` of an ``rj.jit`` function (``fori_loop`` of
  ``steps`` steps), each kernel on one thread while Dask runs it (``kernel_threads=1``);
- ``numpy``: the same steps in NumPy slices (a Python loop), ``da.map_overlap``;
- ``jax``: ``jax.jit`` of the same function (``lax.fori_loop``, float64), ``da.map_overlap``;
  XLA's own threads off (``XLA_FLAGS``), so that Dask's threads are the parallelism for all.

Schedulers: the threaded scheduler with 1 and 2 threads (one process), and a ``distributed``
LocalCluster of 1 and 2 worker processes of one thread each (loopback).  Per (scheduler,
peer): the first run (compiles included), the median of ``--repeats`` more, the speedup from
1 to 2 workers, and compiles per process (relaxjax: ``relaxjax.dask.compile_counts``;
jax: its jitted function's cache size, one per distinct block shape).  The first run
returns the whole plate, checked against NumPy on the whole grid (float64); the timed runs
compute its sum.  The chunk functions live in this module, which workers import (not in
``__main__``), so each worker process holds one jax.jit function, as it holds one relaxjax
Jitted.  Dask's own work is part of every time: NumPy's and jax's ``da.map_overlap`` builds
about 300 tasks for 9 blocks (periodic halos are slices and concatenations), relaxjax's
``map_overlap`` one per block (it reads the neighbouring blocks whole where the halo is as
deep as a chunk is long: ``relaxjax/dask_halo.py``) plus the sum's; on a LocalCluster on 2
cores each task costs the scheduler about a millisecond of serial work.

    python benchmarks/dask_scaling.py                  # n 1900, chunks of 800, 96 steps, 3 repeats (2-3 min)
    python benchmarks/dask_scaling.py --quick          # n 400, chunks of 120, a minute or less
    python benchmarks/dask_scaling.py --peers relaxjax,numpy --out dask.md

jax comes from the interpreter's environment (``.venv-bench``, with dask and distributed
installed there, relaxjax on ``PYTHONPATH``); where it does not import, that peer is skipped
with a note.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

# XLA's intra-op threads off before jax is imported, here and in the worker processes
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402

import relaxjax as rj  # noqa: E402
import relaxjax.dask as rjd  # noqa: E402
from relaxjax.lax import fori_loop  # noqa: E402

from batch_sizes import busy_cpu_s  # noqa: E402
from report import write_report  # noqa: E402

R = 0.2
try:
    import jax
    jax.config.update("jax_enable_x64", True)
except ImportError:                          # reported when the jax peer is asked for
    jax = None


def _step(u, xp_at):
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    return xp_at(u, R * lap)


def _heat_relaxjax(u, steps):
    return fori_loop(0, steps, lambda _, u: _step(u, lambda u, d: u.at[1:-1, 1:-1].add(d)), u)


heat_relaxjax = rj.jit(_heat_relaxjax)


def heat_numpy(u, steps):
    u = u.copy()
    for _ in range(int(steps)):
        u[1:-1, 1:-1] += R * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1])
    return u


if jax is not None:
    heat_jax_jit = jax.jit(lambda u, steps: jax.lax.fori_loop(
        0, steps, lambda _, u: _step(u, lambda u, d: u.at[1:-1, 1:-1].add(d)), u))


def heat_jax(u, steps):
    return np.asarray(heat_jax_jit(u, steps))


def jax_compiles() -> int:
    """This process's compiles of the jax peer (its jitted function's cache entries)."""
    return heat_jax_jit._cache_size()


def whole_plate_numpy(u, steps):
    """The oracle: `steps` periodic steps on the whole grid."""
    u = u.copy()
    for _ in range(steps):
        u += R * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4.0 * u)
    return u


def own_cpu_s() -> float:
    """CPU seconds this process and its children (the cluster's workers) have used."""
    import psutil                              # a dependency of distributed
    procs = [psutil.Process()]
    procs += procs[0].children(recursive=True)
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:                   # gone meanwhile
            pass
    return total


def background_cores(window: float = 0.5) -> float:
    """Cores that other processes use, over ``window`` seconds."""
    b0, o0, t0 = busy_cpu_s(), own_cpu_s(), time.perf_counter()
    time.sleep(window)
    return max(0.0, busy_cpu_s() - b0 - (own_cpu_s() - o0)) / (time.perf_counter() - t0)


def wait_quiet(threshold: float, max_wait: float) -> float:
    """Wait up to ``max_wait`` s while other processes use more than ``threshold`` cores."""
    t0 = time.perf_counter()
    while max_wait > 0 and background_cores() > threshold and time.perf_counter() - t0 < max_wait:
        pass
    return time.perf_counter() - t0


def ragged(size: int, chunk: int) -> tuple:
    return (chunk,) * (size // chunk) + ((size % chunk,) if size % chunk else ())


def graph(mod, peer: str, x: "da.Array", steps: int) -> "da.Array":
    """The peer's plate after `steps` steps, as a Dask array (one map_overlap)."""
    if peer == "relaxjax":
        return rjd.map_overlap(mod.heat_relaxjax, x, steps, "periodic", result="extended",
                               extra_args=(steps,))
    fn = {"numpy": mod.heat_numpy, "jax": mod.heat_jax}[peer]
    return da.map_overlap(fn, x, depth=steps, boundary="periodic", trim=True, steps=steps,
                          dtype=x.dtype, meta=np.empty((0, 0), x.dtype))


def run_config(mod, kind: str, workers: int, peers: list, u0: np.ndarray, chunks, steps: int,
               args, want: np.ndarray) -> list[dict]:
    rows = []
    client = cluster = None
    if kind == "cluster":
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address="127.0.0.1:0")
        client = Client(cluster)
        # the plate goes to the workers once, in the graph of this persist (not timed)
        warnings.filterwarnings("ignore", message=".*Sending large graph.*")
        compute = lambda *a: dask.compute(*a)                                      # noqa: E731
        x = da.from_array(u0, chunks=chunks).persist()
    else:
        compute = lambda *a: dask.compute(*a, scheduler="threads", num_workers=workers)  # noqa: E731
        x = da.from_array(u0, chunks=chunks)
    try:
        for peer in peers:
            y = graph(mod, peer, x, steps)
            waited = wait_quiet(args.quiet_threshold, args.quiet_max_wait)
            t0 = time.perf_counter()
            (plate,) = compute(y)
            first = time.perf_counter() - t0
            err = float(np.abs(plate - want).max())
            assert err < 1e-9, (peer, kind, err)
            times = []
            b0, o0, w0 = busy_cpu_s(), own_cpu_s(), time.perf_counter()
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                compute(y.sum())
                times.append(time.perf_counter() - t0)
            bg = max(0.0, busy_cpu_s() - b0 - (own_cpu_s() - o0)) / (time.perf_counter() - w0)
            if peer == "relaxjax":
                counts = rjd.compile_counts(client, mod.heat_relaxjax)
                compiles = [c["_heat_relaxjax"] for c in counts.values()]
            elif peer == "jax":
                compiles = list(client.run(mod.jax_compiles).values()) if client else [mod.jax_compiles()]
            else:
                compiles = []
            rows.append(dict(scheduler=kind, workers=workers, peer=peer, first_s=first,
                             median_s=statistics.median(times), times=times, err=err, compiles=compiles,
                             bg_cores=bg, quiet_wait_s=waited))
            print(f"== {kind} x{workers} {peer}: first {first:.3f} s, median "
                  f"{rows[-1]['median_s']:.3f} s, compiles {compiles}, other processes used "
                  f"{bg:.2f} cores", file=sys.stderr, flush=True)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    return rows


def report(rows: list[dict], args, shapes: int, notes: list[str]) -> str:
    out = [f"## Dask scaling: periodic heat plate {args.n} x {args.n}, chunks of {args.chunk} "
           f"(ragged), halo = steps = {args.steps}, {shapes} distinct block shapes",
           "", f"median of {args.repeats} runs after a first run (compiles included); "
           f"compiles: per process that ran chunks", "",
           "| scheduler | peer | 1 worker: first s | median s | 2 workers: first s | median s "
           "| speedup 1 -> 2 | compiles per process (1 / 2 workers) | other processes' cores (1 / 2) |",
           "|---|---|---|---|---|---|---|---|---|"]
    by = {(r["scheduler"], r["workers"], r["peer"]): r for r in rows}
    for kind in ("threads", "cluster"):
        for peer in args.peers:
            one, two = by.get((kind, 1, peer)), by.get((kind, 2, peer))
            if one is None or two is None:
                continue
            cc = " / ".join(",".join(map(str, r["compiles"])) or "-" for r in (one, two))
            out.append(f"| {kind} | {peer} | {one['first_s']:.3f} | {one['median_s']:.3f} | "
                       f"{two['first_s']:.3f} | {two['median_s']:.3f} | "
                       f"{one['median_s'] / two['median_s']:.2f}x | {cc} | "
                       f"{one['bg_cores']:.2f} / {two['bg_cores']:.2f} |")
    for kind in ("threads", "cluster"):
        for w in (1, 2):
            base = by.get((kind, w, "relaxjax"))
            if base:
                ratios = ", ".join(f"{p} {by[(kind, w, p)]['median_s'] / base['median_s']:.1f}x"
                                   for p in args.peers if p != "relaxjax" and (kind, w, p) in by)
                if ratios:
                    out.append(f"\n{kind}, {w} worker(s): peer median / relaxjax median: {ratios}")
    out += [""] + [f"note: {n}" for n in notes]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1900)
    ap.add_argument("--chunk", type=int, default=800)
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default="relaxjax,numpy,jax")
    ap.add_argument("--schedulers", default="threads,cluster")
    ap.add_argument("--quiet-threshold", type=float, default=0.3,
                    help="before each row, wait while other processes use more cores than this")
    ap.add_argument("--quiet-max-wait", type=float, default=20.0, help="... for at most this many s (0: never)")
    ap.add_argument("--quick", action="store_true", help="n 400, chunks of 120, 8 steps, 2 repeats")
    ap.add_argument("--out", default=None, help="write the report (and JSON) there")
    args = ap.parse_args()
    if args.quick:
        args.n, args.chunk, args.steps, args.repeats = 400, 120, 8, 2
    args.peers = [p for p in args.peers.split(",") if p]
    notes = [f"{os.cpu_count()} cores; load average (1 min) when the run started "
             f"{os.getloadavg()[0]:.2f}: another engineer's tests and benchmarks share this machine"]
    if "jax" in args.peers and jax is None:
        args.peers.remove("jax")
        notes.append(f"jax skipped: it does not import in {sys.executable}")
    unknown = set(args.peers) - {"relaxjax", "numpy", "jax"}
    if unknown:
        ap.error(f"--peers: unknown {sorted(unknown)}")
    # the chunk functions as the workers import them (by reference, not from __main__)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dask_scaling as mod
    u0 = 20.0 * np.random.default_rng(0).random((args.n, args.n))
    u0[args.n // 3: args.n // 2, args.n // 4: args.n // 2] += 500.0
    chunks = (ragged(args.n, args.chunk),) * 2
    want = whole_plate_numpy(u0, args.steps)
    shapes = len({c + 2 * args.steps for c in chunks[0]}) ** 2
    rows = []
    for kind in args.schedulers.split(","):
        for workers in (1, 2):
            rows += run_config(mod, kind, workers, args.peers, u0, chunks, args.steps, args, want)
    write_report(report(rows, args, shapes, notes), args.out, rows)


if __name__ == "__main__":
    main()
