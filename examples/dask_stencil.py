"""Heat diffusion on a periodic plate too big for one chunk: Dask chunks it, relaxjax runs the
time steps of each chunk, compiled once for every chunk shape.

The temperature ``u`` obeys du/dt = D (d2u/dx2 + d2u/dy2) on an n x m grid that wraps around
(periodic edges).  One explicit Euler step with the 5-point Laplacian is

    u[i, j] += r * (u[i+1, j] + u[i-1, j] + u[i, j+1] + u[i, j-1] - 4 u[i, j]),

r = D dt / h^2 (stable for r <= 1/4).  The grid is cut into ragged chunks (the last chunk
along each axis shorter).  Each round, every chunk gets a halo of ``steps`` cells from its
neighbours (``relaxjax.dask.map_overlap``, periodic), runs ``steps`` time steps on the
extended block in one jitted call (``rj.lax.fori_loop``; the block's outer ring is never
updated, so its error moves one cell inwards per step and stays inside the halo), and the
halo is trimmed away.  A round thus exchanges halos once per ``steps`` steps, as
domain-decomposed solvers do.  Then the total heat (conserved on a periodic plate) and the
hottest point are Dask reductions with jitted steps (``relaxjax.dask.reduction``).

Everything is checked against the same algorithm in NumPy (float64) on the whole grid.  The
same code runs on Dask's threaded scheduler (default, 2 threads) and on a ``distributed``
LocalCluster of 2 worker processes (``--cluster``); the compile counts printed at the end
are per process: one per function, whatever the chunk shapes.

    python examples/dask_stencil.py [--small] [--cluster]
"""
import argparse
import time

import numpy as np

import dask
import dask.array as da

import relaxjax as rj
import relaxjax.dask as rjd
import relaxjax.numpy as rnp
from relaxjax.lax import fori_loop

R = 0.2                   # D dt / h^2: the explicit scheme is stable for R <= 0.25


# ---------------------------------------------------------------------------------------
# relaxjax: what each chunk runs
# ---------------------------------------------------------------------------------------
@rj.jit
def heat_steps(u, steps):
    """`steps` explicit steps on a halo-extended block; its outer ring is left as it was."""
    def step(_, u):
        lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
        return u.at[1:-1, 1:-1].add(R * lap)
    return fori_loop(0, steps, step, u)


def block_sum(b, axis):
    return rnp.sum(b, axis=axis, keepdims=True)


def block_max(b, axis):
    return rnp.max(b, axis=axis, keepdims=True)


def simulate(u0: "da.Array", rounds: int, steps: int) -> "da.Array":
    """`rounds` rounds of `steps` steps each, one halo exchange per round."""
    u = u0
    for _ in range(rounds):
        u = rjd.map_overlap(heat_steps, u, depth=steps, boundary="periodic", result="extended",
                            extra_args=(steps,)).persist()
    return u


# ---------------------------------------------------------------------------------------
# the same algorithm in NumPy, on the whole grid
# ---------------------------------------------------------------------------------------
def heat_numpy(u, total_steps):
    u = u.copy()
    for _ in range(total_steps):
        u += R * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4.0 * u)
    return u


def ragged_chunks(size: int, parts: int) -> tuple:
    """`parts` chunks covering `size`: equal ones and a shorter last one."""
    step = -(-size // parts) + 1
    out = []
    while size > 0:
        out.append(min(step, size))
        size -= out[-1]
    return tuple(out)


def main(small: bool, cluster: bool) -> None:
    n, m = (61, 47) if small else (1000, 800)
    rounds, steps = (3, 4) if small else (5, 20)
    rng = np.random.default_rng(0)
    u0 = 20.0 * rng.random((n, m))
    u0[n // 3: n // 2, m // 4: m // 2] += 500.0            # a hot spot
    chunks = (ragged_chunks(n, 3), ragged_chunks(m, 2))
    client = None
    if cluster:
        from distributed import Client, LocalCluster
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0")    # loopback, any free port
        client = Client(lc)
        where = "LocalCluster, 2 worker processes x 1 thread"
    else:
        dask.config.set(scheduler="threads", num_workers=2)
        where = "threaded scheduler, 2 threads"
    try:
        print(f"{where}: {n} x {m} periodic plate, chunks {chunks}, {rounds} rounds of {steps} steps, r = {R}")
        t0 = time.perf_counter()
        u = simulate(da.from_array(u0, chunks=chunks), rounds, steps)
        total = rjd.reduction(block_sum, block_sum, u)
        hottest = rjd.reduction(block_max, block_max, u)
        result, heat, peak = dask.compute(u, total, hottest)
        t_dask = time.perf_counter() - t0
        t0 = time.perf_counter()
        expected = heat_numpy(u0, rounds * steps)
        t_np = time.perf_counter() - t0
        err = np.abs(result - expected).max()
        drift = abs(heat - u0.sum()) / u0.sum()
        print(f"max |error| vs NumPy {err:.1e}; total heat {u0.sum():.6e} -> {heat:.6e} "
              f"(relative change {drift:.1e}); hottest {u0.max():.2f} -> {peak:.2f} "
              f"(NumPy {expected.max():.2f})")
        print(f"time: Dask + relaxjax {t_dask:.2f} s (compiles included), NumPy {t_np:.2f} s")
        assert result.shape == (n, m) and result.dtype == np.float64
        assert err < 1e-9, err
        assert drift < 1e-12, drift
        assert abs(peak - expected.max()) < 1e-9, (peak, expected.max())
        counts = rjd.compile_counts(client, heat_steps, block_sum, block_max)
        for proc, per_fn in sorted(counts.items()):
            print(f"compiles in {proc}: " + ", ".join(f"{k} {v}" for k, v in per_fn.items()))
            # one per function in a process that ran it, whatever the chunk shapes
            assert all(v <= 1 for v in per_fn.values()), counts
        assert any(per_fn["heat_steps"] == 1 for per_fn in counts.values()), counts
    finally:
        if client is not None:
            client.close()
            lc.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a small grid and few steps (seconds)")
    ap.add_argument("--cluster", action="store_true",
                    help="run on a distributed LocalCluster of 2 processes (loopback only)")
    args = ap.parse_args()
    main(args.small, args.cluster)
