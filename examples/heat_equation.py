"""Heat diffusion on a plate: explicit finite differences on an n x m grid, jitted once.

The temperature ``u`` obeys du/dt = D (d2u/dx2 + d2u/dy2).  One explicit Euler step with the
5-point Laplacian is

    u[i, j] += r * (u[i+1, j] + u[i-1, j] + u[i, j+1] + u[i, j-1] - 4 u[i, j]),

r = D dt / h^2 (stable for r <= 1/4).  The whole time loop runs inside the jitted function
(``rj.lax.fori_loop``, the step count an argument), and the boundary conditions are in-place
updates of the carry (``u.at[0, :].set(...)``), which the compiler turns into writes into
the loop's one buffer.  The grid's n and m are symbolic: one compile serves every plate size.

Three runs:
  1. a plate with a hot top edge (Dirichlet: the other edges held at 0), on several grid
     sizes, against the same algorithm in NumPy (float64), with the time per step of each;
  2. insulated edges (zero flux through ghost cells): the total heat is conserved;
  3. the hot-edge plate run long enough to reach its steady state, which is the solution of
     the discrete Laplace equation (solved directly with a sparse solver).

    python examples/heat_equation.py [--small]
"""
import argparse
import statistics
import time

import numpy as np

import relaxjax as rj
from relaxjax.lax import fori_loop

R = 0.2                   # D dt / h^2: the explicit scheme is stable for R <= 0.25
T_HOT = 100.0             # the temperature of the hot edge


# ---------------------------------------------------------------------------------------
# relaxjax: the whole time loop in one jitted call
# ---------------------------------------------------------------------------------------
def laplacian(u):
    """The 5-point Laplacian (times h^2) at the interior points."""
    return u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]


@rj.jit
def heat_dirichlet(u, steps, t_hot):
    """`steps` steps with the top row held at t_hot and the other edges at 0."""
    def step(_, u):
        u = u.at[1:-1, 1:-1].add(R * laplacian(u))
        u = u.at[0, :].set(t_hot)          # hot edge
        u = u.at[-1, :].set(0.0)           # cold edges
        u = u.at[1:, 0].set(0.0)
        u = u.at[1:, -1].set(0.0)
        return u
    return fori_loop(0, steps, step, u)


@rj.jit
def heat_insulated(u, steps):
    """`steps` steps with no flux through any edge: the outer ring of `u` is ghost cells,
    each copied from its interior neighbour before the step (a zero normal derivative)."""
    def step(_, u):
        u = u.at[0, :].set(u[1, :])
        u = u.at[-1, :].set(u[-2, :])
        u = u.at[:, 0].set(u[:, 1])
        u = u.at[:, -1].set(u[:, -2])
        return u.at[1:-1, 1:-1].add(R * laplacian(u))
    return fori_loop(0, steps, step, u)


# ---------------------------------------------------------------------------------------
# the same algorithms in plain NumPy
# ---------------------------------------------------------------------------------------
def heat_dirichlet_np(u, steps, t_hot):
    u = u.copy()
    for _ in range(steps):
        u[1:-1, 1:-1] += R * laplacian(u)
        u[0, :] = t_hot
        u[-1, :] = 0.0
        u[1:, 0] = 0.0
        u[1:, -1] = 0.0
    return u


def heat_insulated_np(u, steps):
    u = u.copy()
    for _ in range(steps):
        u[0, :] = u[1, :]
        u[-1, :] = u[-2, :]
        u[:, 0] = u[:, 1]
        u[:, -1] = u[:, -2]
        u[1:-1, 1:-1] += R * laplacian(u)
    return u


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def initial_plate(n, m, rng):
    """A plate at a random temperature between 0 and 20 degrees."""
    return 20.0 * rng.random((n, m))


def steady_state(n, m, t_hot):
    """The discrete steady state of the hot-edge plate: the interior solves the 5-point
    Laplace equation with the edges as boundary values (a sparse direct solve)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    ni, mi = n - 2, m - 2
    lap1 = lambda k: sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(k, k))
    A = sp.kron(lap1(ni), sp.eye(mi)) + sp.kron(sp.eye(ni), lap1(mi))
    b = np.zeros((ni, mi))
    b[0, :] -= t_hot                      # the hot row above the first interior row
    u = np.zeros((n, m))
    u[0, :] = t_hot
    u[1:-1, 1:-1] = spla.spsolve(A.tocsc(), b.ravel()).reshape(ni, mi)
    return u


def main(small: bool) -> None:
    rng = np.random.default_rng(0)
    grids = [(24, 40), (33, 17), (50, 50)] if small else [(200, 300), (317, 251), (512, 512)]
    steps = 50 if small else 500
    repeats = 3 if small else 5

    # 1. the hot-edge plate on several grid sizes, against NumPy
    print(f"hot top edge, {steps} steps per call, r = {R}")
    for n, m in grids:
        u0 = initial_plate(n, m, rng)
        u = heat_dirichlet(u0, steps, T_HOT)
        expected = heat_dirichlet_np(u0, steps, T_HOT)
        err = np.abs(u - expected).max()
        t_rj = median_time(lambda: heat_dirichlet(u0, steps, T_HOT), repeats) / steps
        t_np = median_time(lambda: heat_dirichlet_np(u0, steps, T_HOT), repeats) / steps
        print(f"grid {n:4d} x {m:4d}: max |error| vs NumPy {err:.1e}; per step: relaxjax "
              f"{t_rj * 1e6:8.1f} us, NumPy {t_np * 1e6:8.1f} us ({t_np / t_rj:.1f}x)")
        assert u.shape == (n, m) and u.dtype == np.float64
        assert err < 1e-9, err
        # the maximum principle: no point leaves the range of its initial and edge values
        assert u.min() >= 0.0 and u.max() <= T_HOT
    info = heat_dirichlet.cache_info()
    print(f"compiles: {info.compiles} for {len(grids)} grid sizes "
          f"({info.hits} hits, {info.misses} miss)")
    assert info.compiles == 1, info

    # 2. insulated edges: the total heat in the interior is conserved
    n, m = grids[1]
    u0 = np.zeros((n + 2, m + 2))
    u0[1:-1, 1:-1] = initial_plate(n, m, rng)
    u0[n // 3: n // 2, m // 4: m // 2] += 500.0            # a hot spot
    u = heat_insulated(u0, 4 * steps)
    expected = heat_insulated_np(u0, 4 * steps)
    err = np.abs(u - expected).max()
    heat0, heat1 = u0[1:-1, 1:-1].sum(), u[1:-1, 1:-1].sum()
    drift = abs(heat1 - heat0) / heat0
    spread0, spread1 = u0[1:-1, 1:-1].std(), u[1:-1, 1:-1].std()
    print(f"insulated {n} x {m}, {4 * steps} steps: max |error| vs NumPy {err:.1e}; total heat "
          f"{heat0:.6e} -> {heat1:.6e} (relative change {drift:.1e}); "
          f"std of temperature {spread0:.2f} -> {spread1:.2f}")
    assert err < 1e-9, err
    assert drift < 1e-12, drift
    assert spread1 < 0.5 * spread0          # the hot spot spread out

    # 3. the hot-edge plate reaches the steady state (the discrete Laplace equation)
    n, m = (20, 30) if small else (40, 60)
    long = 3000 if small else 10000
    u = heat_dirichlet(initial_plate(n, m, rng), long, T_HOT)
    target = steady_state(n, m, T_HOT)
    gap = np.abs(u - target).max()
    print(f"steady state {n} x {m} after {long} steps: max |u - Laplace solution| {gap:.1e}; "
          f"temperature at the centre {u[n // 2, m // 2]:.3f} (Laplace {target[n // 2, m // 2]:.3f})")
    assert gap < 1e-5, gap
    info = heat_dirichlet.cache_info()
    print(f"compiles after every run: {info.compiles} for {len(grids) + 1} grid sizes")
    assert info.compiles == 1, info


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="small grids and few steps (a few seconds)")
    main(ap.parse_args().small)
