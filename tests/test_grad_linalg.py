"""Derivatives of ``linalg.solve``, ``inv``, ``det`` and ``cholesky`` (library calls with
rules in ``ad.LIBRARY_VJPS``): gradients and forward-mode derivatives against central finite
differences in float64, over hypothesis-drawn sizes (1, primes) and stacks of matrices."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp


def _spd(rng, batch, n):
    m = rng.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


CASES = {
    "solve: a": lambda A, B, W: ((lambda a: (rnp.linalg.solve(a, B) * B).sum()),
                                 (lambda a: (np.linalg.solve(a, B) * B).sum()), A),
    "solve: b": lambda A, B, W: ((lambda b: (rnp.linalg.solve(A, b) ** 2).sum()),
                                 (lambda b: (np.linalg.solve(A, b) ** 2).sum()), B),
    "inv": lambda A, B, W: ((lambda a: (rnp.linalg.inv(a) * W).sum()),
                            (lambda a: (np.linalg.inv(a) * W).sum()), A),
    "det": lambda A, B, W: ((lambda a: rnp.linalg.det(a).sum()), (lambda a: np.linalg.det(a).sum()), A),
    "cholesky": lambda A, B, W: ((lambda a: (rnp.linalg.cholesky(a) * W).sum()),
                                 (lambda a: (np.linalg.cholesky(a) * W).sum()), A),
}


@given(case=st.sampled_from(sorted(CASES)), n=st.sampled_from([1, 2, 3, 5]),
       batch=st.sampled_from([(), (2,)]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=30, deadline=None)
def test_linalg_gradients_match_finite_differences(case, n, batch, seed):
    rng = np.random.default_rng(seed)
    A = _spd(rng, batch, n) / n
    B = rng.standard_normal(batch + (n, 2))
    W = rng.standard_normal(batch + (n, n))
    f, f_np, x = CASES[case](A, B, W)
    want = _fd(f_np, x)
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(rj.grad(f)(x), want, rtol=1e-5, atol=1e-6 * scale)
    # forward mode (reverse mode twice) along a random direction
    t = rng.standard_normal(x.shape)
    _, tan = rj.jvp(f, (x,), (t,))
    np.testing.assert_allclose(tan, (want * t).sum(), rtol=1e-5, atol=1e-6 * scale * np.abs(t).sum())
