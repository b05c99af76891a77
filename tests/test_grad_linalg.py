"""Derivatives of ``linalg.solve``, ``inv``, ``det``, ``cholesky``, ``qr``, ``eigh``,
``eigvalsh``, ``svd`` and ``svdvals`` (library calls with rules in ``ad_linalg``): gradients
and forward-mode derivatives against central finite differences in float64, over
hypothesis-drawn sizes (1, primes, wide and tall) and stacks of matrices.  Eigenvectors and
singular vectors are unique up to sign, so the functions differentiated read them through
sign-free expressions (magnitudes, rank-one terms)."""
from __future__ import annotations

import numpy as np
import pytest
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
    _check_both_modes(f, f_np, x, rng)


def _sign_free(u, vh, w1, w2, xp):
    """Magnitudes of the vectors and the first rank-one term: unchanged by a sign flip."""
    return (xp.abs(u) * w1).sum() + (xp.abs(vh) * w2).sum() + (u[..., :, :1] * vh[..., :1, :]).sum()


DECOMPOSITIONS = {
    "qr": lambda m, n, w: ((lambda a: (lambda q, r: (q * w[0]).sum() + (r * w[1]).sum())(*rnp.linalg.qr(a))),
                           (lambda a: (lambda q, r: (q * w[0]).sum() + (r * w[1]).sum())(*np.linalg.qr(a)))),
    "qr r": lambda m, n, w: ((lambda a: (rnp.linalg.qr(a, mode="r") * w[1]).sum()),
                             (lambda a: (np.linalg.qr(a, mode="r") * w[1]).sum())),
    "svd": lambda m, n, w: (
        (lambda a: (lambda u, s, vh: (s * w[2]).sum() + _sign_free(u, vh, w[3], w[4], rnp))(
            *rnp.linalg.svd(a, full_matrices=False))),
        (lambda a: (lambda u, s, vh: (s * w[2]).sum() + _sign_free(u, vh, w[3], w[4], np))(
            *np.linalg.svd(a, full_matrices=False)))),
    "svdvals": lambda m, n, w: ((lambda a: (rnp.linalg.svdvals(a) * w[2]).sum()),
                                (lambda a: (np.linalg.svd(a, compute_uv=False) * w[2]).sum())),
}
SQUARE = {
    "svd full": lambda w: (
        (lambda a: (lambda u, s, vh: (s * w[2]).sum() + _sign_free(u, vh, w[3], w[4], rnp))(*rnp.linalg.svd(a))),
        (lambda a: (lambda u, s, vh: (s * w[2]).sum() + _sign_free(u, vh, w[3], w[4], np))(*np.linalg.svd(a)))),
    "eigh L": lambda w: (
        (lambda a: (lambda e, v: (e * w[2]).sum() + _sign_free(v, rnp.swapaxes(v, -1, -2), w[3], w[4], rnp))(*rnp.linalg.eigh(a))),
        (lambda a: (lambda e, v: (e * w[2]).sum() + _sign_free(v, np.swapaxes(v, -1, -2), w[3], w[4], np))(*np.linalg.eigh(a)))),
    "eigh U": lambda w: (
        (lambda a: (lambda e, v: (e * w[2]).sum() + _sign_free(v, rnp.swapaxes(v, -1, -2), w[3], w[4], rnp))(*rnp.linalg.eigh(a, "U"))),
        (lambda a: (lambda e, v: (e * w[2]).sum() + _sign_free(v, np.swapaxes(v, -1, -2), w[3], w[4], np))(*np.linalg.eigh(a, "U")))),
    "eigvalsh": lambda w: ((lambda a: (rnp.linalg.eigvalsh(a) * w[2]).sum()),
                           (lambda a: (np.linalg.eigvalsh(a) * w[2]).sum())),
}


def _check_both_modes(f, f_np, x, rng):
    """The gradient against central differences, and forward mode (reverse mode twice)
    along a random direction."""
    want = _fd(f_np, x)
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(rj.grad(f)(x), want, rtol=1e-5, atol=1e-6 * scale)
    t = rng.standard_normal(x.shape)
    _, tan = rj.jvp(f, (x,), (t,))
    np.testing.assert_allclose(tan, (want * t).sum(), rtol=1e-5, atol=1e-6 * scale * np.abs(t).sum())


@given(case=st.sampled_from(sorted(DECOMPOSITIONS)), m=st.sampled_from([1, 2, 3, 5]), n=st.sampled_from([1, 2, 3, 5]),
       batch=st.sampled_from([(), (2,)]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None)
def test_decomposition_gradients_match_finite_differences(case, m, n, batch, seed):
    """qr and svd of tall, square and wide matrices (k = min(m, n) columns of Q and U)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, n))
    k = min(m, n)
    w = [rng.standard_normal(batch + s) for s in ((m, k), (k, n), (k,), (m, k), (k, n))]
    _check_both_modes(*DECOMPOSITIONS[case](m, n, w), a, rng)


@given(case=st.sampled_from(sorted(SQUARE)), n=st.sampled_from([1, 2, 3, 5]), batch=st.sampled_from([(), (2,)]),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=30, deadline=None)
def test_symmetric_and_square_decompositions(case, n, batch, seed):
    """eigh reads one triangle of a matrix that need not be symmetric: the other takes no
    cotangent, as differences of NumPy's function show; full svd of a square matrix."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (n, n))
    w = [None, None] + [rng.standard_normal(batch + s) for s in ((n,), (n, n), (n, n))]
    _check_both_modes(*SQUARE[case](w), a, rng)


def test_full_svd_of_a_matrix_not_known_square_has_no_derivative():
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        rj.grad(lambda a: rnp.linalg.svd(a)[0].sum())(np.ones((3, 2)))
