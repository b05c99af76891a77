"""NPBench's PolyBench kernels (npbench/benchmarks/polybench/*), written for relaxjax.

Linear algebra is written with matmuls and LAPACK the way a NumPy user writes it
(``np.linalg.cholesky``, ``np.linalg.solve`` on a triangle, closed forms of the
triangular updates); time steps and recurrences use ``fori_loop``/``scan`` and
NumPy-style in-place updates (``x[i] = v``) on copies of the inputs.
"""
from __future__ import annotations

import numpy as np

import relaxjax.numpy as rnp

from . import register
from ._loops import fori_loop, scan

SRC = "polybench/"


def _r(rng, *shape):
    return rng.random(shape)


def _spd(rng, n):
    a = rng.random((n, n))
    return a @ a.T + n * np.eye(n)


# ---------------------------------------------------------------- loop-free kernels

@register("atax", SRC + "atax", "A x",
          inputs=lambda r, s: dict(A=_r(r, s + 2, s), x=_r(r, s)))
def atax(A, x):
    """polybench/atax: A^T (A x)."""
    return (A @ x) @ A


@register("bicg", SRC + "bicg", "A p r",
          inputs=lambda r, s: dict(A=_r(r, s + 3, s), p=_r(r, s), r=_r(r, s + 3)))
def bicg(A, p, r):
    """polybench/bicg: the two products of BiCG's inner step, r^T A and A p."""
    return r @ A, A @ p


def _chol_ref(A):
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1):
            s = A[i, j] - A[i, :j] @ A[j, :j]
            A[i, j] = np.sqrt(s) if i == j else s / A[j, j]
    return A


@register("cholesky", SRC + "cholesky", "A",
          inputs=lambda r, s: dict(A=_spd(r, s)), ref=_chol_ref)
def cholesky(A):
    """polybench/cholesky: in-place Cholesky, L in the lower triangle, the strict upper
    triangle kept (LAPACK's potrf through np.linalg.cholesky)."""
    return np.linalg.cholesky(A) + np.triu(A, k=1)


@register("cholesky2", SRC + "cholesky2", "A",
          inputs=lambda r, s: dict(A=_spd(r, s)), ref=_chol_ref)
def cholesky2(A):
    """polybench/cholesky2: NPBench's library version of cholesky."""
    return np.linalg.cholesky(A) + np.triu(A, k=1)


def _corr_ref(float_n, data):
    d = data.copy()
    m = d.shape[1]
    mean = d.mean(0)
    std = np.sqrt(((d - mean) ** 2).mean(0))
    std[std <= 0.1] = 1.0
    d = (d - mean) / (np.sqrt(float_n) * std)
    corr = np.eye(m)
    for i in range(m):
        for j in range(i + 1, m):
            corr[i, j] = corr[j, i] = d[:, i] @ d[:, j]
    return corr


@register("correlation", SRC + "correlation", "float_n data", ref=_corr_ref,
          inputs=lambda r, s: dict(float_n=float(s + 2), data=_r(r, s + 2, s)))
def correlation(float_n, data):
    """polybench/correlation: Pearson correlation matrix of the columns."""
    mean = np.mean(data, axis=0)
    stddev = np.std(data, axis=0)
    stddev = np.where(stddev <= 0.1, 1.0, stddev)
    d = (data - mean) / (np.sqrt(float_n) * stddev)
    corr = d.T @ d
    m = data.shape[1]
    return np.where(np.eye(m) == 1.0, 1.0, corr)


def _cov_ref(float_n, data):
    d = data - data.mean(0)
    m = d.shape[1]
    cov = np.zeros((m, m))
    for i in range(m):
        for j in range(i, m):
            cov[i, j] = cov[j, i] = d[:, i] @ d[:, j] / (float_n - 1.0)
    return cov


@register("covariance", SRC + "covariance", "float_n data", ref=_cov_ref,
          inputs=lambda r, s: dict(float_n=float(s + 2), data=_r(r, s + 2, s)))
def covariance(float_n, data):
    """polybench/covariance: covariance matrix of the columns."""
    d = data - np.mean(data, axis=0)
    return d.T @ d / (float_n - 1.0)


@register("covariance2", SRC + "covariance2", "data",
          ref=lambda data: np.cov(data.T),
          inputs=lambda r, s: dict(data=_r(r, s + 2, s)))
def covariance2(data):
    """polybench/covariance2: NPBench's library version, np.cov."""
    return np.cov(np.transpose(data))


@register("doitgen", SRC + "doitgen", "A C4", written="A",
          ref=lambda A, C4: np.einsum("rqs,sp->rqp", A, C4),
          inputs=lambda r, s: dict(A=_r(r, s, s + 1, s + 2), C4=_r(r, s + 2, s + 2)))
def doitgen(A, C4):
    """polybench/doitgen: multiresolution analysis kernel, A[r, q, :] @ C4 for all r, q."""
    return A @ C4


def _durbin_ref(r):
    n = r.shape[0]
    y = np.empty_like(r)
    y[0] = alpha = -r[0]
    beta = 1.0
    for k in range(1, n):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + r[:k][::-1] @ y[:k]) / beta
        y[:k] = y[:k] + alpha * y[:k][::-1]
        y[k] = alpha
    return y


@register("durbin", SRC + "durbin", "r", ref=_durbin_ref, needs="control_flow",
          inputs=lambda r, s: dict(r=0.5 * _r(r, s) / (s + 1)))
def durbin(r):
    """polybench/durbin: Levinson-Durbin recursion for the Yule-Walker equations, one
    ``fori_loop`` step per order k; the reversed prefixes y[:k][::-1], r[:k][::-1] are
    gathers at k - 1 - i under a mask (JAX style, whole-array updates)."""
    n = r.shape[0]
    i = rnp.arange(n)            # np.arange of a traced dim does not dispatch: rnp's

    def step(k, carry):
        y, alpha, beta = carry
        beta = beta * (1.0 - alpha * alpha)
        rev = np.clip(k - 1 - i, 0, n - 1)                     # k-1-i for i < k
        alpha = -(r[k] + np.sum(np.where(i < k, r[rev] * y, 0.0))) / beta
        y = np.where(i < k, y + alpha * y[rev], np.where(i == k, alpha, y))
        return y, alpha, beta

    y0 = np.where(i == 0, -r[0], 0.0 * r)
    y, _, _ = fori_loop(1, n, step, (y0, -r[0], 1.0 + 0.0 * r[0]))
    return y


@register("gemm", SRC + "gemm", "alpha beta C A B",
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, C=_r(r, s, s + 1), A=_r(r, s, s + 2),
                                   B=_r(r, s + 2, s + 1)))
def gemm(alpha, beta, C, A, B):
    """polybench/gemm: C = alpha A B + beta C."""
    return alpha * A @ B + beta * C


@register("gemver", SRC + "gemver", "alpha beta A u1 v1 u2 v2 w x y z",
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, A=_r(r, s, s),
                                   **{k: _r(r, s) for k in "u1 v1 u2 v2 w x y z".split()}))
def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    """polybench/gemver: rank-2 update, then two matrix-vector products."""
    A = A + np.outer(u1, v1) + np.outer(u2, v2)
    x = x + beta * y @ A + z
    w = w + alpha * A @ x
    return A, w, x


@register("gesummv", SRC + "gesummv", "alpha beta A B x",
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, A=_r(r, s, s), B=_r(r, s, s),
                                   x=_r(r, s)))
def gesummv(alpha, beta, A, B, x):
    """polybench/gesummv: alpha A x + beta B x."""
    return alpha * A @ x + beta * B @ x


def _mgs_ref(A):
    A = A.copy()
    n = A.shape[1]
    Q, R = np.zeros_like(A), np.zeros((n, n))
    for k in range(n):
        R[k, k] = np.sqrt(A[:, k] @ A[:, k])
        Q[:, k] = A[:, k] / R[k, k]
        for j in range(k + 1, n):
            R[k, j] = Q[:, k] @ A[:, j]
            A[:, j] -= Q[:, k] * R[k, j]
    return Q, R, A


@register("gramschmidt", SRC + "gramschmidt", "A", ref=_mgs_ref, rtol=1e-5,
          inputs=lambda r, s: dict(A=_r(r, s + 3, s)))
def gramschmidt(A):
    """polybench/gramschmidt: QR by (modified) Gram-Schmidt. The factorization with a
    positive diagonal of R is unique, so a NumPy user takes LAPACK's QR and fixes signs;
    NPBench's kernel also leaves A = Q diag(R)."""
    Q, R = np.linalg.qr(A)
    s = np.sign(np.diagonal(R))
    Q = Q * s
    R = R * s[:, None]
    return Q, R, Q * np.diagonal(R)


@register("k2mm", SRC + "k2mm", "alpha beta A B C D",
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, A=_r(r, s, s + 1), B=_r(r, s + 1, s + 2),
                                   C=_r(r, s + 2, s + 3), D=_r(r, s, s + 3)))
def k2mm(alpha, beta, A, B, C, D):
    """polybench/k2mm: D = alpha A B C + beta D."""
    return alpha * A @ B @ C + beta * D


@register("k3mm", SRC + "k3mm", "A B C D",
          inputs=lambda r, s: dict(A=_r(r, s, s + 1), B=_r(r, s + 1, s + 2),
                                   C=_r(r, s + 2, s + 3), D=_r(r, s + 3, s)))
def k3mm(A, B, C, D):
    """polybench/k3mm: (A B)(C D)."""
    return A @ B @ C @ D


@register("mvt", SRC + "mvt", "x1 x2 y_1 y_2 A",
          inputs=lambda r, s: dict(x1=_r(r, s), x2=_r(r, s), y_1=_r(r, s), y_2=_r(r, s),
                                   A=_r(r, s, s)))
def mvt(x1, x2, y_1, y_2, A):
    """polybench/mvt: x1 += A y1, x2 += A^T y2."""
    return x1 + A @ y_1, x2 + y_2 @ A


def _symm_ref(alpha, beta, C, A, B):
    C = C * beta
    m, n = C.shape
    temp2 = np.empty(n)
    for i in range(m):
        for j in range(n):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            temp2[j] = B[:i, j] @ A[i, :i]
        C[i, :] += alpha * B[i, :] * A[i, i] + alpha * temp2
    return C


@register("symm", SRC + "symm", "alpha beta C A B", ref=_symm_ref,
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, C=_r(r, s, s + 2), A=_r(r, s, s),
                                   B=_r(r, s, s + 2)))
def symm(alpha, beta, C, A, B):
    """polybench/symm: C = alpha S B + beta C, S the symmetric matrix stored in A's lower
    triangle."""
    S = np.tril(A) + np.tril(A, -1).T
    return alpha * S @ B + beta * C


def _syr2k_ref(alpha, beta, C, A, B):
    C = C.copy()
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]
    return C


@register("syr2k", SRC + "syr2k", "alpha beta C A B", ref=_syr2k_ref,
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, C=_r(r, s, s), A=_r(r, s, s + 2),
                                   B=_r(r, s, s + 2)))
def syr2k(alpha, beta, C, A, B):
    """polybench/syr2k: symmetric rank-2k update of C's lower triangle."""
    lower = np.tril(np.ones_like(C)) == 1.0
    return np.where(lower, alpha * (A @ B.T + B @ A.T) + beta * C, C)


def _syrk_ref(alpha, beta, C, A):
    C = C.copy()
    for i in range(A.shape[0]):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]
    return C


@register("syrk", SRC + "syrk", "alpha beta C A", ref=_syrk_ref,
          inputs=lambda r, s: dict(alpha=1.5, beta=1.2, C=_r(r, s, s), A=_r(r, s, s + 2)))
def syrk(alpha, beta, C, A):
    """polybench/syrk: symmetric rank-k update of C's lower triangle."""
    lower = np.tril(np.ones_like(C)) == 1.0
    return np.where(lower, alpha * (A @ A.T) + beta * C, C)


def _trisolv_ref(L, x, b):
    x = x.copy()
    for i in range(x.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


# NPBench's bench_info names b (which the kernel only reads) as the output: x is compared
@register("trisolv", SRC + "trisolv", "L x b", ref=_trisolv_ref, needs="control_flow",
          npb_out=(), written="x",
          inputs=lambda r, s: dict(L=_r(r, s, s) + s * np.eye(s), x=_r(r, s), b=_r(r, s)))
def trisolv(L, x, b):
    """polybench/trisolv: forward substitution with the lower triangle of L (x is
    overwritten), one ``fori_loop`` step per row, the solved prefix under a mask.
    (LAPACK's solve on np.tril(L) pivots, and NPBench's L is so ill-conditioned that the
    pivoted result differs from plain substitution.)"""
    i = rnp.arange(L.shape[0])

    def row(k, x):
        xk = (b[k] - np.sum(np.where(i < k, L[k, :] * x, 0.0))) / L[k][k]
        return np.where(i == k, xk, x)

    return fori_loop(0, L.shape[0], row, 0.0 * b)


def _trmm_ref(alpha, A, B):
    B = B.copy()
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            B[i, j] += A[i + 1:, i] @ B[i + 1:, j]
    return B * alpha


@register("trmm", SRC + "trmm", "alpha A B", ref=_trmm_ref,
          inputs=lambda r, s: dict(alpha=1.5, A=_r(r, s, s), B=_r(r, s, s + 2)))
def trmm(alpha, A, B):
    """polybench/trmm: B = alpha (I + strict_lower(A))^T B."""
    return alpha * (B + np.tril(A, -1).T @ B)


# ---------------------------------------------------------- time steps and recurrences

@register("adi", SRC + "adi", "TSTEPS u", npb_out=(0,), needs="control_flow",
          inputs=lambda r, s: dict(TSTEPS=2, u=_r(r, s + 2, s + 2)), sizes=(1, 6))
def adi(TSTEPS, u):
    """polybench/adi: alternating-direction implicit solver of 2-D heat diffusion: per
    time step a tridiagonal (Thomas) sweep along columns, then along rows, each a
    forward ``scan`` and a reverse ``scan`` over the interior."""
    n = u.shape[0]
    DX = 1.0 / n
    DT = 1.0 / TSTEPS
    mul1 = 2.0 * DT / (DX * DX)
    mul2 = 1.0 * DT / (DX * DX)
    a, b, d, e = -mul1 / 2.0, 1.0 + mul2, -mul2 / 2.0, 1.0 + mul2
    c, f = a, d

    def sweep(rhs, lo_a, lo_b, lo_c):
        # rhs: (m, k) right-hand sides, one system per column of rhs, along axis 0;
        # boundary values 1.0 on both ends (p = 0, q = 1 at the start)
        k = rhs.shape[1]

        def fwd(carry, r):
            p, q = carry
            den = lo_a * p + lo_b
            p = -lo_c / den
            q = (r - lo_a * q) / den
            return (p, q), (p, q)

        init = (np.zeros(k, rhs.dtype), np.ones(k, rhs.dtype))
        _, (P, Q) = scan(fwd, init, rhs)

        def back(nxt, pq):
            v = pq[0] * nxt + pq[1]
            return v, v

        _, V = scan(back, np.ones(k, rhs.dtype), (P, Q), reverse=True)
        one = np.ones((1, k), rhs.dtype)
        return np.concatenate([one, V, one])           # (m + 2, k), rows 0..n-1

    def step(t, u):
        # column sweep: systems along j for each interior row i (v is indexed [j, i])
        rhs = (-d * u[1:-1, :-2] + (1.0 + 2.0 * d) * u[1:-1, 1:-1] - f * u[1:-1, 2:])
        v = sweep(rhs, a, b, c)                          # v[j, i] for j = 0..n-1
        # row sweep: systems along j for each interior row i of u
        rhs = (-a * v[:-2, :] + (1.0 + 2.0 * a) * v[1:-1, :] - c * v[2:, :])   # [i, j]
        w = sweep(rhs.T, d, e, f)                          # w[j, i]
        interior = w.T                                   # (n - 2, n)
        return np.concatenate([u[:1], interior, u[-1:]])

    return fori_loop(1, TSTEPS + 1, step, u)


def _iir(x, k1, k2, b1, b2, reverse):
    """Along axis 0, causal: y[j] = k1 x[j] + k2 x[j-1] + b1 y[j-1] + b2 y[j-2];
    anti-causal (reverse): y[j] = k1 x[j+1] + k2 x[j+2] + b1 y[j+1] + b2 y[j+2]
    (a second-order recursive filter, zero outside the array), as one ``scan``."""
    z = np.zeros_like(x[0])

    def step(carry, xj):
        x1, x2, y1, y2 = carry          # the two previous inputs and outputs
        y = (k1 * x1 + k2 * x2 if reverse else k1 * xj + k2 * x1) + b1 * y1 + b2 * y2
        return (xj, x1, y, y1), y

    _, ys = scan(step, (z, z, z, z), x, reverse=reverse)
    return ys


@register("deriche", SRC + "deriche", "alpha imgIn", needs="control_flow",
          inputs=lambda r, s: dict(alpha=0.25, imgIn=_r(r, s + 2, s + 3)), sizes=(1, 7))
def deriche(alpha, imgIn):
    """polybench/deriche: Deriche edge detector, a causal and an anti-causal second-order
    recursive filter along rows, then along columns (``scan``)."""
    ea, e2a = np.exp(-alpha), np.exp(-2.0 * alpha)
    k = (1.0 - ea) * (1.0 - ea) / (1.0 + alpha * ea - np.exp(2.0 * alpha))
    a1 = a5 = k
    a2 = a6 = k * ea * (alpha - 1.0)
    a3 = a7 = k * ea * (alpha + 1.0)
    a4 = a8 = -k * e2a
    b1 = 2.0 ** (-alpha)
    b2 = -e2a
    xt = imgIn.T                                      # scan along j (columns)
    out = (_iir(xt, a1, a2, b1, b2, False) + _iir(xt, a3, a4, b1, b2, True)).T
    return _iir(out, a5, a6, b1, b2, False) + _iir(out, a7, a8, b1, b2, True)


@register("fdtd_2d", SRC + "fdtd_2d", "TMAX ex ey hz _fict_", needs="control_flow inplace",
          inputs=lambda r, s: dict(TMAX=3, ex=_r(r, s, s + 1), ey=_r(r, s, s + 1),
                                   hz=_r(r, s, s + 1), _fict_=_r(r, 3)))
def fdtd_2d(TMAX, ex, ey, hz, _fict_):
    """polybench/fdtd_2d: 2-D finite-difference time-domain (Yee) update of E and H."""
    def step(t, fields):
        ex, ey, hz = fields
        ey = ey.copy()
        ey[0, :] = _fict_[t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex = ex.copy()
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz = hz.copy()
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1]
                                             - ey[:-1, :-1])
        return ex, ey, hz

    return fori_loop(0, TMAX, step, (ex, ey, hz))


@register("floyd_warshall", SRC + "floyd_warshall", "path", needs="control_flow",
          inputs=lambda r, s: dict(path=np.floor(_r(r, s, s) * 10)))
def floyd_warshall(path):
    """polybench/floyd_warshall: all-pairs shortest paths, one relaxation per pivot k."""
    def step(k, path):
        return np.minimum(path, path[:, k][:, None] + path[k, :][None, :])

    return fori_loop(0, path.shape[0], step, path)


def _heat(a):
    c = a[1:-1, 1:-1, 1:-1]
    return (0.125 * (a[2:, 1:-1, 1:-1] - 2.0 * c + a[:-2, 1:-1, 1:-1])
            + 0.125 * (a[1:-1, 2:, 1:-1] - 2.0 * c + a[1:-1, :-2, 1:-1])
            + 0.125 * (a[1:-1, 1:-1, 2:] - 2.0 * c + a[1:-1, 1:-1, :-2]) + c)


@register("heat_3d", SRC + "heat_3d", "TSTEPS A B", needs="control_flow inplace",
          inputs=lambda r, s: dict(TSTEPS=3, A=_r(r, s + 2, s + 2, s + 2),
                                   B=_r(r, s + 2, s + 2, s + 2)))
def heat_3d(TSTEPS, A, B):
    """polybench/heat_3d: 3-D heat equation, two Jacobi half-steps per time step."""
    def step(t, ab):
        A, B = ab
        B = B.copy()
        B[1:-1, 1:-1, 1:-1] = _heat(A)
        A = A.copy()
        A[1:-1, 1:-1, 1:-1] = _heat(B)
        return A, B

    return fori_loop(1, TSTEPS, step, (A, B))


@register("jacobi_1d", SRC + "jacobi_1d", "TSTEPS A B", needs="control_flow inplace",
          inputs=lambda r, s: dict(TSTEPS=4, A=_r(r, s + 2), B=_r(r, s + 2)))
def jacobi_1d(TSTEPS, A, B):
    """polybench/jacobi_1d: 1-D three-point Jacobi stencil."""
    def step(t, ab):
        A, B = ab
        B = B.copy()
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A = A.copy()
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
        return A, B

    return fori_loop(1, TSTEPS, step, (A, B))


def _jac2(a):
    return 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])


@register("jacobi_2d", SRC + "jacobi_2d", "TSTEPS A B", needs="control_flow inplace",
          inputs=lambda r, s: dict(TSTEPS=4, A=_r(r, s + 2, s + 2), B=_r(r, s + 2, s + 2)))
def jacobi_2d(TSTEPS, A, B):
    """polybench/jacobi_2d: 2-D five-point Jacobi stencil."""
    def step(t, ab):
        A, B = ab
        B = B.copy()
        B[1:-1, 1:-1] = _jac2(A)
        A = A.copy()
        A[1:-1, 1:-1] = _jac2(B)
        return A, B

    return fori_loop(1, TSTEPS, step, (A, B))


def _lu(A):
    """Doolittle LU without pivoting, one masked rank-1 update per pivot (the JAX way:
    whole-array ``where`` instead of shrinking slices)."""
    i = rnp.arange(A.shape[0])

    def step(k, A):
        below = (i > k)[:, None]
        l = A[:, k] / A[k][k]         # A[k, k]: two traced indices are not supported
        upd = np.where((i > k)[None, :], A - l[:, None] * A[k, :][None, :], l[:, None])
        return np.where(below & (i >= k)[None, :], upd, A)

    return fori_loop(0, A.shape[0], step, A)


def _lu_ref(A):
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] = (A[i, j] - A[i, :j] @ A[:j, j]) / A[j, j]
        for j in range(i, n):
            A[i, j] -= A[i, :i] @ A[:i, j]
    return A


@register("lu", SRC + "lu", "A", needs="control_flow", ref=_lu_ref,
          inputs=lambda r, s: dict(A=_spd(r, s)))
def lu(A):
    """polybench/lu: LU factorization without pivoting, L (unit) and U in place."""
    return _lu(A)


def _ludcmp_ref(A, b):
    A = _lu_ref(A)
    n = A.shape[0]
    y, x = np.zeros_like(b), np.zeros_like(b)
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return x, y, A


@register("ludcmp", SRC + "ludcmp", "A b", needs="control_flow inplace", ref=_ludcmp_ref,
          inputs=lambda r, s: dict(A=_spd(r, s), b=_r(r, s)))
def ludcmp(A, b):
    """polybench/ludcmp: LU without pivoting, then forward and back substitution."""
    A = _lu(A)
    n = A.shape[0]
    i = rnp.arange(n)

    def fwd(k, y):                       # y[k] = b[k] - A[k, :k] @ y[:k]
        y = y.copy()
        y[k] = b[k] - np.sum(np.where(i < k, A[k, :] * y, 0.0))
        return y

    y = fori_loop(0, n, fwd, np.zeros_like(b))

    def back(m, x):                      # k = n - 1 - m
        k = n - 1 - m
        x = x.copy()
        x[k] = (y[k] - np.sum(np.where(i > k, A[k, :] * x, 0.0))) / A[k][k]
        return x

    x = fori_loop(0, n, back, np.zeros_like(b))
    return x, y, A


def _nussinov_ref(seq):
    n = seq.shape[0]
    t = np.zeros((n, n), np.int32)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            best = max(t[i, j - 1], t[i + 1, j])
            pair = t[i + 1, j - 1] + (1 if (i < j - 1 and seq[i] + seq[j] == 3) else 0)
            best = max(best, pair)
            for k in range(i + 1, j):
                best = max(best, t[i, k] + t[k + 1, j])
            t[i, j] = best
    return t


@register("nussinov", SRC + "nussinov", "seq", needs="control_flow inplace", ref=_nussinov_ref,
          inputs=lambda r, s: dict(seq=r.integers(0, 4, s).astype(np.int32)), sizes=(1, 9))
def nussinov(seq):
    """polybench/nussinov: RNA folding by dynamic programming over (i, j), i from the end;
    the inner max over split points k is one masked reduction."""
    n = seq.shape[0]
    idx = rnp.arange(n)

    def row(m, table):
        i = n - 1 - m

        def cell(j, table):
            down = np.roll(table[:, j], -1)                    # down[k] = table[k + 1, j]
            split = np.max(np.where((idx > i) & (idx < j), table[i, :] + down, 0))
            match = np.where((i < j - 1) & (seq[i] + seq[j] == 3), 1, 0)
            # table[a][b]: indexing with two traced scalars at once is not supported
            best = np.maximum(np.maximum(table[i][j - 1], table[i + 1][j]),
                              table[i + 1][j - 1] + match)
            table = table.copy()
            table[i, j] = np.maximum(np.maximum(best, split), table[i][j])
            return table

        return fori_loop(i + 1, n, cell, table)

    return fori_loop(0, n, row, rnp.zeros((n, n), np.int32))


def _seidel_ref(TSTEPS, A):
    A = A.copy()
    n = A.shape[0]
    for t in range(TSTEPS - 1):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1] + A[i, j - 1]
                           + A[i, j] + A[i, j + 1] + A[i + 1, j - 1] + A[i + 1, j]
                           + A[i + 1, j + 1]) / 9.0
    return A


@register("seidel_2d", SRC + "seidel_2d", "TSTEPS A", needs="control_flow inplace", ref=_seidel_ref,
          inputs=lambda r, s: dict(TSTEPS=3, A=_r(r, s + 2, s + 2)))
def seidel_2d(TSTEPS, A):
    """polybench/seidel_2d: 2-D Gauss-Seidel sweeps: per row, the terms from the rows
    above and below at once, then the recurrence along the row (``scan``)."""
    def row(i, A):
        s = (A[i - 1, :-2] + A[i - 1, 1:-1] + A[i - 1, 2:] + A[i, 1:-1] + A[i, 2:]
             + A[i + 1, :-2] + A[i + 1, 1:-1] + A[i + 1, 2:])

        def along(prev, sj):
            v = (sj + prev) / 9.0
            return v, v

        _, new = scan(along, A[i, 0], s)
        A = A.copy()
        A[i, 1:-1] = new
        return A

    def sweep(t, A):
        return fori_loop(1, A.shape[0] - 1, row, A)

    return fori_loop(0, TSTEPS - 1, sweep, A)
