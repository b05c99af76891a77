"""Gravitational N-body: a star cluster integrated with leapfrog, jitted once for every N.

Each particle feels every other through softened gravity,

    a_i = G sum_j m_j (x_j - x_i) / (|x_j - x_i|^2 + eps^2)^(3/2),

computed by broadcasting an (N, N, 3) array of separations, the way one writes it in NumPy.
The time loop (kick-drift-kick leapfrog, symplectic: the energy error stays bounded) runs
inside the jitted function as ``rj.lax.scan`` over an array of step sizes, and returns the
total energy after every step; the particle count N and the step count are symbolic dims, so
one compile serves every cluster size and run length.

Checks: the trajectory against the same algorithm in NumPy (float64), the relative energy
drift over the run, and the total momentum (conserved to rounding: the pairwise forces are
equal and opposite).

    python examples/nbody.py [--small]
"""
import argparse
import statistics
import time

import numpy as np

import relaxjax as rj
from relaxjax.lax import scan

G = 1.0
EPS = 0.05                 # softening length


# ---------------------------------------------------------------------------------------
# the physics, written once in NumPy style: it runs under @rj.jit and on NumPy arrays alike
# ---------------------------------------------------------------------------------------
def accelerations(x, m):
    """The acceleration of every particle and the total potential energy."""
    d = x[None, :, :] - x[:, None, :]                    # d[i, j] = x_j - x_i: (N, N, 3)
    r2 = (d * d).sum(axis=-1) + EPS * EPS                 # (N, N)
    inv_r = 1.0 / np.sqrt(r2)
    inv_r3 = inv_r * inv_r * inv_r
    acc = G * ((m[None, :] * inv_r3)[:, :, None] * d).sum(axis=1)
    # each pair once (the sum counts it twice), without the self-terms m_i^2 / eps
    potential = -0.5 * G * ((m[:, None] * m[None, :] * inv_r).sum() - (m * m).sum() / EPS)
    return acc, potential


def kinetic(v, m):
    return 0.5 * (m * (v * v).sum(axis=1)).sum()


@rj.jit
def leapfrog(x, v, m, dts):
    """One kick-drift-kick step per entry of `dts` (the step sizes: their count is a
    symbolic dim, as the stacked energies need a length); returns the final state and the
    total energy after each step."""
    def step(state, dt):
        x, v, a = state
        v = v + 0.5 * dt * a
        x = x + dt * v
        a, potential = accelerations(x, m)
        v = v + 0.5 * dt * a
        return (x, v, a), kinetic(v, m) + potential
    a, _ = accelerations(x, m)
    (x, v, _), energies = scan(step, (x, v, a), dts)
    return x, v, energies


@rj.jit
def total_energy(x, v, m):
    return kinetic(v, m) + accelerations(x, m)[1]


def leapfrog_np(x, v, m, dt, steps):
    """The same algorithm in plain NumPy (a Python loop)."""
    a, _ = accelerations(x, m)
    energies = np.empty(steps)
    for t in range(steps):
        v = v + 0.5 * dt * a
        x = x + dt * v
        a, potential = accelerations(x, m)
        v = v + 0.5 * dt * a
        energies[t] = kinetic(v, m) + potential
    return x, v, energies


def plummer(n, rng):
    """A Plummer sphere of total mass 1 in virial equilibrium (G = 1): positions, velocities
    (in the centre-of-mass frame) and masses, float64."""
    m = np.full(n, 1.0 / n)
    r = 1.0 / np.sqrt(rng.uniform(0.01, 0.9, n) ** (-2.0 / 3.0) - 1.0)
    x = r[:, None] * _unit_vectors(n, rng)
    # speeds from the distribution function by rejection (Aarseth, Henon & Wielen 1974)
    q = np.empty(n)
    for i in range(n):
        while True:
            qi, y = rng.uniform(0, 1), rng.uniform(0, 0.1)
            if y < qi * qi * (1 - qi * qi) ** 3.5:
                q[i] = qi
                break
    speed = q * np.sqrt(2.0) * (1.0 + r * r) ** -0.25
    v = speed[:, None] * _unit_vectors(n, rng)
    x -= (m[:, None] * x).sum(0) / m.sum()
    v -= (m[:, None] * v).sum(0) / m.sum()
    return x, v, m


def _unit_vectors(n, rng):
    u = rng.standard_normal((n, 3))
    return u / np.linalg.norm(u, axis=1, keepdims=True)


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(small: bool) -> None:
    rng = np.random.default_rng(1)
    counts = [16, 50, 97] if small else [128, 300, 600]
    steps = 40 if small else 100
    dt = 2e-3
    repeats = 3

    print(f"leapfrog, dt = {dt}, {steps} steps per call, softening {EPS}")
    for n in counts:
        x0, v0, m = plummer(n, rng)
        dts = np.full(steps, dt)
        x, v, energies = leapfrog(x0, v0, m, dts)
        xe, ve, ee = leapfrog_np(x0, v0, m, dt, steps)
        err = max(np.abs(x - xe).max(), np.abs(v - ve).max())
        e0 = float(total_energy(x0, v0, m))
        drift = np.abs(energies - e0).max() / abs(e0)
        p0, p1 = (m[:, None] * v0).sum(0), (m[:, None] * v).sum(0)
        dp = np.abs(p1 - p0).max() / (m * np.linalg.norm(v0, axis=1)).sum()
        t_rj = median_time(lambda: leapfrog(x0, v0, m, dts), repeats) / steps
        t_np = median_time(lambda: leapfrog_np(x0, v0, m, dt, steps), repeats) / steps
        print(f"N = {n:4d}: max |error| vs NumPy {err:.1e}; energy {e0:.6f}, max relative "
              f"drift {drift:.1e}; momentum change {dp:.1e}; per step: relaxjax "
              f"{t_rj * 1e3:7.3f} ms, NumPy {t_np * 1e3:7.3f} ms ({t_np / t_rj:.1f}x)")
        assert x.shape == (n, 3) and energies.shape == (steps,)
        assert err < 1e-9, err
        assert np.allclose(energies, ee, rtol=1e-10, atol=0)
        assert drift < 1e-4, drift
        assert dp < 1e-12, dp
    info = leapfrog.cache_info()
    print(f"compiles: {info.compiles} for {len(counts)} particle counts "
          f"({info.hits} hits, {info.misses} miss)")
    assert info.compiles == 1, info

    # a longer run: leapfrog keeps the energy error bounded (it oscillates, it does not grow)
    n, long = (64, 500) if small else (256, 4000)
    x0, v0, m = plummer(n, rng)
    x, v, energies = leapfrog(x0, v0, m, np.full(long, dt))
    e0 = float(total_energy(x0, v0, m))
    rel = np.abs(energies - e0) / abs(e0)
    p = (m[:, None] * v).sum(0)
    virial = -2 * kinetic(v, m) / accelerations(x, m)[1]
    print(f"N = {n}, {long} steps (t = {long * dt:g}): max relative energy error {rel.max():.1e} "
          f"(first half {rel[:long // 2].max():.1e}, second half {rel[long // 2:].max():.1e}); "
          f"|total momentum| {np.abs(p).max():.1e}; virial ratio 2K/|W| {virial:.2f}")
    assert rel.max() < 1e-3, rel.max()
    assert np.abs(p).max() < 1e-13
    info = leapfrog.cache_info()
    print(f"compiles after every run: {info.compiles} for {len(counts) + 1} particle counts")
    assert info.compiles == 1, info


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="few particles and steps (a few seconds)")
    main(ap.parse_args().small)
