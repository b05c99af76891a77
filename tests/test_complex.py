"""complex64 and complex128 end to end: tracing and NumPy 2 promotion, every supported op
against NumPy on every backend (SplitComplex rewrites complex values into real parts before
any backend sees them), the function boundary (packed views in and out), control flow,
constants, the printed IR, and clear errors for what has no complex version."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st
from hypothesis.extra import numpy as hnp

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SMALL_SIZES, shapes

C64, C128 = np.dtype("complex64"), np.dtype("complex128")
CDTYPES = [C64, C128]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if np.dtype(dtype) in (C64, np.float32) else \
        dict(rtol=1e-12, atol=1e-12)


def carrays(dtype, shape, lo=-4.0, hi=4.0):
    """Complex arrays of ``dtype`` whose parts are floats in [lo, hi]."""
    fd = np.float32 if np.dtype(dtype) == C64 else np.float64
    part = hnp.arrays(fd, shape, elements=st.floats(lo, hi, width=np.dtype(fd).itemsize * 8,
                                                    allow_subnormal=False))
    return st.tuples(part, part).map(lambda p: (p[0] + 1j * p[1]).astype(dtype))


def cx(dtype, min_dims=0, max_dims=3, **kw):
    return shapes(min_dims, max_dims, SMALL_SIZES).flatmap(lambda s: carrays(dtype, s, **kw))


_JITS: dict = {}


def jitted(key, fn, backend):
    """One jitted function per (key, backend), reused across examples: later examples run
    an entry traced for other sizes (automatic dims)."""
    return _JITS.setdefault((key, backend), rj.jit(fn, backend=backend))


def oracle(np_fn, *args):
    """NumPy on the arguments (the expected dtype) and on complex128 upcasts (the values)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        want = np.asarray(np_fn(*args))
        up = [a.astype(C128) if isinstance(a, np.ndarray) and a.dtype.kind == "c" else a
              for a in args]
        val = np.asarray(np_fn(*up))
    return want.dtype, val


def check_all(key, fn, np_fn, *args, tolerance=None):
    dtype, val = oracle(np_fn, *args)
    t = tolerance or tol(dtype)
    for b in BACKENDS:
        with np.errstate(all="ignore"):
            got = np.asarray(jitted(key, fn, b)(*args))
        assert got.dtype == dtype, (key, b, got.dtype, dtype)
        assert got.shape == val.shape, (key, b, got.shape, val.shape)
        if dtype.kind in "fc":
            g = got.astype(val.dtype)
            # where the exact value overflows (float32's range for complex64; for complex128
            # an infinite oracle), the result is inf or NaN in some part, which part
            # depending on the formula's order (NumPy's complex128 power of 3e-86 to
            # -4+1e-101j is inf-4e245j, exp(w log z) gives inf-infj): compared only where
            # the value is representable
            limit = np.finfo(np.float32 if dtype in (C64, np.float32) else np.float64).max / 4
            with np.errstate(all="ignore"):
                big = ~(np.abs(val) <= limit) & ~np.isnan(val)
            g, v = np.where(big, 0, g), np.where(big, 0, val)
            np.testing.assert_allclose(g, v, equal_nan=True, err_msg=f"{key} {b}", **t)
        else:
            np.testing.assert_array_equal(got, val, err_msg=f"{key} {b}")
    return val


UNARY = {
    "neg": lambda x: -x, "abs": abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "log10": np.log10, "log2": np.log2, "conj": np.conj, "conj_method": lambda x: x.conj(),
    "real": np.real, "imag": np.imag, "real_attr": lambda x: x.real, "imag_attr": lambda x: x.imag,
    "angle": np.angle, "angle_deg": lambda x: np.angle(x, deg=True), "reciprocal": np.reciprocal,
    "sign": np.sign, "square": lambda x: x ** 2, "cube": lambda x: x ** 3,
    "inverse_square": lambda x: x ** -2, "pow_float": lambda x: np.power(x, 0.5),
    "pow_big_int": lambda x: x ** 7, "isnan": np.isnan, "isfinite": np.isfinite, "isinf": np.isinf,
    "to_c64": lambda x: x.astype(np.complex64), "to_c128": lambda x: x.astype(np.complex128),
    "to_bool": lambda x: x.astype(bool), "iscomplex": np.iscomplex, "isreal": np.isreal,
    "div_by_zero": lambda x: x / (x * 0), "times_1j": lambda x: x * 1j, "plus_scalar": lambda x: 2.5 - x,
}


@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary(name, dtype, data):
    x = data.draw(cx(dtype))
    if name in ("inverse_square", "reciprocal"):
        x = np.where(x == 0, 1, x).astype(dtype)
    fn = UNARY[name]
    check_all(("unary", name, dtype), fn, fn, x)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "pow": np.power, "eq": np.equal, "ne": np.not_equal,
    "where": lambda x, y: np.where(np.real(x) > np.imag(y), x, y),
    "square_plus": lambda x, y: x ** 2 + y, "mul_conj": lambda x, y: x * np.conj(y),
}


@st.composite
def broadcast_pair(draw, dtype):
    s = draw(shapes(1, 3, SMALL_SIZES))
    k = draw(st.integers(0, len(s)))
    t = tuple(1 if draw(st.booleans()) else d for d in s[k:])     # a broadcastable suffix
    return draw(carrays(dtype, s)), draw(carrays(dtype, t))


@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary(name, dtype, data):
    x, y = data.draw(broadcast_pair(dtype))
    if name == "pow":                        # keep |x^y| moderate: |y| small
        y = (y / 4).astype(dtype)
    fn = BINARY[name]
    tols = [None, None]
    if name == "pow" and dtype == C64:
        # z ** w = exp(w log z): single precision rounds w log z, so the result carries a
        # relative error of about eps32 * |w log z| (a tiny base has a large log): that much
        # tolerance, as NumPy's own complex64 power needs against a complex128 oracle
        for k, (z, w) in enumerate(((x, y), (y, x))):
            with np.errstate(all="ignore"):
                lz = np.log(z.astype(np.complex128))
                big = np.nan_to_num(np.abs(w.astype(np.complex128) * lz), nan=0.0, posinf=0.0)
            rt = 1e-5 * (1.0 + float(np.max(big, initial=0.0)))
            tols[k] = dict(rtol=rt, atol=rt)
    check_all(("binary", name, dtype), fn, fn, x, y, tolerance=tols[0])
    check_all(("binary_r", name, dtype), lambda a, b: fn(b, a), lambda a, b: fn(b, a), x, y,
              tolerance=tols[1])


def test_numpy_formulas_on_many_values():
    """Multiply, Smith's division and small integer powers use NumPy's formulas: equal to
    rounding (NumPy's SIMD loops and LLVM may fuse multiply-adds) on every backend, for
    values of every size, including where Smith's algorithm switches branches."""
    r = np.random.default_rng(1)
    x = r.standard_normal(257) * 10.0 ** r.integers(-5, 5, 257) + 1j * r.standard_normal(257)
    y = r.standard_normal(257) + 1j * r.standard_normal(257) * 10.0 ** r.integers(-5, 5, 257)
    want = (x * y, x / y, x ** 3, x ** -3, y / x)
    for b in BACKENDS:
        got = rj.jit(lambda x, y: (x * y, x / y, x ** 3, x ** -3, y / x), backend=b)(x, y)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-14, atol=0)


def test_special_values_of_abs_sqrt_pow():
    big, inf, nan = 1e300, np.inf, np.nan
    x = np.array([big + big * 1j, 3e-200 + 4e-200j, inf + nan * 1j, 0j, -0.0 - 0j, -4 - 0j, -4 + 0j,
                  1 + inf * 1j, 1e308 + 1e308j], complex)
    for b in BACKENDS:
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(jitted("abs_sv", abs, b)(x), abs(x), rtol=1e-14)
            np.testing.assert_allclose(jitted("sqrt_sv", np.sqrt, b)(x), np.sqrt(x), rtol=1e-14)
            z = np.array([0j, 0j, 0j, 2 + 1j])
            p = np.array([2 + 0j, -1 + 0j, 1j, 0j])
            np.testing.assert_allclose(jitted("pow_sv", np.power, b)(z, p), z ** p, equal_nan=True)


# ---------------------------------------------------------------------------------------
# Promotion (NumPy 2 / NEP 50: Python complex is weak)
# ---------------------------------------------------------------------------------------

ARRAY_DTYPES = ["bool", "int8", "int32", "int64", "uint16", "float16", "float32", "float64",
                "complex64", "complex128"]
SCALARS = {"1j": 1j, "2+0j": 2 + 0j, "np.complex64": np.complex64(1j),
           "np.complex128": np.complex128(1j), "float": 2.5, "int": 3}


@pytest.mark.parametrize("scalar", sorted(SCALARS))
@pytest.mark.parametrize("dtype", ARRAY_DTYPES)
def test_promotion_table(dtype, scalar):
    x = np.arange(1, 4).astype(dtype)
    s = SCALARS[scalar]
    want = (x * s).dtype
    ir = rj.make_ir(lambda x: x * s)(x)
    assert np.dtype(ir.main.results[0].type.dtype) == want
    got = rj.jit(lambda x: x * s)(x)
    assert got.dtype == want
    np.testing.assert_allclose(got, x * s, rtol=1e-3 if dtype == "float16" else 1e-6)
    assert rnp.result_type(x, s) == np.result_type(x, s)


def test_complex_arrays_promote_with_real_arrays():
    x32, x64 = np.ones(3, np.float32), np.ones(3)
    c64, c128 = np.full(3, 1j, np.complex64), np.full(3, 1j)
    for a, b in ((x32, c64), (x64, c64), (x32, c128), (np.arange(3, dtype=np.int16), c64)):
        got = rj.jit(lambda a, b: a + b)(a, b)
        assert got.dtype == (a + b).dtype
        np.testing.assert_allclose(got, a + b)


# ---------------------------------------------------------------------------------------
# Layout, indexing, reductions, matmul, linalg
# ---------------------------------------------------------------------------------------

LAYOUT = {
    "reshape": lambda x: x.reshape(-1), "transpose": lambda x: x.T, "flip": lambda x: x[::-1],
    "slice": lambda x: x[1:], "newaxis": lambda x: x[None], "concat": lambda x: np.concatenate([x, 2 * x]),
    "stack": lambda x: np.stack([x, x]), "repeat": lambda x: np.repeat(x, 2, axis=0),
    "broadcast": lambda x: np.broadcast_to(x, (2,) + x.shape), "take": lambda x: x[np.array([0, 0])],
    "mask": lambda x: x[np.real(x) > 0], "pad": lambda x: np.pad(x, 1),
    "sum": lambda x: np.sum(x, axis=0), "sum_all": np.sum, "mean": lambda x: np.mean(x, axis=-1),
    "cumsum": lambda x: np.cumsum(x, axis=0), "tile": lambda x: np.tile(x, 2),
    "copy": lambda x: x.copy(), "where_scalar": lambda x: np.where(np.abs(x) > 1, x, 1 - 2j),
}


@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(LAYOUT))
@given(data=st.data())
def test_layout_and_reductions(name, dtype, data):
    x = data.draw(cx(dtype, min_dims=1))
    if name == "where_scalar":
        # |x| at the threshold within rounding: complex64 and the complex128 oracle may
        # choose differently (|1 + 1.2e-7j| is 1 in float32, above 1 in float64)
        assume(np.all(np.abs(np.abs(x.astype(C128)) - 1) > 1e-4))
    fn = LAYOUT[name]
    t = None
    if dtype == C64 and name in ("sum", "sum_all", "mean", "cumsum"):
        t = dict(rtol=1e-3, atol=1e-5 * x.size)      # float32 sums: rounding grows with n
    check_all(("layout", name, dtype), fn, fn, x, tolerance=t)


def _at_set(x):
    return x.at[0].set(5j)


def _at_add(x):
    return x.at[np.array([0, 0, 1]) % x.shape[0]].add(1 + 1j)


def _setitem(x):
    x[1:] = x[:-1] * 2j
    return x


@pytest.mark.parametrize("fn, np_fn", [
    (_at_set, lambda x: np.concatenate([np.full((1,) + x.shape[1:], 5j, x.dtype), x[1:]])),
    (_at_add, lambda x: x + np.bincount(np.array([0, 0, 1]) % x.shape[0], minlength=x.shape[0]).reshape(
        (-1,) + (1,) * (x.ndim - 1)).astype(x.dtype) * (1 + 1j)),
    (_setitem, lambda x: np.concatenate([x[:1], x[:-1] * 2j])),
], ids=["at_set", "at_add", "setitem"])
@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
def test_updates(fn, np_fn, dtype):
    x = (np.arange(12).reshape(4, 3) + 1j * np.arange(12).reshape(4, 3)[::-1]).astype(dtype)
    check_all(("update", fn.__name__, dtype), fn, np_fn, x)


@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
@given(m=SMALL_SIZES, k=SMALL_SIZES, n=st.sampled_from([1, 2, 5, 17]), data=st.data())
def test_matmul(dtype, m, k, n, data):
    a = data.draw(carrays(dtype, (m, k)))
    b = data.draw(carrays(dtype, (k, n)))
    check_all(("matmul", dtype), lambda a, b: a @ b, lambda a, b: a @ b, a, b,
              tolerance=dict(rtol=1e-4, atol=1e-4 * k) if dtype == C64 else None)
    real = b.real.astype(np.float32 if dtype == C64 else np.float64)
    check_all(("matmul_real", dtype), lambda a, b: a @ b, lambda a, b: a @ b, a, real,
              tolerance=dict(rtol=1e-4, atol=1e-4 * k) if dtype == C64 else None)


@pytest.mark.parametrize("dtype", CDTYPES, ids=str)
@given(n=st.sampled_from([1, 2, 3, 7, 16]), batch=st.sampled_from([(), (1,), (3,)]),
       k=st.sampled_from([1, 4]), seed=st.integers(0, 2 ** 16))
def test_linalg_inv_solve(dtype, n, batch, k, seed):
    r = np.random.default_rng(seed)
    a = (r.standard_normal(batch + (n, n)) + 1j * r.standard_normal(batch + (n, n))
         + 4 * n * np.eye(n)).astype(dtype)
    b = (r.standard_normal((n, k)) + 1j * r.standard_normal((n, k))).astype(dtype)
    v = (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(dtype)
    t = dict(rtol=1e-4, atol=1e-5) if dtype == C64 else dict(rtol=1e-10, atol=1e-12)
    check_all(("inv", dtype), np.linalg.inv, np.linalg.inv, a, tolerance=t)
    check_all(("solve", dtype), np.linalg.solve, np.linalg.solve, a, b, tolerance=t)
    if not batch:
        check_all(("solve_v", dtype), np.linalg.solve, np.linalg.solve, a, v, tolerance=t)
    check_all(("norm", dtype), np.linalg.norm, np.linalg.norm, a, tolerance=t)


def test_singular_complex_matrix_raises():
    for b in BACKENDS:
        with pytest.raises(np.linalg.LinAlgError):
            rj.jit(np.linalg.inv, backend=b)(np.ones((3, 3), complex))
        with pytest.raises(np.linalg.LinAlgError):
            rj.jit(np.linalg.solve, backend=b)(np.ones((3, 3), complex), np.ones(3, complex))


def test_complex_solve_and_inv_call_complex_lapack():
    """Complex systems go to the complex library functions (zgetrf on the CPU) on packed
    values, not to a real system of twice the size."""
    a = np.eye(4, dtype=complex) * (2 + 1j)
    for f, args, name in ((np.linalg.solve, (a, np.ones(4, complex)), "linalg.zsolve"),
                          (np.linalg.inv, (a,), "linalg.zinv")):
        text = rj.jit(f).lower(*args).compile().as_text("optimized")
        assert f'"{name}"' in text and '"linalg.solve"' not in text, text


# ---------------------------------------------------------------------------------------
# The boundary: arguments, results, scalars, constants
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_and_no_mutation(backend):
    r = np.random.default_rng(0)
    base = r.standard_normal((8, 6)) + 1j * r.standard_normal((8, 6))
    keep = base.copy()
    f = rj.jit(lambda x, y: x * y + 1, backend=backend)
    for x, y in ((base[::2, 1:4], base[1::2, :3]), (base.T[:3, ::3], base.T[2:5, 1::3]),
                 (base[:, 2], base[::-1, 0])):
        assert not x.flags.c_contiguous or not y.flags.c_contiguous or x.ndim == 1
        np.testing.assert_allclose(f(x, y), x * y + 1, rtol=1e-14)
    np.testing.assert_array_equal(base, keep)
    part = np.ascontiguousarray(base.real) + 0j        # a view's parts are not changed
    out = f(part, part)
    assert not np.shares_memory(out, part)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_zero_d_and_results(backend):
    f = rj.jit(lambda x, s: (x * s, np.real(x), x + 0 * s, abs(s)), backend=backend)
    x = np.complex64(1 + 2j)
    got = f(np.asarray(x), 2 - 1j)
    want = (np.asarray(x) * (2 - 1j), np.float32(1), np.asarray(x) + 0 * (2 - 1j), abs(2 - 1j))
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == () and g.dtype == np.asarray(w).dtype, (g.dtype, np.asarray(w).dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6)
    y = np.array([1 + 1j, 2 - 2j])
    ident = rj.jit(lambda v: v, backend=backend)(y)
    assert ident.dtype == C128 and ident.flags.writeable and not np.shares_memory(ident, y)
    ident[0] = 0
    assert y[0] == 1 + 1j
    # a numpy complex scalar argument is strong
    assert rj.jit(lambda v, s: v * s, backend=backend)(np.ones(2, np.complex64), np.complex128(1j)).dtype == C128


@pytest.mark.parametrize("backend", BACKENDS)
def test_constants_statics_and_creation(backend):
    table = np.exp(1j * np.arange(5.0))
    f = rj.jit(lambda x, s: (x * table + s, rnp.zeros(x.shape, rnp.complex64) + x.real.astype(np.float32),
                             rnp.full((2,), 1 - 2j), rnp.ones(3, dtype=complex) * 1j),
               static_argnums=(1,), backend=backend)
    x = np.linspace(0, 1, 5) + 0.5j
    got = f(x, 2 + 3j)
    want = (x * table + (2 + 3j), np.zeros(5, np.complex64) + x.real.astype(np.float32),
            np.full((2,), 1 - 2j), np.ones(3, complex) * 1j)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
    table[0] = 99           # captured arrays are constants of the trace
    np.testing.assert_allclose(f(x, 2 + 3j)[0], want[0], rtol=1e-12)
    assert f(x, 1j)[0][1] == x[1] * np.exp(1j) + 1j     # a new static value traces anew


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_flow_carries_complex(backend):
    z0 = np.linspace(-1, 1, 7) * (0.3 + 0.2j)
    c = 0.1 - 0.2j

    def mandel(z):
        return rj.lax.fori_loop(0, 6, lambda i, z: np.where(abs(z) < 2, z * z + c, z), z)

    def scanned(xs):
        return rj.lax.scan(lambda s, x: (s * 0.5 + x, s * x), 0j, xs)

    def branch(z):
        return rj.lax.cond(np.sum(z.real) > 0, lambda z: z * 1j, lambda z: -z, z)

    want = z0
    for _ in range(6):
        want = np.where(abs(want) < 2, want * want + c, want)
    np.testing.assert_allclose(rj.jit(mandel, backend=backend)(z0), want, rtol=1e-13)
    s, ys = rj.jit(scanned, backend=backend)(z0)
    ws, wys = 0j, []
    for x in z0:
        wys.append(ws * x)
        ws = ws * 0.5 + x
    np.testing.assert_allclose(s, ws, rtol=1e-13)
    np.testing.assert_allclose(ys, wys, rtol=1e-13)
    for z in (z0, -z0):
        np.testing.assert_allclose(rj.jit(branch, backend=backend)(z),
                                   z * 1j if z.real.sum() > 0 else -z)


def test_eager_is_numpy():
    x = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    for fn in (rnp.exp, rnp.sqrt, rnp.conj, rnp.real, rnp.imag, rnp.angle, rnp.abs):
        got, want = fn(x), getattr(np, fn.__name__ if fn is not rnp.abs else "abs")(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert rnp.iscomplexobj(x) and not rnp.iscomplexobj(x.real)


def test_astype_to_real_warns_and_keeps_real_part():
    x = np.array([1 + 2j, -3 - 4j])
    with pytest.warns(np.exceptions.ComplexWarning):
        got = rj.jit(lambda x: x.astype(np.float32))(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.float32([1, -3]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rj.jit(lambda x: x.astype(np.complex64))(x).dtype == C64


# ---------------------------------------------------------------------------------------
# The IR
# ---------------------------------------------------------------------------------------

def test_ir_prints_complex_and_backends_see_none(tmp_path, monkeypatch):
    def f(x, y):
        return np.exp(x * 1j) @ y, abs(x)

    x, y = np.ones((3, 4), np.complex64), np.ones((4, 2), np.complex64)
    lowered = rj.jit(f).lower(x, y)
    traced = lowered.as_text()
    assert "x: c64[x0, x1]" in traced and "c64[x0, y1] = matmul(b, y)" in traced
    optimized = lowered.as_text("optimized")
    assert "c64" not in optimized and "c128" not in optimized
    assert "complex_params=(0, 1)" in optimized and "complex_results=(0,)" in optimized
    assert "f32[x0, x1, 2]" in optimized
    dump = tmp_path / "ir.txt"
    monkeypatch.setenv("RELAXJAX_DUMP_IR", str(dump))
    rj.jit(f)(x, y)
    text = dump.read_text()
    assert "IR after SplitComplex" in text
    after = text.split("IR after SplitComplex")[1].split("# ----")[0]
    assert "c64" not in after


def test_custom_pipeline_splits_first():
    from relaxjax.compile.simplify import canonicalize
    f = rj.jit(lambda x: x * x, pipeline=[canonicalize])
    x = np.array([1 + 1j, 2j])
    np.testing.assert_allclose(f(x), x * x)


# ---------------------------------------------------------------------------------------
# What raises
# ---------------------------------------------------------------------------------------

UNSUPPORTED = {
    "less": (lambda x: x < x, "lt"), "maximum": (lambda x: np.maximum(x, x), "max"),
    "max": (lambda x: np.max(x), "reduce_max"), "sort": (lambda x: np.sort(x), "sort"),
    "argmax": (lambda x: np.argmax(x), "argmax"), "prod": (lambda x: np.prod(x), "reduce_prod"),
    "cumprod": (lambda x: np.cumprod(x), "cumprod"), "sin": (lambda x: np.sin(x), "sin"),
    "floor_divide": (lambda x: x // x, "floor_div"),
    "at_multiply": (lambda x: x.at[np.array([0])].multiply(2j), "scatter"),
    "det": (lambda x: np.linalg.det(x.reshape(1, 1)), "linalg.det"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_ops_raise_naming_op_and_dtype(name):
    fn, op = UNSUPPORTED[name]
    with pytest.raises(TypeError) as e:
        rj.jit(fn)(np.array([1 + 1j], np.complex64))
    msg = str(e.value)
    assert op in msg and "complex" in msg, msg


def test_library_call_with_complex_operand_is_refused():
    from relaxjax import ShapeDtypeStruct
    f = rj.jit(lambda x: rj.call_library("linalg.inv", x, out=ShapeDtypeStruct(x.shape, "float64")))
    with pytest.raises(TypeError, match="library function linalg.inv takes or returns complex"):
        f(np.eye(2, dtype=complex))


def test_shape_errors_still_name_the_shapes():
    with pytest.raises(rj.ShapeError):
        rj.jit(lambda x, y: x + y, shapes=(rj.ShapeDtypeStruct(("n",), "complex64"),
                                           rj.ShapeDtypeStruct(("m",), "complex64"))).lower(
            rj.ShapeDtypeStruct(("n",), "complex64"), rj.ShapeDtypeStruct(("m",), "complex64"))
    g = rj.jit(lambda x: x * 2, shapes=(rj.ShapeDtypeStruct(("n",), "complex64"),))
    with pytest.raises(TypeError, match="complex64"):
        g(np.ones(3, np.complex128))
    np.testing.assert_allclose(g(np.ones(3, np.complex64) * 1j), 2j * np.ones(3))
    h = rj.jit(lambda s: s * 2, shapes=(rj.ShapeDtypeStruct((), "float64"),))
    with pytest.raises(TypeError, match="Python complex"):
        h(1j)
    assert rj.jit(lambda s: s * 2, shapes=(rj.ShapeDtypeStruct((), "complex64"),))(1j).dtype == C64
