"""Fitting a physics model through its time loop: the stiffness and damping of a nonlinear
pendulum, recovered from a noisy trajectory by gradient descent.

The simulation is an ordinary NumPy time-stepping loop written with ``rj.lax.fori_loop``
(semi-implicit Euler); ``rj.value_and_grad`` differentiates the loss through every step
(the carries are stored, then the step's pullback runs backwards), and the trajectory's
length is a symbolic dim: one compile serves every observation window, which grows as
the fit goes on.  A second phase fits until converged with ``rj.lax.while_loop`` inside
the loss, whose trip count depends on the data (JAX's reverse mode refuses that).

    python examples/fit_oscillator.py [--small]
"""
import argparse

import numpy as np

import relaxjax as rj
from relaxjax.lax import fori_loop, scan, while_loop

DT = 0.05


def simulate(params, theta0, omega0, steps):
    """The angle at every step of a damped pendulum (scan: the trajectory is stacked)."""
    k, c = params[0], params[1]

    def step(state, _):
        theta, omega = state
        omega = omega + DT * (-k * np.sin(theta) - c * omega)
        theta = theta + DT * omega
        return (theta, omega), theta
    _, thetas = scan(step, (theta0, omega0), None, length=steps)
    return thetas


def loss(params, theta0, omega0, observed):
    predicted = simulate(params, theta0, omega0, observed.shape[0])
    return np.mean((predicted - observed) ** 2)


@rj.jit
def gd_step(params, theta0, omega0, observed, lr):
    value, g = rj.value_and_grad(loss)(params, theta0, omega0, observed)
    return value, params - lr * g


def settle_time_loss(params, target):
    """Steps until the swing's energy falls below a threshold (a while_loop), as a smooth
    quantity: the energy left at that step, against a target."""
    k, c = params[0], params[1]

    def cond(s):
        theta, omega, n = s
        return (0.5 * omega * omega + k * (1.0 - np.cos(theta)) > 0.05) & (n < 2000)

    def body(s):
        theta, omega, n = s
        omega = omega + DT * (-k * np.sin(theta) - c * omega)
        return theta + DT * omega, omega, n + 1
    theta, omega, _ = while_loop(cond, body, (np.float64(1.0), np.float64(0.0), 0))
    return (0.5 * omega * omega + k * (1.0 - np.cos(theta)) - target) ** 2


def main(small: bool) -> None:
    rng = np.random.default_rng(0)
    true = np.array([4.0, 0.3])                  # stiffness, damping
    theta0, omega0 = np.float64(1.2), np.float64(0.0)
    horizon = 80 if small else 200
    clean = np.asarray(simulate(true, theta0, omega0, horizon))
    observed = clean + 0.01 * rng.standard_normal(horizon)

    params = np.array([2.5, 0.1])
    iters = 150 if small else 400
    first, windows = None, set()
    for it in range(iters):
        # the window grows as the fit goes on (a longer trajectory is harder to fit from afar)
        window = min(horizon, 20 + it * horizon // (iters // 2))
        windows.add(window)
        value, params = gd_step(params, theta0, omega0, observed[:window], 0.5)
        first = value if first is None else first
        if it % (iters // 5) == 0 or it == iters - 1:
            print(f"step {it:3d}  window {window:3d}  loss {float(value):.5f}  "
                  f"k {params[0]:.3f}  c {params[1]:.3f}")
    info = gd_step.cache_info()
    print(f"fitted k = {params[0]:.3f} (true {true[0]}), c = {params[1]:.3f} (true {true[1]}); "
          f"compiles: {info.compiles} for {len(windows)} window lengths")
    assert abs(params[0] - true[0]) < 0.1 and abs(params[1] - true[1]) < 0.05, params

    # through a data-dependent loop: the gradient matches central differences
    g = rj.grad(settle_time_loss)(np.array([4.0, 0.3]), 0.02)
    eps = 1e-6
    num = [(float(rj.jit(settle_time_loss)(np.array([4.0, 0.3]) + eps * e, 0.02)) -
            float(rj.jit(settle_time_loss)(np.array([4.0, 0.3]) - eps * e, 0.02))) / (2 * eps)
           for e in np.eye(2)]
    print(f"while_loop gradient {g} against central differences {np.array(num)}")
    assert np.allclose(g, num, rtol=1e-4, atol=1e-8)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a shorter trajectory, fewer steps")
    main(ap.parse_args().small)
