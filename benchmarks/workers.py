"""One cold worker process per benchmark row, shared by ``decode.py`` and ``ragged.py``.

A row's peer runs in a fresh process (its compiles counted), with an empty relaxjax cache,
``threads`` BLAS/OpenMP threads, pinned to the first ``threads`` cores when the machine has
more, after waiting (up to ``quiet_max_wait`` s) for the machine to go quiet.  The worker
writes its result as JSON to the path given after ``--worker-out``; the other processes' CPU
use while it ran is recorded as ``bg_cores`` so noisy rows can be marked.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from batch_sizes import busy_cpu_s, children_cpu_s, wait_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cold_worker(script: str, args: list[str], *, python: str, threads: int, timeout: float,
                    quiet_threshold: float, quiet_max_wait: float, label: str, row: dict,
                    error_tail: int, env_in_tmp: dict[str, str] | None = None,
                    env: dict[str, str] | None = None,
                    drop_env: tuple[str, ...] = ()) -> tuple[dict, subprocess.CompletedProcess | None]:
    """Run ``python script *args --worker-out <tmp>/result.json`` cold and return its result
    (or ``row`` with an ``error``: a timeout, or the last ``error_tail`` characters of its
    output) with ``process_s``, ``bg_cores`` and ``quiet_wait_s`` added, and the finished
    process (None when it timed out or did not start).  ``env_in_tmp`` names variables set to
    fresh directories inside the row's temporary folder (a peer's own compile cache)."""
    tmp = tempfile.mkdtemp(prefix="rj-worker-")
    child_env = dict(os.environ, RELAXJAX_CACHE_DIR=os.path.join(tmp, "rj"),
                     PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child_env.update({k: os.path.join(tmp, sub) for k, sub in (env_in_tmp or {}).items()})
    child_env.update(env or {})
    for k in ("RELAXJAX_CACHE",) + tuple(drop_env):
        child_env.pop(k, None)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        child_env[k] = str(threads)
    ncpu = os.cpu_count() or threads
    pin = (lambda: os.sched_setaffinity(0, set(range(threads)))) if threads < ncpu else None
    result_path = os.path.join(tmp, "result.json")
    cmd = [python, script, *args, "--worker-out", result_path]
    waited = wait_quiet(quiet_threshold, quiet_max_wait) if quiet_max_wait else 0.0
    print(f"== {label} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    b0, c0 = busy_cpu_s(), children_cpu_s()
    out = None
    try:
        out = subprocess.run(cmd, env=child_env, preexec_fn=pin, capture_output=True, text=True,
                             timeout=timeout)
        with open(result_path) as f:
            res = json.load(f)
    except subprocess.TimeoutExpired:
        res = dict(row, error=f"timed out after {timeout} s")
    except (OSError, ValueError) as e:
        msg = (out.stderr or out.stdout) if out is not None else repr(e)
        res = dict(row, error=msg[-error_tail:] or f"worker exited {out.returncode}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["process_s"] = wall = time.perf_counter() - t0
    res["bg_cores"] = max(0.0, busy_cpu_s() - b0 - (children_cpu_s() - c0)) / wall
    res["quiet_wait_s"] = waited
    return res, out
