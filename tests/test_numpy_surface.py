"""The NumPy functions of relaxjax.numpy/_extras and _stats (grids, elementwise helpers,
combining, polynomials, counting and binning, order statistics, convolution, interpolation)
against NumPy: jitted on every backend and run eagerly, over hypothesis-drawn sizes (1,
primes, larger), with NumPy's result dtypes.  Related functions share one jitted function
per example to keep compiles few."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SIZES, SMALL_SIZES, arrays, assert_same, check

PER_OP = settings(max_examples=5, deadline=None)
F64 = dict(rtol=1e-10, atol=1e-10)


@given(n=SIZES, endpoint=st.booleans(), data=st.data())
@PER_OP
def test_linspace_logspace_against_numpy(n, endpoint, data):
    lo, hi = data.draw(st.floats(-5, 5), label="lo"), data.draw(st.floats(-5, 5), label="hi")
    check(lambda: (rnp.linspace(lo, hi, n, endpoint=endpoint),
                   rnp.linspace(lo, hi, n, dtype=np.int64),
                   rnp.logspace(lo, hi, n, endpoint=endpoint)),
          lambda: (np.linspace(lo, hi, n, endpoint=endpoint),
                   np.linspace(lo, hi, n, dtype=np.int64),
                   np.logspace(lo, hi, n, endpoint=endpoint)), **F64)
    # float32 bounds keep float32 (NEP 50: Python scalars and a Python base are weak)
    a = data.draw(arrays("float32", (3,)), label="a")
    check(lambda s: (rnp.linspace(s, 1.0, n), rnp.linspace(s, s + 1, n, axis=-1),
                     rnp.logspace(s, 1.0, n, base=2.0)),
          lambda s: (np.linspace(s, 1.0, n), np.linspace(s, s + 1, n, axis=-1),
                     np.logspace(s, 1.0, n, base=2.0)), a, rtol=1e-4, atol=1e-5)


def test_linspace_edges():
    assert_same(rnp.linspace(2.0, 3.0, 1), np.linspace(2.0, 3.0, 1))
    assert_same(rnp.linspace(2.0, 3.0, 0), np.linspace(2.0, 3.0, 0))
    y, step = rnp.linspace(0, 1, 5, retstep=True)
    assert_same(y, np.linspace(0, 1, 5))
    assert float(step) == 0.25
    assert np.isnan(rnp.linspace(0, 1, 1, retstep=True)[1])
    with pytest.raises(ValueError, match="non-negative"):
        rnp.linspace(0, 1, -1)


def test_symbolic_sizes_compile_once():
    """Sizes from x.shape[0] stay symbolic: one compile for three sizes."""
    def f(x):
        n = x.shape[0]
        g = rnp.linspace(0.0, 1.0, n)
        h = rnp.indices((n, 2))
        v = rnp.vander(x, 3)
        c = rnp.convolve(x, rnp.ones(3), "same")
        return g * x, h, v, c, rnp.median(x), rnp.bincount(rnp.arange(n) % 3, minlength=n)
    jf = rj.jit(f)
    for n in (4, 7, 13):
        x = np.arange(n, dtype=np.float64) * 0.5 - 1
        want = (np.linspace(0, 1, n) * x, np.indices((n, 2)), np.vander(x, 3),
                np.convolve(x, np.ones(3), "same"), np.median(x),
                np.bincount(np.arange(n) % 3, minlength=n))
        assert_same(jf(x), want, **F64)
    assert jf.cache_info().compiles == 1
    # a symbolic num that is 1 at run time: [start], step NaN
    g = rj.jit(lambda x: rnp.linspace(2.0, x[0], x.shape[0], retstep=True))
    for n in (3, 1):
        y, step = g(np.full(n, 5.0))
        assert_same(y, np.linspace(2.0, 5.0, n))
        assert_same(step, np.asarray(np.linspace(2.0, 5.0, n, retstep=True)[1]))


@given(n=SMALL_SIZES, m=SMALL_SIZES, data=st.data())
@PER_OP
def test_meshgrid_indices(n, m, data):
    x, y = data.draw(arrays("float32", (n,)), label="x"), data.draw(arrays("int32", (m,)), label="y")
    for kw in (dict(), dict(indexing="ij"), dict(sparse=True)):
        check(lambda a, b: rnp.meshgrid(a, b, **kw), lambda a, b: np.meshgrid(a, b, **kw), x, y)
    check(lambda a: rnp.indices(a.shape), lambda a: np.indices(a.shape), np.zeros((n, m)))
    assert_same(rnp.indices((n, 3), sparse=True), np.indices((n, 3), sparse=True))


@given(n=SIZES, dtype=st.sampled_from(["float64", "float32", "int32"]), data=st.data())
@PER_OP
def test_elementwise_helpers(n, dtype, data):
    x = data.draw(arrays(dtype, (n,), -3, 3), label="x")
    y = data.draw(arrays(dtype, (n,), -3, 3), label="y")
    x = x.copy()
    if dtype != "int32":
        x[::3] = y[::3] * (1 + 1e-7)           # some close pairs
        x[::5] = -0.0
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else F64

    def fns(m):
        return lambda a, b: (m.isclose(a, b), m.isclose(a, b, rtol=1e-3, atol=0.5), m.isclose(a, 1.0),
                             m.hypot(a, b), m.copysign(a, b), m.copysign(2.0, a), m.signbit(a),
                             m.heaviside(a, 0.5), m.sinc(a), m.real(a), m.imag(a), m.nan_to_num(a))
    check(fns(rnp), fns(np), x, y, **tol)
    assert rnp.allclose(x, x) is True
    assert rnp.allclose(x, y) == np.allclose(x, y)
    assert_same(rj.jit(lambda a, b: rnp.allclose(a, b))(x, y), np.asarray(np.allclose(x, y)))


def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], np.float32)
    y = np.array([np.nan, 1.0, np.nan, -0.0, 0.0, np.inf], np.float32)
    check(lambda a, b: (rnp.isclose(a, b, equal_nan=True), rnp.isclose(a, b), rnp.hypot(a, b),
                        rnp.copysign(1.0, a), rnp.copysign(a, b), rnp.heaviside(a, b),
                        rnp.nan_to_num(a), rnp.nan_to_num(a, nan=-1.0, posinf=9.0, neginf=-9.0),
                        rnp.signbit(b)),
          lambda a, b: (np.isclose(a, b, equal_nan=True), np.isclose(a, b), np.hypot(a, b),
                        np.copysign(1.0, a), np.copysign(a, b), np.heaviside(a, b),
                        np.nan_to_num(a), np.nan_to_num(a, nan=-1.0, posinf=9.0, neginf=-9.0),
                        np.signbit(b)), x, y)
    # large operands do not overflow
    big = np.array([1e200, 3e300]), np.array([1e200, 4e300])
    assert_same(rnp.hypot(*big), np.hypot(*big))


@given(n=SIZES, m=SMALL_SIZES, data=st.data())
@PER_OP
def test_counting_select_append(n, m, data):
    x = data.draw(arrays("int64", (n, m), -2, 2), label="x")
    f = data.draw(arrays("float32", (n, m)), label="f")
    check(lambda a, b: (rnp.count_nonzero(a, axis=0), rnp.count_nonzero(a, axis=1, keepdims=True),
                        rnp.count_nonzero(a), rnp.flatnonzero(a),
                        rnp.select([a > 0, a < -1], [b, b * 2], 7.0),
                        rnp.select([a > 0], [a], default=-1),
                        rnp.append(b, 1.0), rnp.append(a, a, axis=0), rnp.column_stack([a[:, 0], b]),
                        rnp.dstack([a, b]), rnp.atleast_3d(a[0])),
          lambda a, b: (np.count_nonzero(a, axis=0), np.count_nonzero(a, axis=1, keepdims=True),
                        np.asarray(np.count_nonzero(a)), np.flatnonzero(a),
                        np.select([a > 0, a < -1], [b, b * 2], 7.0),
                        np.select([a > 0], [a], default=-1),
                        np.append(b, 1.0), np.append(a, a, axis=0), np.column_stack([a[:, 0], b]),
                        np.dstack([a, b]), np.atleast_3d(a[0])), x, f, eager=False)
    assert rnp.count_nonzero(x) == np.count_nonzero(x) and isinstance(rnp.count_nonzero(x), int)
    with pytest.raises(TypeError, match="condlist"):
        rnp.select([x], [x])


@given(a_shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
       b_shape=st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple), data=st.data())
@PER_OP
def test_kron_rot90(a_shape, b_shape, data):
    a = data.draw(arrays("int32", a_shape), label="a")
    b = data.draw(arrays("float32", b_shape), label="b")
    check(rnp.kron, np.kron, a, b)
    m = data.draw(arrays("float64", a_shape + (3,)), label="m")
    for k in (-1, 0, 1, 2, 3):
        check(lambda v: rnp.rot90(v, k), lambda v: np.rot90(v, k), m)
    check(lambda v: rnp.rot90(v, 1, axes=(-1, 0)), lambda v: np.rot90(v, 1, axes=(-1, 0)), m)
    with pytest.raises(ValueError, match="axes"):
        rnp.rot90(m, 1, axes=(0, 0))


@given(n=SIZES, data=st.data())
@PER_OP
def test_cross(n, data):
    a = data.draw(arrays("float64", (n, 3)), label="a")
    b = data.draw(arrays("float64", (n, 3)), label="b")
    c = data.draw(arrays("int32", (3, n)), label="c")
    check(lambda u, v, w: (rnp.cross(u, v), rnp.cross(u, w, axisb=0), rnp.cross(u[:, :2], v),
                           rnp.cross(u.T, v.T, axis=0)),
          # a 2-vector is a 3-vector with z = 0 (NumPy < 2.5; 2.5 refuses 2-vectors)
          lambda u, v, w: (np.cross(u, v), np.cross(u, w, axisb=0), np.cross(np.pad(u[:, :2], ((0, 0), (0, 1))), v),
                           np.cross(u.T, v.T, axis=0)), a, b, c, **F64)
    with pytest.raises(ValueError, match="dimension must be 2 or 3"):
        rnp.cross(np.ones(4), np.ones(4))
    k = rj.dim("k")
    g = rj.jit(lambda u: rnp.cross(u, u), shapes=(rj.ShapeDtypeStruct((n, k), "float64"),))
    with pytest.raises(rj.ShapeError, match="cross: the vector length"):
        g(a)


@given(n=SIZES, cols=st.integers(0, 6), data=st.data())
@PER_OP
def test_vander_polyval(n, cols, data):
    x = data.draw(arrays("float32", (n,), -2, 2), label="x")
    i = data.draw(arrays("int32", (n,), -3, 3), label="i")
    p = data.draw(arrays("float64", (cols + 1,), -3, 3), label="p")
    check(lambda v, w: (rnp.vander(v, cols), rnp.vander(v, cols, increasing=True), rnp.vander(w)),
          lambda v, w: (np.vander(v, cols), np.vander(v, cols, increasing=True), np.vander(w)),
          x, i, rtol=1e-6, atol=1e-6)
    check(lambda c, v, w: (rnp.polyval(c, v), rnp.polyval(w, w)),
          lambda c, v, w: (np.polyval(c, v), np.polyval(w, w)), p, x, i, **F64)


@given(shape=st.lists(SMALL_SIZES, min_size=1, max_size=3).map(tuple), data=st.data())
@PER_OP
def test_nan_reductions_and_average(shape, data):
    x = data.draw(arrays("float64", shape), label="x").copy()
    x.flat[::4] = np.nan
    ax = data.draw(st.sampled_from([None, 0, -1]), label="axis")
    w = data.draw(arrays("float32", (shape[-1],), 0.5, 3), label="w")
    i = data.draw(arrays("int16", shape), label="i")
    check(lambda a, v, k: (rnp.nansum(a, axis=ax), rnp.nanmean(a, axis=ax, keepdims=True),
                           rnp.nansum(k, axis=ax), rnp.nanmean(k),
                           rnp.average(k, axis=ax), rnp.average(k, axis=-1, weights=v),
                           rnp.average(a, axis=-1, weights=v, returned=True)),
          lambda a, v, k: (np.nansum(a, axis=ax), np.nanmean(a, axis=ax, keepdims=True),
                           np.nansum(k, axis=ax), np.nanmean(k),
                           np.average(k, axis=ax), np.average(k, axis=-1, weights=v),
                           np.average(a, axis=-1, weights=v, returned=True)), x, w, i, **F64)


def _sorted_unique(data, n, dtype, label):
    v = np.sort(data.draw(arrays(dtype, (n,), -20, 20), label=label))
    return v


@given(n=SIZES, m=SMALL_SIZES, side=st.sampled_from(["left", "right"]), data=st.data())
@PER_OP
def test_searchsorted_digitize(n, m, side, data):
    a = _sorted_unique(data, n, "float64", "a")
    v = data.draw(arrays("float64", (m, 2), -25, 25), label="v").copy()
    v[0, 0] = a[0]                                       # exact hits
    check(lambda s, t: (rnp.searchsorted(s, t, side), rnp.searchsorted(s, 0.5, side),
                        rnp.digitize(t, s), rnp.digitize(t, s, right=True),
                        rnp.digitize(t, s[::-1]), rnp.digitize(t, s[::-1], right=True)),
          lambda s, t: (np.searchsorted(s, t, side), np.asarray(np.searchsorted(s, 0.5, side)),
                        np.digitize(t, s), np.digitize(t, s, right=True),
                        np.digitize(t, s[::-1]), np.digitize(t, s[::-1], right=True)), a, v)
    perm = np.argsort(a[::-1], kind="stable")
    check(lambda s, t, p: rnp.searchsorted(s, t, side, sorter=p),
          lambda s, t, p: np.searchsorted(s, t, side, sorter=p), a[::-1].copy(), v, perm)
    nan_a = np.array([1.0, 2.0, np.nan])
    assert_same(rnp.searchsorted(nan_a, np.array([np.nan, 1.5, 3.0]), side),
                np.searchsorted(nan_a, np.array([np.nan, 1.5, 3.0]), side))


@given(n=SIZES, length=st.integers(1, 12), data=st.data())
@PER_OP
def test_bincount(n, length, data):
    x = data.draw(arrays("int32", (n,), 0, length - 1), label="x")
    w = data.draw(arrays("float32", (n,)), label="w")
    check(lambda a, b: (rnp.bincount(a, minlength=length), rnp.bincount(a, b, minlength=length)),
          lambda a, b: (np.bincount(a, minlength=length), np.bincount(a, b, minlength=length)),
          x, w, rtol=1e-6, atol=1e-5)
    assert_same(rnp.bincount(x), np.bincount(x))          # eagerly: NumPy's length
    with pytest.raises(ValueError, match="minlength"):
        rj.jit(rnp.bincount)(x)
    with pytest.raises(TypeError, match="safe"):
        rnp.bincount(w)


@given(n=SIZES, bins=st.integers(1, 12), dtype=st.sampled_from(["float64", "float32", "int32"]),
       data=st.data())
@PER_OP
def test_histogram(n, bins, dtype, data):
    a = data.draw(arrays(dtype, (n,), -10, 10), label="a")
    w = data.draw(arrays("float64", (n,), 0, 2), label="w")
    edges = np.sort(data.draw(arrays("float64", (bins + 1,), -12, 12), label="edges"))
    edges = edges + np.arange(bins + 1) * 1e-3                           # strictly increasing
    check(lambda v, u, e: (rnp.histogram(v, bins), rnp.histogram(v, bins, range=(-5, 5.5)),
                           rnp.histogram(v, bins, weights=u), rnp.histogram(v, e),
                           rnp.histogram(v, e, weights=u), rnp.histogram(v, bins, density=True)),
          lambda v, u, e: (np.histogram(v, bins), np.histogram(v, bins, range=(-5, 5.5)),
                           np.histogram(v, bins, weights=u), np.histogram(v, e),
                           np.histogram(v, e, weights=u), np.histogram(v, bins, density=True)),
          a, w, edges, **F64)
    with pytest.raises(NotImplementedError, match="bins='auto'"):
        rnp.histogram(a, "auto")


@given(n=SIZES, m=SMALL_SIZES, mode=st.sampled_from(["full", "same", "valid"]), data=st.data())
@PER_OP
def test_convolve(n, m, mode, data):
    a = data.draw(arrays("float64", (n,)), label="a")
    v = data.draw(arrays("float64", (m,)), label="v")
    k = data.draw(arrays("int32", (m,)), label="k")
    check(lambda x, y, z: (rnp.convolve(x, y, mode), rnp.convolve(y, x, mode), rnp.convolve(z, z, mode)),
          lambda x, y, z: (np.convolve(x, y, mode), np.convolve(y, x, mode), np.convolve(z, z, mode)),
          a, v, k, rtol=1e-9, atol=1e-9)


@given(shape=st.lists(SIZES, min_size=1, max_size=2).map(tuple),
       dtype=st.sampled_from(["float64", "float32", "int32"]), data=st.data())
@PER_OP
def test_median_percentile_quantile(shape, dtype, data):
    x = data.draw(arrays(dtype, shape), label="x")
    ax = data.draw(st.sampled_from([None, 0, -1]), label="axis")
    q = data.draw(st.floats(0, 100), label="q")
    qs = np.array([0.0, 12.5, q, 50.0, 100.0])
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else F64
    check(lambda v, p: (rnp.median(v, axis=ax), rnp.median(v, axis=ax, keepdims=True),
                        rnp.percentile(v, q, axis=ax), rnp.percentile(v, p, axis=ax),
                        rnp.quantile(v, q / 100, axis=ax, keepdims=True), rnp.quantile(v, p / 100)),
          lambda v, p: (np.median(v, axis=ax), np.median(v, axis=ax, keepdims=True),
                        np.percentile(v, q, axis=ax), np.percentile(v, p, axis=ax),
                        np.quantile(v, q / 100, axis=ax, keepdims=True), np.quantile(v, p / 100)),
          x, qs, **tol)
    if dtype != "int32" and x.size > 1:
        y = x.copy()
        y.flat[1] = np.nan
        check(lambda v: (rnp.median(v, axis=ax), rnp.percentile(v, 30, axis=ax)),
              lambda v: (np.median(v, axis=ax), np.percentile(v, 30, axis=ax)), y, **tol)
    with pytest.raises(NotImplementedError, match="nearest"):
        rnp.quantile(x, 0.5, method="nearest")
    with pytest.raises(ValueError, match="range"):
        rnp.percentile(x, 101)


@given(n=SIZES, m=st.integers(1, 30), data=st.data())
@PER_OP
def test_interp(n, m, data):
    xp = np.unique(data.draw(arrays("float64", (m,), -10, 10), label="xp"))
    fp = data.draw(arrays("float32", (len(xp),)), label="fp")
    x = data.draw(arrays("float64", (n,), -12, 12), label="x").copy()
    x[0] = xp[-1]
    check(lambda a, b, c: (rnp.interp(a, b, c), rnp.interp(a, b, c, left=-100.0, right=100.0)),
          lambda a, b, c: (np.interp(a, b, c), np.interp(a, b, c, left=-100.0, right=100.0)),
          x, xp, fp, **F64)


@pytest.mark.parametrize("backend", [*BACKENDS, "cuda-emulated"])
def test_numpy_functions_dispatch_on_traced_arrays(backend):
    """NumPy's own functions on traced arrays reach relaxjax.numpy (NEP 18), on every
    backend (the CUDA C too, through the CPU emulator)."""
    x = np.linspace(-2, 3, 11)

    def fns(m):
        return lambda a: (m.isclose(a, a * 1.0000001), m.median(a), m.percentile(a, [10, 90]),
                          m.histogram(a, 4), m.interp(a, a[::2], a[::2] ** 2),
                          m.convolve(a, a[:3]), m.searchsorted(a, a[3]), m.nansum(a),
                          m.kron(a[:2], a[:3]), m.cross(a[:3], a[3:6]), m.sinc(a),
                          m.vander(a[:4]), m.polyval(a[:3], a), m.rot90(m.outer(a, a)),
                          m.bincount((a > 0).astype(np.int64), minlength=3), m.hypot(a, a),
                          m.copysign(a, -a), m.select([a > 0], [a]), m.meshgrid(a, a[:2]))
    assert_same(rj.jit(fns(np), backend=backend)(x), fns(np)(x), **F64)
