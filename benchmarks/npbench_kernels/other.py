"""NPBench's kernels outside PolyBench and deep learning: physics, stencils, fractals,
FFT, sparse and bit-level kernels (npbench/benchmarks/<name>/, weather_stencils/,
pythran/)."""
from __future__ import annotations

import numpy as np

import relaxjax.numpy as rnp

from . import register
from ._loops import fori_loop, scan, scatter_add, while_loop


def _r(rng, *shape):
    return rng.random(shape)


def _c(rng, *shape):
    return rng.random(shape) + 1j * rng.random(shape)


@register("arc_distance", "pythran/arc_distance", "theta_1 phi_1 theta_2 phi_2",
          inputs=lambda r, s: {k: _r(r, s) for k in ("theta_1", "phi_1", "theta_2", "phi_2")})
def arc_distance(theta_1, phi_1, theta_2, phi_2):
    """pythran/arc_distance: great-circle distance between pairs of points."""
    temp = (np.sin((theta_2 - theta_1) / 2) ** 2
            + np.cos(theta_1) * np.cos(theta_2) * np.sin((phi_2 - phi_1) / 2) ** 2)
    return 2 * np.arctan2(np.sqrt(temp), np.sqrt(1 - temp))


def _hist_ref(data, radius, npt):
    return np.histogram(radius, npt, weights=data)[0] / np.histogram(radius, npt)[0]


@register("azimint_hist", "azimint_hist", "data radius npt", static="npt", needs="inplace",
          ref=_hist_ref, rtol=1e-9,
          inputs=lambda r, s: dict(data=_r(r, 50 * s), radius=_r(r, 50 * s), npt=3))
def azimint_hist(data, radius, npt):
    """azimint_hist: azimuthal integration, the mean of data per radius bin (npt bins
    spanning [min, max] of radius, as np.histogram), as two scatter-adds."""
    lo, hi = np.min(radius), np.max(radius)
    b = np.floor((radius - lo) * (npt / (hi - lo))).astype(np.int64)
    b = np.minimum(b, npt - 1)
    zeros = np.zeros(npt, dtype=data.dtype)
    return scatter_add(zeros, b, data) / scatter_add(zeros, b, np.ones_like(data))


def _naive_ref(data, radius, npt):
    rmax = radius.max()
    res = np.zeros(npt)
    for i in range(npt):
        m = (rmax * i / npt <= radius) & (radius < rmax * (i + 1) / npt)
        res[i] = data[m].mean()
    return res


@register("azimint_naive", "azimint_naive", "data radius npt", static="npt",
          needs="control_flow inplace",
          ref=_naive_ref, rtol=1e-9,
          inputs=lambda r, s: dict(data=_r(r, 50 * s), radius=_r(r, 50 * s), npt=3))
def azimint_naive(data, radius, npt):
    """azimint_naive: the same integration, one masked mean over all points per bin
    (bins [rmax i / npt, rmax (i + 1) / npt))."""
    rmax = np.max(radius)

    def body(i, res):
        r1 = rmax * i / npt
        r2 = rmax * (i + 1) / npt
        m = (r1 <= radius) & (radius < r2)
        res = res.copy()
        res[i] = np.sum(np.where(m, data, 0.0)) / np.sum(m)
        return res

    return fori_loop(0, npt, body, np.zeros(npt, dtype=data.dtype))


class _Grid:
    """Neighbours along x of a (ny, nx) field: walls (interior columns only) or periodic
    (every column, with rolls).  Rows are always the interior, 1:-1."""

    def __init__(self, periodic):
        self.periodic = periodic

    def c(self, a):
        return a if self.periodic else a[:, 1:-1]

    def xp(self, a):                   # a[:, j + 1]
        return np.roll(a, -1, axis=1) if self.periodic else a[:, 2:]

    def xm(self, a):                   # a[:, j - 1]
        return np.roll(a, 1, axis=1) if self.periodic else a[:, :-2]


def _source(g, rho, dt, dx, dy, u, v):
    """The pressure Poisson source term on the interior rows."""
    dudx = (g.xp(u) - g.xm(u))[1:-1] / (2 * dx)
    dvdy = (g.c(v)[2:] - g.c(v)[:-2]) / (2 * dy)
    dudy = (g.c(u)[2:] - g.c(u)[:-2]) / (2 * dy)
    dvdx = (g.xp(v) - g.xm(v))[1:-1] / (2 * dx)
    return rho * (1 / dt * (dudx + dvdy) - dudx ** 2 - 2 * (dudy * dvdx) - dvdy ** 2)


def _jacobi_p(g, p, b, dx, dy):
    """One Jacobi iteration of the pressure equation on the interior rows."""
    return (((g.xp(p) + g.xm(p))[1:-1] * dy ** 2 + (g.c(p)[2:] + g.c(p)[:-2]) * dx ** 2)
            / (2 * (dx ** 2 + dy ** 2)) - dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b)


def _momentum(g, un, vn, f, pgrad, dt, dx, dy, nu):
    """Explicit upwind advection + diffusion of the field f (un or vn), interior rows."""
    fc, uc, vc = g.c(f), g.c(un), g.c(vn)
    fi = fc[1:-1]
    return (fi - uc[1:-1] * dt / dx * (fi - g.xm(f)[1:-1])
            - vc[1:-1] * dt / dy * (fi - fc[:-2]) - pgrad
            + nu * (dt / dx ** 2 * (g.xp(f)[1:-1] - 2 * fi + g.xm(f)[1:-1])
                    + dt / dy ** 2 * (fc[2:] - 2 * fi + fc[:-2])))


def _rows(interior, top, bottom):
    """Stack constant top and bottom rows around the interior rows."""
    one = np.ones_like(interior[:1])
    return np.concatenate([top * one, interior, bottom * one])


def _cols(interior, left, right):
    one = np.ones_like(interior[:, :1])
    return np.concatenate([left * one, interior, right * one], axis=1)


@register("cavity_flow", "cavity_flow", "nt nit u v dt dx dy p rho nu", needs="control_flow",
          inputs=lambda r, s: dict(nt=3, nit=2, u=np.zeros((s + 4, s + 5)),
                                   v=np.zeros((s + 4, s + 5)), dt=0.001, dx=2 / (s + 4),
                                   dy=2 / (s + 3), p=np.zeros((s + 4, s + 5)), rho=1.0, nu=0.1))
def cavity_flow(nt, nit, u, v, dt, dx, dy, p, rho, nu):
    """cavity_flow: 2-D lid-driven cavity (Navier-Stokes, Barba's "12 steps"): per time
    step the pressure source, ``nit`` Jacobi iterations of the pressure equation with
    Neumann walls (p = 0 on the lid), an explicit momentum update; walls hold u = v = 0,
    the lid u = 1."""
    g = _Grid(periodic=False)

    def step(n, state):
        u, v, p = state
        b = _source(g, rho, dt, dx, dy, u, v)

        def poisson(q, p):
            pi = _jacobi_p(g, p, b, dx, dy)
            rows = np.concatenate([pi[:, :1], pi, pi[:, -1:]], axis=1)   # dp/dx = 0
            return np.concatenate([rows[:1], rows, np.zeros_like(rows[:1])])

        p = fori_loop(0, nit, poisson, p)
        ui = _momentum(g, u, v, u, dt / (2 * rho * dx) * (p[1:-1, 2:] - p[1:-1, :-2]),
                       dt, dx, dy, nu)
        vi = _momentum(g, u, v, v, dt / (2 * rho * dy) * (p[2:, 1:-1] - p[:-2, 1:-1]),
                       dt, dx, dy, nu)
        return _rows(_cols(ui, 0.0, 0.0), 0.0, 1.0), _rows(_cols(vi, 0.0, 0.0), 0.0, 0.0), p

    return fori_loop(0, nt, step, (u, v, p))


@register("channel_flow", "channel_flow", "nit u v dt dx dy p rho nu F", needs="control_flow",
          inputs=lambda r, s: dict(nit=2, u=np.zeros((s + 4, s + 5)), v=np.zeros((s + 4, s + 5)),
                                   dt=0.1 / ((s + 4) * (s + 3)), dx=2 / (s + 4), dy=2 / (s + 3),
                                   p=np.ones((s + 4, s + 5)), rho=1.0, nu=0.1, F=1.0))
def channel_flow(nit, u, v, dt, dx, dy, p, rho, nu, F):
    """channel_flow: 2-D channel flow driven by a force F, periodic in x (rolls), walls in
    y, stepped until the relative change of sum(u) drops to 0.001 (``while_loop``);
    returns the number of steps and the fields."""
    g = _Grid(periodic=True)

    def poisson(q, carry):
        p, b = carry
        pi = _jacobi_p(g, p, b, dx, dy)
        return np.concatenate([pi[:1], pi, pi[-1:]]), b        # dp/dy = 0 at the walls

    def cond(state):
        return state[0] > 0.001

    def body(state):
        _, count, u, v, p = state
        b = _source(g, rho, dt, dx, dy, u, v)
        p, _ = fori_loop(0, nit, poisson, (p, b))
        ui = _momentum(g, u, v, u, dt / (2 * rho * dx) * (g.xp(p) - g.xm(p))[1:-1],
                       dt, dx, dy, nu) + F * dt
        vi = _momentum(g, u, v, v, dt / (2 * rho * dy) * (p[2:] - p[:-2]), dt, dx, dy, nu)
        un, vn = _rows(ui, 0.0, 0.0), _rows(vi, 0.0, 0.0)
        diff = (np.sum(un) - np.sum(u)) / np.sum(un)
        return diff, count + 1, un, vn, p

    _, count, u, v, p = while_loop(cond, body, (np.float64(1.0), 0, u, v, p))
    return count, u, v, p


@register("compute", "compute", "array_1 array_2 a b c",
          inputs=lambda r, s: dict(array_1=r.integers(0, 20, (s, s + 1)),
                                   array_2=r.integers(0, 20, (s, s + 1)), a=np.int64(4),
                                   b=np.int64(3), c=np.int64(9)))
def compute(array_1, array_2, a, b, c):
    """compute (NPBench's "clipping" example from Cython's tutorial): integer clip and
    multiply-add."""
    return np.clip(array_1, 2, 10) * a + array_2 * b + c


def _contour_ref(slab_per_bc, Ham, int_pts, Y):
    nr, nm = Y.shape
    P0 = np.zeros((nr, nm), complex)
    P1 = np.zeros((nr, nm), complex)
    for z in int_pts:
        T = sum(z ** (slab_per_bc / 2 - n) * Ham[n] for n in range(slab_per_bc + 1))
        X = np.linalg.inv(T) if nr == nm else np.linalg.solve(T, Y)
        X = -X if abs(z) < 1.0 else X
        P0 += X
        P1 += z * X
    return P0, P1


@register("contour_integral", "contour_integral", "slab_per_bc Ham int_pts Y",
          static="slab_per_bc", rtol=1e-6, ref=_contour_ref, sizes=(1, 4),
          inputs=lambda r, s: dict(slab_per_bc=2, Ham=_c(r, 3, s + 1, s + 1),
                                   int_pts=_c(r, 5), Y=_c(r, s + 1, s + 3)))
def contour_integral(slab_per_bc, Ham, int_pts, Y):
    """contour_integral: a contour integral of the resolvent of a block-tridiagonal
    Hamiltonian, T(z) = sum_n z^(s/2 - n) H_n solved against Y at every quadrature point
    (all points at once: one batched complex solve; the inverse when NR = NM, as NPBench)."""
    z = int_pts[:, None, None]                              # one system per point
    T = np.power(z, slab_per_bc / 2) * Ham[0]
    for n in range(1, slab_per_bc + 1):
        T = T + np.power(z, slab_per_bc / 2 - n) * Ham[n]
    X = np.linalg.inv(T) if Y.shape[1] == Ham.shape[1] else np.linalg.solve(T, Y)
    X = np.where(np.abs(z) < 1.0, -X, X)
    return np.sum(X, axis=0), np.sum(z * X, axis=0)


def _crc_ref(data, poly=0x8408):
    crc = 0xFFFF
    for b in data:
        cur = 0xFF & int(b)
        for _ in range(8):
            crc = ((crc >> 1) ^ poly) if (crc & 1) ^ (cur & 1) else crc >> 1
            cur >>= 1
    crc = ~crc & 0xFFFF
    return ((crc << 8) | ((crc >> 8) & 0xFF)) & 0xFFFF


@register("crc16", "crc16", "data", needs="control_flow", ref=_crc_ref, rtol=0,
          inputs=lambda r, s: dict(data=r.integers(0, 256, s, dtype=np.uint8)))
def crc16(data):
    """crc16: CRC-16-CCITT (reflected polynomial 0x8408), bit by bit over the bytes."""
    poly = 0x8408

    def byte(i, crc):
        cur = data[i].astype(np.int64) & 0xFF
        for _ in range(8):
            crc = np.where(((crc ^ cur) & 1) == 1, (crc >> 1) ^ poly, crc >> 1)
            cur = cur >> 1
        return crc

    crc = fori_loop(0, data.shape[0], byte, np.int64(0xFFFF))
    crc = ~crc & 0xFFFF
    return ((crc << 8) | ((crc >> 8) & 0xFF)) & 0xFFFF


@register("go_fast", "go_fast", "a", inputs=lambda r, s: dict(a=_r(r, s, s)))
def go_fast(a):
    """go_fast (numba's introductory example): a + sum(tanh(diag(a)))."""
    return a + np.sum(np.tanh(np.diagonal(a)))


def _grid(xmin, xmax, ymin, ymax, xn, yn):
    """The points x + iy of the (yn, xn) grid: np.linspace spelled out (relaxjax's takes
    only Python end points), in linspace's arithmetic (start + step * k)."""
    X = xmin + (xmax - xmin) / (xn - 1) * np.arange(xn)
    Y = ymin + (ymax - ymin) / (yn - 1) * np.arange(yn)
    return X + Y[:, None] * 1j


def _mandel1_ref(xmin, xmax, ymin, ymax, xn, yn, maxiter, horizon):
    C = np.linspace(xmin, xmax, xn) + np.linspace(ymin, ymax, yn)[:, None] * 1j
    N = np.zeros(C.shape, np.int64)
    Z = np.zeros(C.shape, complex)
    for n in range(maxiter):
        m = np.abs(Z) < horizon
        N[m] = n
        Z[m] = Z[m] ** 2 + C[m]
    N[N == maxiter - 1] = 0
    return Z, N


_MANDEL_IN = dict(xmin=-1.75, xmax=0.25, ymin=-1.0, ymax=1.0, maxiter=12, horizon=2.0)


@register("mandelbrot1", "mandelbrot1", "xmin xmax ymin ymax XN YN maxiter horizon",
          static="XN YN", needs="control_flow", ref=_mandel1_ref, rtol=1e-9,
          inputs=lambda r, s: dict(_MANDEL_IN, XN=s + 2, YN=s + 3))
def mandelbrot1(xmin, xmax, ymin, ymax, XN, YN, maxiter, horizon):
    """mandelbrot1: escape-time Mandelbrot set over an XN x YN grid, every point iterated
    under a mask of the points still bounded."""
    C = _grid(xmin, xmax, ymin, ymax, XN, YN)

    def step(n, s):
        Z, N = s
        m = np.abs(Z) < horizon
        return np.where(m, Z ** 2 + C, Z), np.where(m, n, N)

    Z, N = fori_loop(0, maxiter, step, (np.zeros(C.shape, np.complex128),
                                        np.zeros(C.shape, np.int64)))
    return Z, np.where(N == maxiter - 1, 0, N)


def _mandel2_ref(xmin, xmax, ymin, ymax, xn, yn, itermax, horizon):
    C = np.linspace(xmin, xmax, xn)[:, None] + 1j * np.linspace(ymin, ymax, yn)[None, :]
    N_ = np.zeros(C.shape, np.int64)
    Z_ = np.zeros(C.shape, complex)
    Z = np.zeros(C.shape, complex)
    alive = np.ones(C.shape, bool)
    for i in range(itermax):
        Z = np.where(alive, Z * Z + C, Z)
        out = alive & (np.abs(Z) > horizon)
        N_[out] = i + 1
        Z_[out] = Z[out]
        alive &= ~out
    return Z_.T, N_.T


@register("mandelbrot2", "mandelbrot2", "xmin xmax ymin ymax XN YN maxiter horizon",
          static="XN YN", needs="control_flow", ref=_mandel2_ref, rtol=1e-9,
          inputs=lambda r, s: dict(_MANDEL_IN, XN=s + 2, YN=s + 3))
def mandelbrot2(xmin, xmax, ymin, ymax, XN, YN, maxiter, horizon):
    """mandelbrot2: the escape-time set keeping, per point, the iterate and the step at
    which it escaped (0 if it never did); NPBench compacts the live points, here they
    stay in place under a mask."""
    C = _grid(xmin, xmax, ymin, ymax, XN, YN)

    def step(i, s):
        Z, Z_, N_, alive = s
        Z = np.where(alive, Z * Z + C, Z)
        esc = alive & (np.abs(Z) > horizon)
        return Z, np.where(esc, Z, Z_), np.where(esc, i + 1, N_), alive & ~esc

    z = np.zeros(C.shape, np.complex128)
    s = fori_loop(0, maxiter, step, (z, z, np.zeros(C.shape, np.int64), np.ones(C.shape, bool)))
    return s[1], s[2]


def _accel(pos, mass, G, softening):
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    r2 = dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2
    inv_r3 = np.where(r2 > 0, np.where(r2 > 0, r2, 1.0) ** (-1.5), r2)
    return np.concatenate([G * (dx * inv_r3) @ mass, G * (dy * inv_r3) @ mass,
                           G * (dz * inv_r3) @ mass], axis=1)


def _energy(pos, vel, mass, G):
    ke = 0.5 * np.sum(mass * vel ** 2)
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    r = np.sqrt((x.T - x) ** 2 + (y.T - y) ** 2 + (z.T - z) ** 2)
    inv_r = np.where(r > 0, 1.0 / np.where(r > 0, r, 1.0), r)
    pe = G * np.sum(np.triu(-(mass * mass.T) * inv_r, 1))
    return ke, pe


@register("nbody", "nbody", "mass pos vel Nt dt G softening", static="Nt",
          needs="control_flow", rtol=1e-8,
          inputs=lambda r, s: dict(mass=20.0 * np.ones((s, 1)) / s, pos=_r(r, s, 3),
                                   vel=_r(r, s, 3), Nt=4, dt=0.05, G=1.0, softening=0.1))
def nbody(mass, pos, vel, Nt, dt, G, softening):
    """nbody (Mocz's N-body simulation): leapfrog (kick-drift-kick) with all pairwise
    softened gravity, the kinetic and potential energy after every step (``scan``)."""
    vel = vel - np.mean(mass * vel, axis=0) / np.mean(mass)
    acc = _accel(pos, mass, G, softening)
    ke0, pe0 = _energy(pos, vel, mass, G)

    def step(carry, _):
        pos, vel, acc = carry
        vel = vel + acc * dt / 2.0
        pos = pos + vel * dt
        acc = _accel(pos, mass, G, softening)
        vel = vel + acc * dt / 2.0
        return (pos, vel, acc), _energy(pos, vel, mass, G)

    _, (ke, pe) = scan(step, (pos, vel, acc), None, length=Nt)
    return (np.concatenate([np.reshape(ke0, (1,)), ke]),
            np.concatenate([np.reshape(pe0, (1,)), pe]))


def _sse_ref(neigh_idx, dH, G, D, Sigma):
    Sigma = Sigma.copy()
    for k in range(G.shape[0]):
        for E in range(G.shape[1]):
            for q in range(D.shape[0]):
                for w in range(D.shape[1]):
                    if E - w < 0:
                        continue
                    for i in range(D.shape[-2]):
                        for j in range(D.shape[-1]):
                            for a in range(neigh_idx.shape[0]):
                                for b in range(neigh_idx.shape[1]):
                                    dHG = G[k, E - w, neigh_idx[a, b]] @ dH[a, b, i]
                                    Sigma[k, E, a] += dHG @ (dH[a, b, j] * D[q, w, a, b, i, j])
    return Sigma


def _sse_inputs(r, s):
    na, nb, norb = s + 2, 2, 2
    idx = (np.arange(na)[:, None] + np.arange(nb)[None, :] - nb // 2) % na
    return dict(neigh_idx=idx.astype(np.int32), dH=_c(r, na, nb, 2, norb, norb),
                G=_c(r, 2, 3, na, norb, norb), D=_c(r, 2, 2, na, nb, 2, 2),
                Sigma=np.zeros((2, 3, na, norb, norb), complex))


@register("scattering_self_energies", "scattering_self_energies",
          "neigh_idx dH G D Sigma", rtol=1e-9, written="Sigma",
          ref=_sse_ref, inputs=_sse_inputs, sizes=(1, 3))
def scattering_self_energies(neigh_idx, dH, G, D, Sigma):
    """scattering_self_energies (OMEN's electron-phonon self-energy): Sigma[k, E, a] +=
    sum over q, w <= E, i, j, b of G[k, E - w, neigh(a, b)] dH[a, b, i] dH[a, b, j]
    D[q, w, a, b, i, j], as complex einsums; the energy shift E - w is a 0/1 matrix."""
    ne, nw = G.shape[1], D.shape[1]
    e, w = rnp.arange(ne), rnp.arange(nw)
    shift = (e[None, :, None] - w[:, None, None] == e[None, None, :]).astype(np.float64)
    Gs = np.einsum("wEF,kFabxy->kEwabxy", shift, G[:, :, neigh_idx])  # G[k, E - w] or 0
    M = np.einsum("abjzu,wabij->wabizu", dH, np.sum(D, axis=0))
    GdH = np.einsum("kEwabxy,abiyz->kEwabixz", Gs, dH)
    return Sigma + np.einsum("kEwabixz,wabizu->kEaxu", GdH, M)


def _spmv_ref(A_row, A_col, A_val, x):
    return np.array([A_val[A_row[i]:A_row[i + 1]] @ x[A_col[A_row[i]:A_row[i + 1]]]
                     for i in range(len(A_row) - 1)])


def _spmv_inputs(r, s):
    m, n = s + 1, s + 2
    dense = r.random((m, n)) * (r.random((m, n)) < 0.5)
    rows = np.concatenate([[0], np.cumsum((dense != 0).sum(1))]).astype(np.uint32)
    cols = np.nonzero(dense)[1].astype(np.uint32)
    vals = dense[dense != 0]
    if vals.size == 0:                      # keep one stored entry
        rows[1:] = 1
        cols, vals = np.zeros(1, np.uint32), np.zeros(1)
    return dict(A_row=rows, A_col=cols, A_val=vals, x=_r(r, n))


@register("spmv", "spmv", "A_row A_col A_val x", needs="inplace", ref=_spmv_ref, rtol=1e-9,
          inputs=_spmv_inputs)
def spmv(A_row, A_col, A_val, x):
    """spmv: sparse (CSR) matrix times vector: each stored value times x at its column,
    summed into its row (the rows from a scatter of the row starts and a cumsum)."""
    m, nnz = A_row.shape[0] - 1, A_val.shape[0]
    starts = np.minimum(A_row[1:-1].astype(np.int64), nnz)
    row_of = np.cumsum(scatter_add(np.zeros(nnz + 1, np.int64), starts, 1))[:nnz]
    prod = A_val * x[A_col.astype(np.int64)]
    return scatter_add(np.zeros(m, A_val.dtype), row_of, prod)


@register("stockham_fft", "stockham_fft", "R K x", static="R K", npb_out=(0,), rtol=1e-8,
          sizes=(1, 3), ref=lambda R, K, x: np.fft.fft(x),
          inputs=lambda r, s: dict(R=2 + s % 2, K=s + 1, x=_c(r, (2 + s % 2) ** (s + 1))))
def stockham_fft(R, K, x):
    """stockham_fft: radix-R Stockham FFT of length R**K: per stage a stride
    permutation, twiddle factors and an R-point DFT as a matmul."""
    n = R ** K
    k = np.arange(R)
    dft_mat = np.exp(-2.0j * np.pi * k[:, None] * k[None, :] / R)
    y = x
    for i in range(K):
        perm = np.transpose(np.reshape(y, (R ** i, R, R ** (K - i - 1))), (1, 0, 2))
        tw = np.exp(-2.0j * np.pi * k[:, None] * np.arange(R ** i)[None, :] / R ** (i + 1))
        t = np.reshape(perm * tw[:, :, None], (R, R ** (K - 1)))      # twiddled
        y = np.reshape(dft_mat @ t, (n,))                             # the R-point DFT
    return y


def _hdiff_ref(in_field, out_field, coeff):
    I, J, K = out_field.shape
    out = np.empty_like(out_field)
    lap = lambda i, j: 4 * in_field[i, j] - (in_field[i + 1, j] + in_field[i - 1, j]
                                             + in_field[i, j + 1] + in_field[i, j - 1])
    for i in range(I):
        for j in range(J):
            ii, jj = i + 2, j + 2

            def flx(a):        # flux between a and a + 1 in x
                r = lap(a + 1, jj) - lap(a, jj)
                return np.where(r * (in_field[a + 1, jj] - in_field[a, jj]) > 0, 0, r)

            def fly(b):
                r = lap(ii, b + 1) - lap(ii, b)
                return np.where(r * (in_field[ii, b + 1] - in_field[ii, b]) > 0, 0, r)

            out[i, j] = in_field[ii, jj] - coeff[i, j] * (flx(ii) - flx(ii - 1)
                                                          + fly(jj) - fly(jj - 1))
    return out


@register("hdiff", "weather_stencils/hdiff", "in_field out_field coeff", ref=_hdiff_ref,
          rtol=1e-9,
          inputs=lambda r, s: dict(in_field=_r(r, s + 4, s + 5, 3), out_field=_r(r, s, s + 1, 3),
                                   coeff=_r(r, s, s + 1, 3)))
def hdiff(in_field, out_field, coeff):
    """weather_stencils/hdiff: COSMO's fourth-order horizontal diffusion with flux
    limiting (out_field gives the output's shape)."""
    I, J = out_field.shape[0], out_field.shape[1]
    lap = 4.0 * in_field[1:I + 3, 1:J + 3] - (in_field[2:I + 4, 1:J + 3] + in_field[0:I + 2, 1:J + 3]
                                              + in_field[1:I + 3, 2:J + 4] + in_field[1:I + 3, 0:J + 2])
    res = lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]
    flx = np.where(res * (in_field[2:I + 3, 2:J + 2] - in_field[1:I + 2, 2:J + 2]) > 0, 0, res)
    res = lap[1:I + 1, 1:] - lap[1:I + 1, :-1]
    fly = np.where(res * (in_field[2:I + 2, 2:J + 3] - in_field[2:I + 2, 1:J + 2]) > 0, 0, res)
    return in_field[2:I + 2, 2:J + 2] - coeff * (flx[1:] - flx[:-1] + fly[:, 1:] - fly[:, :-1])


def _vadv_inputs(r, s):
    i, j, k = s, s + 1, s + 2
    return dict(utens_stage=_r(r, i, j, k), u_stage=_r(r, i, j, k), wcon=_r(r, i + 1, j, k),
                u_pos=_r(r, i, j, k), utens=_r(r, i, j, k), dtr_stage=3.0 / 20.0)


@register("vadv", "weather_stencils/vadv", "utens_stage u_stage wcon u_pos utens dtr_stage",
          needs="control_flow", inputs=_vadv_inputs, rtol=1e-9)
def vadv(utens_stage, u_stage, wcon, u_pos, utens, dtr_stage):
    """weather_stencils/vadv: COSMO's vertical advection, an implicit tridiagonal
    (Thomas) solve along k for every column: a forward ``scan`` and a reverse one."""
    K = utens_stage.shape[2]
    k = rnp.arange(K)
    w = wcon[1:] + wcon[:-1]                                       # (I, J, K)
    gav = np.where(k >= 1, -0.25 * w, 0.0)                         # none below k = 0
    gcv = np.where(k <= K - 2, 0.25 * np.concatenate([w[:, :, 1:], w[:, :, :1]], axis=2), 0.0)
    u_prev = np.concatenate([u_stage[:, :, :1], u_stage[:, :, :-1]], axis=2)
    u_next = np.concatenate([u_stage[:, :, 1:], u_stage[:, :, -1:]], axis=2)
    acol, ccol = gav * 0.5, gcv * 0.5                              # BET_P = BET_M = 0.5
    bcol = dtr_stage - acol - ccol
    corr = -(gav * 0.5) * (u_prev - u_stage) - (gcv * 0.5) * (u_next - u_stage)
    dcol = dtr_stage * u_pos + utens + utens_stage + corr

    def fwd(carry, xs):
        c_prev, d_prev = carry
        a, b, c, d = xs
        div = 1.0 / (b - c_prev * a)
        c, d = c * div, (d - d_prev * a) * div
        return (c, d), (c, d)

    front = lambda t: np.moveaxis(t, 2, 0)
    z = np.zeros_like(utens_stage[:, :, 0])
    _, (cs, ds) = scan(fwd, (z, z), (front(acol), front(bcol), front(ccol), front(dcol)))

    def back(nxt, xs):
        c, d = xs
        col = d - c * nxt
        return col, col

    _, cols = scan(back, z, (cs, ds), reverse=True)
    return dtr_stage * (np.moveaxis(cols, 0, 2) - u_pos)
