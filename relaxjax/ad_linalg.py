"""Reverse-mode rules of the ``linalg`` library calls (``relaxjax.numpy.linalg``), by the
call's name, written with ``relaxjax.numpy`` so that the derivative is more array code in
the same traced program (and differentiates again).

The calls take and give float64 stacks of matrices (the front end casts around them), so a
rule sees float64 operands and results.  A call with one result gets its cotangent
``ct`` and ``out``; one with several results (``qr``, ``eigh``, ``svd``) the list ``cts``
(zeros for the results nothing used) and ``outs``.  Each returns one cotangent per operand.

Conventions where the function reads only part of its operand: ``cholesky`` and ``eigh``
read the lower triangle (``UPLO="U"`` is a transpose before the call), so the upper
triangle takes no cotangent and the lower one takes that of both its own and its mirror
entry -- the gradient of the function NumPy computes, as central differences measure it.
Decompositions that are not unique give no rule: ``svd`` with ``full_matrices=True`` of a
matrix not known to be square (the extra singular vectors are any orthonormal completion), as
in JAX.  Repeated eigenvalues or singular values give infinities, as in JAX.
"""
from __future__ import annotations

from . import numpy as rnp
from .core import current_trace
from .shapes import dim_str
from .numpy import linalg as rla


def _t(x):
    return rnp.swapaxes(x, -1, -2)


def _eye_like(x):
    return rnp.eye(x.shape[-1], dtype=x.dtype)


def _solve_vjp(ct, a, bt, *, out):
    """``xt = solve(a, bt^T)^T`` (``linalg.solve``'s layout: right-hand sides as rows):
    the right-hand sides' cotangent solves with ``a^T``; ``a``'s is ``-g_b x^T``."""
    gb = rla.solve(_t(a), _t(ct))                     # (..., n, k)
    return -(gb @ out), _t(gb)


def _inv_vjp(ct, a, *, out):
    return (-(_t(out) @ ct @ _t(out)),)


def _det_vjp(ct, a, *, out):
    """d det(A) = det(A) tr(A^-1 dA): ``a``'s cotangent is ``g det(A) A^-T`` (A singular:
    ``inv``'s LinAlgError)."""
    return ((ct * out)[..., None, None] * _t(rla.inv(a)),)


def _lower_of(g):
    """The cotangent of a symmetric matrix read from its lower triangle: each entry below
    the diagonal stands for itself and its mirror."""
    return rnp.tril(g + _t(g), -1) + g * _eye_like(g)


def _cholesky_vjp(ct, a, *, out):
    """``L = cholesky(A)`` from A's lower triangle (Murray, "Differentiation of the Cholesky
    decomposition", 2016): with ``Phi`` the lower triangle, diagonal halved,
    ``S = L^-T Phi(L^T g) L^-1``, A's cotangent is ``Phi(S + S^T)`` (none for the upper
    triangle, which is not read)."""
    def phi(x):
        return rnp.tril(x) - 0.5 * x * _eye_like(x)
    linv = rla.inv(out)
    s = _t(linv) @ phi(_t(out) @ ct) @ linv
    return (phi(s + _t(s)),)


def _qr_vjp(cts, a, *, outs):
    """``A = QR`` (reduced: Q (m, k), R (k, n), k = min(m, n)).  With A = [X Y] and
    R = [R1 R2] split at column k, X = Q R1 is a QR of k columns and Y = Q R2: the
    cotangent of Y is ``Q g_R2``, and that of X (Q's cotangent taking ``Y g_R2^T`` on the
    way) is ``(g_Q + Q N) R1^-T`` with ``M = Q^T g_Q - g_R1 R1^T`` and
    ``N = tril(M - M^T, -1) - M`` -- the transpose of JAX's forward rule.  For m >= n, Y and
    R2 are empty.  (Y and R2 are read as A and R with their first k columns zeroed: one
    shape for any m, n.)  R1 singular (A of lower rank) gives solve's LinAlgError."""
    gq, gr = cts
    q, r = outs
    n, k = a.shape[-1], q.shape[-1]
    beyond = rnp.arange(n) >= k                    # the columns of Y and R2
    r1, gr1 = r[..., :, :k], gr[..., :, :k]
    gq = gq + (a * beyond) @ _t(gr)               # + Y g_R2^T, without slicing Y out
    m = _t(q) @ gq - gr1 @ _t(r1)
    low = rnp.tril(m - _t(m), -1) - m
    gx = _t(rla.solve(r1, _t(gq + q @ low)))
    pad = [(0, 0)] * (a.ndim - 1) + [(0, n - k)]
    return (rnp.pad(gx, pad) + q @ (gr * beyond),)


def _inverse_gaps(e):
    """``F_ij = 1 / (e_j - e_i)`` off the diagonal, 0 on it, for the values ``e`` along the
    last axis (equal values give infinities, as in JAX)."""
    eye = _eye_like(e)
    return rnp.where(eye != 0, 0.0, 1.0 / (e[..., None, :] - e[..., :, None] + eye))


def _eigh_pullback(w, v, gw, gv):
    """``V (diag(g_w) + F o (V^T g_V)) V^T`` with ``F = _inverse_gaps(w)``, then read from
    the lower triangle."""
    inner = gw[..., :, None] * _eye_like(w)
    if gv is not None:
        inner = inner + _inverse_gaps(w) * (_t(v) @ gv)
    return _lower_of(v @ inner @ _t(v))


def _eigh_vjp(cts, a, *, outs):
    gw, gv = cts
    w, v = outs
    return (_eigh_pullback(w, v, gw, gv),)


def _eigvalsh_vjp(ct, a, *, out):
    """The eigenvectors recomputed: ``V diag(g_w) V^T``, read from the lower triangle."""
    w, v = rla.eigh(a)
    return (_eigh_pullback(w, v, ct, None),)


def _svd_pullback(u, s, vh, gu, gs, gvh):
    """A = U diag(s) V^T (reduced).  With ``F_ij = 1 / (s_j^2 - s_i^2)`` off the diagonal,
    ``J = F o (U^T g_U)`` and ``K = F o (V^T g_V)``:
    ``U (diag(g_s) + (J + J^T) S + S (K + K^T)) V^T`` plus the parts of ``g_U`` and ``g_V``
    outside the spans of U and V, ``(I - U U^T) g_U S^-1 V^T + U S^-1 g_V^T (I - V V^T)``
    (zero for square A).  The transpose of JAX's forward rule (real case); a zero singular
    value's inverse is taken as 0, as there."""
    inner = gs[..., :, None] * _eye_like(s)
    if gu is None and gvh is None:
        return u @ inner @ vh
    v, gv = _t(vh), _t(gvh)
    row, col = s[..., None, :], s[..., :, None]
    f = _inverse_gaps(s * s)
    j = f * (_t(u) @ gu)
    k = f * (_t(v) @ gv)
    inner = inner + (j + _t(j)) * row + col * (k + _t(k))
    s_inv = rnp.where(s == 0, 0.0, 1.0 / rnp.where(s == 0, 1.0, s))
    out_u = (gu - u @ (_t(u) @ gu)) * s_inv[..., None, :]
    out_v = _t(gv - v @ (_t(v) @ gv)) * s_inv[..., :, None]
    return u @ inner @ vh + out_u @ vh + u @ out_v


def _svd_reduced_vjp(cts, a, *, outs):
    return (_svd_pullback(*outs, *cts),)


def _svd_full_vjp(cts, a, *, outs):
    m, n = a.type.shape[-2:]
    env = current_trace().env
    square = env.try_prove("==", env.canon(m), env.canon(n))
    if square is None and env.can_guard(m, n):        # automatic mode: a guard decides
        square = env.decide("==", m, n, "grad of linalg.svd with full_matrices=True")
    if not square:
        raise NotImplementedError(
            f"grad of linalg.svd with full_matrices=True is not implemented for a matrix that is "
            f"not known to be square ({dim_str(m)} x {dim_str(n)}): the extra singular vectors are any orthonormal "
            f"completion, so they have no derivative (use full_matrices=False, as in JAX)")
    return (_svd_pullback(*outs, *cts),)


def _svdvals_vjp(ct, a, *, out):
    """The singular vectors recomputed: ``U diag(g_s) V^T``."""
    u, s, vh = rla.svd(a, full_matrices=False)
    return (_svd_pullback(u, s, vh, None, ct, None),)


LINALG_VJPS = {"linalg.solve": _solve_vjp, "linalg.inv": _inv_vjp, "linalg.det": _det_vjp,
               "linalg.cholesky": _cholesky_vjp, "linalg.qr": _qr_vjp, "linalg.eigh": _eigh_vjp,
               "linalg.eigvalsh": _eigvalsh_vjp, "linalg.svd": _svd_full_vjp,
               "linalg.svd_reduced": _svd_reduced_vjp, "linalg.svdvals": _svdvals_vjp}
