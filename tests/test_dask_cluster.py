"""Jitted functions on a ``distributed`` LocalCluster of 2 worker processes (issue 22), started
and closed here, loopback only: every task ships the function pickled, and each worker
process unpickles all those copies as one Jitted, so it compiles each function once, for
every chunk shape.  Checked: ``map_blocks``, ``relaxjax.dask.map_overlap`` and
``relaxjax.dask.reduction`` equal NumPy (float64) over hypothesis-drawn ragged chunkings
(chunks of 1 and primes); ``compile_counts`` reports exactly one compile per worker per
function; a Jitted goes to a worker and back; a worker killed mid-computation is replaced,
Dask retries its tasks and the result is still NumPy's; the example runs with ``--cluster``.
Skipped without dask and distributed (``pip install -e '.[test]'``)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

import relaxjax as rj  # noqa: E402
import relaxjax.dask as rjd  # noqa: E402
import relaxjax.numpy as rnp  # noqa: E402
from helpers import ragged_chunks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# the workers cannot import this test module: its functions travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client():
    # the scheduler's HTTP server starts even with dashboard_address=None (on port 8787,
    # taken when two clusters run at once): loopback, any free port
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0")
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def _workers(client) -> list[str]:
    client.wait_for_workers(2, timeout=60)
    return sorted(client.scheduler_info()["workers"])


def _elementwise(x):
    return rnp.tanh(x) * 2.0 + rnp.exp(-x * x) - x


def _elementwise_numpy(x):
    return np.tanh(x) * 2.0 + np.exp(-x * x) - x


def _laplacian(u):
    return u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]


def _sum_squares(b, axis):
    return rnp.sum(b * b, axis=axis, keepdims=True)


def _sum(b, axis):
    return rnp.sum(b, axis=axis, keepdims=True)


ELEMENTWISE, LAPLACIAN = rj.jit(_elementwise), rj.jit(_laplacian)
SUM_SQUARES, SUM = rj.jit(_sum_squares, static_argnums=1), rj.jit(_sum, static_argnums=1)
FUNCTIONS = (ELEMENTWISE, LAPLACIAN, SUM_SQUARES, SUM)


def _graphs(x: np.ndarray, chunks: tuple):
    """The three kinds of work on one chunking, with NumPy's results."""
    dx = da.from_array(x, chunks=chunks)
    mapped = dx.map_blocks(ELEMENTWISE, dtype=x.dtype)
    stencil = rjd.map_overlap(LAPLACIAN, dx, 1, "periodic")
    norms = rjd.reduction(SUM_SQUARES, SUM, dx, axis=1, split_every=2)
    want = (_elementwise_numpy(x), _laplacian(np.pad(x, 1, mode="wrap")), (x * x).sum(axis=1))
    return (mapped, stencil, norms), want


def _check(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@given(data=st.data(), rows=st.integers(1, 40), cols=st.integers(1, 12), seed=st.integers(0, 2 ** 16))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_results_equal_numpy_over_ragged_chunkings(client, data, rows, cols, seed):
    """Each example's three graphs on the cluster give NumPy's results; no worker ever
    compiles a function twice, whatever the chunk shapes of all the examples."""
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    graphs, want = _graphs(x, (data.draw(ragged_chunks(rows, most=4)), data.draw(ragged_chunks(cols, most=4))))
    _check(client.compute(list(graphs), sync=True), want)
    counts = rjd.compile_counts(client, *FUNCTIONS)
    assert all(v <= 1 for per_fn in counts.values() for v in per_fn.values()), counts


def test_one_compile_per_worker_per_function(client):
    """Every worker runs every function on chunkings of many shapes (each graph held to one
    worker): each compiled exactly once, there and only there."""
    f, stencil = rj.jit(_elementwise), rj.jit(_laplacian)
    chunk_sum = rj.jit(_sum_squares, static_argnums=1)
    x = np.random.default_rng(1).standard_normal((31, 17))
    for k, chunks in enumerate([((1, 2, 3, 25), (17,)), ((7,) * 4 + (3,), (5, 5, 5, 2)), ((13, 11, 7), (1, 16))]):
        for w, worker in enumerate(_workers(client)):
            # keys of their own: the same graph again could find the other worker's results
            dx = da.from_array(x, chunks=chunks, name=f"plate-{k}-{w}")
            graphs = [dx.map_blocks(f, dtype=float), rjd.map_overlap(stencil, dx, 1, "nearest"),
                      rjd.reduction(chunk_sum, _sum, dx, axis=0)]
            got = client.compute(graphs, workers=[worker], sync=True)
            _check(got, (_elementwise_numpy(x), _laplacian(np.pad(x, 1, mode="edge")), (x * x).sum(axis=0)))
    counts = rjd.compile_counts(client, f, stencil, chunk_sum, _sum)
    assert sorted(counts) == _workers(client)
    assert all(per_fn == {"_elementwise": 1, "_laplacian": 1, "_sum_squares": 1, "_sum": 1}
               for per_fn in counts.values()), counts
    assert f.cache_info().compiles == 0          # the client only traced (Dask's meta)


def _jitted_identity(f):
    """On a worker: the Jitted this task's copy of ``f`` unpickled as, and its compiles."""
    return id(f), f.cache_info().compiles, f


def test_jitted_functions_travel_to_workers_and_back(client):
    """Copies of one Jitted sent with separate tasks are one object on a worker (compiled
    once), and come back as a Jitted with the same pickle token that still computes."""
    f = rj.jit(lambda x: rnp.exp(x) - 1.0)
    worker = _workers(client)[0]
    x = np.linspace(-1.0, 1.0, 9)
    results = [client.submit(lambda g, v: g(v), f, x + k, workers=[worker], pure=False).result()
               for k in range(3)]
    for k, r in enumerate(results):
        np.testing.assert_allclose(r, np.exp(x + k) - 1.0, rtol=1e-12)
    first, second = (client.submit(_jitted_identity, f, workers=[worker], pure=False).result()
                     for _ in range(2))
    assert first[0] == second[0] and first[1] == second[1] == 1
    back = second[2]
    assert isinstance(back, rj.Jitted) and back is not f
    import importlib
    jit_module = importlib.import_module("relaxjax.jit")
    assert jit_module.pickle_token(back) == jit_module.pickle_token(f)
    np.testing.assert_allclose(back(x), np.exp(x) - 1.0, rtol=1e-12)


def _slow_copy(block):
    """A plain Python step after the jitted one, slow enough to kill a worker meanwhile."""
    time.sleep(0.04)
    return block.copy()


def test_a_worker_killed_mid_computation_is_replaced_and_results_stay_right(client):
    """SIGKILL one worker process while the graph runs: its nanny starts another, the
    scheduler runs the lost tasks again, and the result is NumPy's."""
    f = rj.jit(_elementwise)
    before = client.run(os.getpid)
    x = np.random.default_rng(2).standard_normal((120, 6))
    y = da.from_array(x, chunks=((3,) * 38 + (6,), (6,))).map_blocks(f, dtype=float).map_blocks(_slow_copy)
    future = client.compute(y)
    victim = sorted(before)[0]
    deadline = time.monotonic() + 30
    while rjd.compile_counts(client, f).get(victim, {}).get("_elementwise", 0) == 0:
        assert time.monotonic() < deadline, "the victim never started on the graph"
        time.sleep(0.02)
    assert not future.done()
    os.kill(before[victim], signal.SIGKILL)
    np.testing.assert_allclose(future.result(timeout=120), _elementwise_numpy(x), rtol=1e-12, atol=1e-12)
    _workers(client)
    after = client.run(os.getpid)
    assert before[victim] not in after.values() and len(after) == 2
    assert all(v <= 1 for per_fn in rjd.compile_counts(client, f).values() for v in per_fn.values())


def test_example_runs_on_a_local_cluster():
    """examples/dask_stencil.py --small --cluster: NumPy's result, and each function compiled
    once in each of the 2 worker processes."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "dask_stencil.py"), "--small", "--cluster"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    err = float(re.search(r"max \|error\| vs NumPy (\S+?);", r.stdout).group(1))
    assert err < 1e-9, r.stdout
    lines = re.findall(r"compiles in tcp://127\.0\.0\.1:\d+: (.*)", r.stdout)
    assert lines == ["heat_steps 1, block_sum 1, block_max 1"] * 2, r.stdout
