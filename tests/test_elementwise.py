"""Property tests: every elementwise function of relaxjax.numpy against NumPy (the oracle).

Table-driven (as JAX's lax tests): one record per op, each run under hypothesis over dtypes,
shapes (1, primes, larger sizes) and broadcasting.  Where NumPy has no loop for a dtype
(TypeError), relaxjax must raise TypeError too.  Where NumPy warns (log(0), 1/0.), the
jitted code must silently give NumPy's value.
"""
from __future__ import annotations

import operator
import warnings
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SIZES, arrays, assert_same, check, shapes

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]
NUMERIC = FLOATS + INTS


# per-op tests are many: a third of the profile's examples each (10 under "ci")
PER_OP = settings(max_examples=max(5, settings().max_examples // 3))


class Op(NamedTuple):
    name: str
    rj_fn: Callable
    np_fn: Callable
    dtypes: list
    lo: float = -10.0
    hi: float = 10.0
    tol: dict | None = None


def quiet(fn):
    """NumPy oracle without floating-point warnings."""
    def wrapped(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return wrapped


def jit_strict(rj_fn, *args, backend):
    """Jitted call that turns any warning into an error (jitted code is silent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return rj.jit(rj_fn, backend=backend)(*args)


def check_op(rj_fn, np_fn, *args, **tol):
    """``check`` (jit on every backend + eager) plus: the jitted run emits no warnings.

    If NumPy raises TypeError (no loop for these dtypes), relaxjax must raise TypeError too.
    """
    try:
        want = quiet(np_fn)(*args)
    except TypeError:
        for b in BACKENDS:
            with pytest.raises(TypeError):
                rj.jit(rj_fn, backend=b)(*args)
        return
    for b in BACKENDS:
        assert_same(jit_strict(rj_fn, *args, backend=b), want, **tol)
    with np.errstate(all="ignore"):
        check(rj_fn, quiet(np_fn), *args, **tol)


UNARY = [
    Op("negative", rnp.negative, np.negative, NUMERIC),
    Op("abs", rnp.abs, np.abs, DTYPES),
    Op("absolute", rnp.absolute, np.absolute, DTYPES),
    Op("sign", rnp.sign, np.sign, NUMERIC),
    Op("exp", rnp.exp, np.exp, DTYPES),
    Op("exp2", rnp.exp2, np.exp2, DTYPES),
    Op("log", rnp.log, np.log, DTYPES, 0.0, 50.0),
    Op("log2", rnp.log2, np.log2, DTYPES, 0.0, 50.0),
    Op("log10", rnp.log10, np.log10, DTYPES, 0.0, 50.0),
    Op("log1p", rnp.log1p, np.log1p, DTYPES, -0.75, 50.0),
    Op("expm1", rnp.expm1, np.expm1, DTYPES),
    Op("sqrt", rnp.sqrt, np.sqrt, DTYPES, 0.0, 100.0),
    Op("square", rnp.square, np.square, DTYPES),
    Op("reciprocal", rnp.reciprocal, np.reciprocal, FLOATS + ["bool"]),
    Op("sin", rnp.sin, np.sin, DTYPES),
    Op("cos", rnp.cos, np.cos, DTYPES),
    Op("tan", rnp.tan, np.tan, DTYPES, -1.5, 1.5),
    Op("arcsin", rnp.arcsin, np.arcsin, DTYPES, -1.0, 1.0),
    Op("arccos", rnp.arccos, np.arccos, DTYPES, -1.0, 1.0),
    Op("arctan", rnp.arctan, np.arctan, DTYPES),
    Op("sinh", rnp.sinh, np.sinh, DTYPES),
    Op("cosh", rnp.cosh, np.cosh, DTYPES),
    Op("tanh", rnp.tanh, np.tanh, DTYPES),
    Op("arcsinh", rnp.arcsinh, np.arcsinh, DTYPES),
    Op("arccosh", rnp.arccosh, np.arccosh, DTYPES, 1.0, 50.0),
    Op("arctanh", rnp.arctanh, np.arctanh, DTYPES, -0.875, 0.875),
    Op("floor", rnp.floor, np.floor, DTYPES),
    Op("ceil", rnp.ceil, np.ceil, DTYPES),
    Op("trunc", rnp.trunc, np.trunc, DTYPES),
    Op("rint", rnp.rint, np.rint, DTYPES),
    Op("round", lambda x: rnp.round(x), np.round, DTYPES),
    Op("around", lambda x: rnp.around(x), np.around, DTYPES),
    Op("isnan", rnp.isnan, np.isnan, DTYPES),
    Op("isinf", rnp.isinf, np.isinf, DTYPES),
    Op("isfinite", rnp.isfinite, np.isfinite, DTYPES),
    Op("logical_not", rnp.logical_not, np.logical_not, DTYPES),
    Op("invert", rnp.invert, np.invert, INTS + ["bool"]),
    Op("bitwise_not", rnp.bitwise_not, np.bitwise_not, INTS + ["bool"]),
    Op("positive", rnp.positive, np.positive, NUMERIC),
]

BINARY = [
    Op("add", rnp.add, np.add, DTYPES),
    Op("subtract", rnp.subtract, np.subtract, DTYPES),
    Op("multiply", rnp.multiply, np.multiply, DTYPES),
    Op("divide", rnp.divide, np.divide, DTYPES),
    Op("true_divide", rnp.true_divide, np.true_divide, DTYPES),
    Op("floor_divide", rnp.floor_divide, np.floor_divide, DTYPES),
    Op("mod", rnp.mod, np.mod, DTYPES),
    Op("remainder", rnp.remainder, np.remainder, DTYPES),
    Op("power", rnp.power, np.power, DTYPES, 0.0, 4.0),
    Op("maximum", rnp.maximum, np.maximum, DTYPES),
    Op("minimum", rnp.minimum, np.minimum, DTYPES),
    Op("arctan2", rnp.arctan2, np.arctan2, DTYPES),
    Op("equal", rnp.equal, np.equal, DTYPES, -3, 3),
    Op("not_equal", rnp.not_equal, np.not_equal, DTYPES, -3, 3),
    Op("less", rnp.less, np.less, DTYPES, -3, 3),
    Op("less_equal", rnp.less_equal, np.less_equal, DTYPES, -3, 3),
    Op("greater", rnp.greater, np.greater, DTYPES, -3, 3),
    Op("greater_equal", rnp.greater_equal, np.greater_equal, DTYPES, -3, 3),
    Op("logical_and", rnp.logical_and, np.logical_and, DTYPES, -2, 2),
    Op("logical_or", rnp.logical_or, np.logical_or, DTYPES, -2, 2),
    Op("logical_xor", rnp.logical_xor, np.logical_xor, DTYPES, -2, 2),
    Op("bitwise_and", rnp.bitwise_and, np.bitwise_and, DTYPES, -100, 100),
    Op("bitwise_or", rnp.bitwise_or, np.bitwise_or, DTYPES, -100, 100),
    Op("bitwise_xor", rnp.bitwise_xor, np.bitwise_xor, DTYPES, -100, 100),
    Op("left_shift", rnp.left_shift, np.left_shift, INTS + ["bool"], 0, 20),
    Op("right_shift", rnp.right_shift, np.right_shift, INTS + ["bool"], 0, 20),
]

_INT_DIV = {"floor_divide", "mod", "remainder"}


def _needs_nonzero(op, *xs):
    return op.name in _INT_DIV and all(np.dtype(x.dtype).kind in "iub" for x in xs)


@st.composite
def broadcastable_shapes(draw, n, max_dims=3, sizes=None):
    """``n`` shapes that broadcast together: size-1 axes and missing leading axes included."""
    base = draw(shapes(1, max_dims, sizes)) if sizes is not None else draw(shapes(1, max_dims))
    out = []
    for _ in range(n):
        nd = draw(st.integers(0 if n > 1 else 1, len(base)))
        s = [1 if draw(st.integers(0, 3)) == 0 else d for d in base[len(base) - nd:]]
        out.append(tuple(s))
    assume(any(len(s) for s in out))
    return out


# ---------------------------------------------------------------------------------------
# Unary ops, every dtype (or NumPy's TypeError)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", UNARY, ids=lambda o: o.name)
@given(data=st.data())
@PER_OP
def test_unary(op, data):
    dtype = data.draw(st.sampled_from(op.dtypes), label="dtype")
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dtype, shape, op.lo, op.hi), label="x")
    check_op(op.rj_fn, op.np_fn, x)


@pytest.mark.parametrize("op", UNARY, ids=lambda o: o.name)
def test_unary_dtype_support_matches_numpy(op):
    """Listed dtypes work; the others raise TypeError in NumPy and in relaxjax."""
    for d in DTYPES:
        x = np.array([0, 1, 2, 3][:2 if d == "bool" else 4], d)
        if d in op.dtypes:
            with np.errstate(all="ignore"):
                want = op.np_fn(x)
            assert_same(rj.jit(op.rj_fn)(x), want)
        elif op.name != "reciprocal":
            with pytest.raises(TypeError):
                op.np_fn(x)
            with pytest.raises(TypeError):
                rj.jit(op.rj_fn)(x)


# ---------------------------------------------------------------------------------------
# Binary ops: broadcasting and mixed-dtype promotion
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.name)
@given(data=st.data())
@PER_OP
def test_binary(op, data):
    dx = data.draw(st.sampled_from(DTYPES), label="dx")
    dy = data.draw(st.sampled_from([dx] * 3 + DTYPES), label="dy")   # same dtype often
    sx, sy = data.draw(broadcastable_shapes(2), label="shapes")
    x = data.draw(arrays(dx, sx, op.lo, op.hi), label="x")
    y = data.draw(arrays(dy, sy, op.lo, op.hi), label="y")
    if _needs_nonzero(op, x, y):
        y = np.where(y == 0, np.ones_like(y), y)
    check_op(op.rj_fn, op.np_fn, x, y)


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.name)
@given(data=st.data())
@PER_OP
def test_binary_python_scalar(op, data):
    """NEP 50: a Python scalar operand is weak (x_f32 * 2.0 stays float32)."""
    dx = data.draw(st.sampled_from(op.dtypes), label="dx")
    kind = data.draw(st.sampled_from([bool, int, float]), label="scalar type")
    if kind is bool:
        s = data.draw(st.booleans())
    elif kind is int:
        s = data.draw(st.integers(int(max(op.lo, -100)), int(min(op.hi, 100))))
    else:
        s = data.draw(st.floats(op.lo, op.hi, allow_nan=False))
    if op.name in _INT_DIV and s == 0:
        s = kind(1)
    shape = data.draw(shapes(1, 3), label="shape")
    x = data.draw(arrays(dx, shape, op.lo, op.hi), label="x")
    reflected = data.draw(st.booleans(), label="reflected")
    if reflected and _needs_nonzero(op, x) and (isinstance(s, (bool, int))):
        x = np.where(x == 0, np.ones_like(x), x)
    if reflected:
        check_op(lambda a: op.rj_fn(s, a), lambda a: op.np_fn(s, a), x)
    else:
        check_op(lambda a: op.rj_fn(a, s), lambda a: op.np_fn(a, s), x)


# ---------------------------------------------------------------------------------------
# Special values: NumPy warns, jitted code is silent and gives the same value
# ---------------------------------------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 2.5, np.inf, -np.inf, np.nan, 1e300, -1e-300])


@pytest.mark.parametrize("op", [o for o in UNARY if "float64" in o.dtypes], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_special_values(op, dtype):
    with np.errstate(all="ignore"):
        x = SPECIAL.astype(dtype)
    check_op(op.rj_fn, op.np_fn, x)


@pytest.mark.parametrize("op", [o for o in BINARY if "float64" in o.dtypes and "shift" not in o.name],
                         ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_special_values(op, dtype):
    with np.errstate(all="ignore"):
        v = SPECIAL.astype(dtype)
    x, y = v[:, None], v[None, :]
    try:
        np.asarray(op.np_fn(x[:1], y[:, :1]))
    except TypeError:
        pytest.skip(f"{op.name} has no float loop")
    check_op(op.rj_fn, op.np_fn, x, y)


# ---------------------------------------------------------------------------------------
# round(decimals), clip, where, astype
# ---------------------------------------------------------------------------------------

@given(dtype=st.sampled_from(["float32", "float64", "int32", "int64"]), shape=shapes(1, 2),
       decimals=st.integers(-3, 4), data=st.data())
def test_round_decimals(dtype, shape, decimals, data):
    """Exact: rounding is deterministic, a tolerance would hide a wrong ten."""
    x = data.draw(st.one_of(arrays(dtype, shape, -200000, 200000),
                            arrays("int32", shape, -40000, 40000).map(lambda i: (i * 5).astype(dtype))))
    exact = dict(rtol=0, atol=0)
    check_op(lambda a: rnp.round(a, decimals), lambda a: np.round(a, decimals), x, **exact)
    check_op(lambda a: rnp.around(a, decimals=decimals), lambda a: np.around(a, decimals=decimals), x,
             **exact)
    check_op(lambda a: a.round(decimals), lambda a: a.round(decimals), x, **exact)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("decimals", [-3, -2, -1, 1, 2])
def test_round_decimals_exhaustive(dtype, decimals):
    x = np.concatenate([np.arange(-100000, 100000, 5), np.arange(-2000, 2000) / 8]).astype(dtype)
    check_op(lambda a: rnp.round(a, decimals), lambda a: np.round(a, decimals), x, rtol=0, atol=0)


def test_jit_of_library_function_with_default_args():
    """Unpassed defaults (decimals=0) stay Python values: jit(rnp.round) works."""
    x = np.array([0.5, 1.5, 2.25])
    assert_same(rj.jit(rnp.round)(x), np.round(x))
    assert_same(rj.jit(rnp.clip)(x, 1.0, 2.0), np.clip(x, 1.0, 2.0))


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.25, 0.35, 1.005, 25.0, 35.0, 15.0])
    for d in (0, 1, 2, -1):
        check_op(lambda a: rnp.round(a, d), lambda a: np.round(a, d), x)
    i = np.array([15, 25, 35, -15, -25, 149, 150, 151], np.int64)
    check_op(lambda a: rnp.round(a, -1), lambda a: np.round(a, -1), i)
    check_op(lambda a: rnp.round(a, -2), lambda a: np.round(a, -2), i)


@given(dtype=st.sampled_from(["float32", "float64", "int32", "int64"]), data=st.data())
def test_clip(dtype, data):
    sx, slo, shi = data.draw(broadcastable_shapes(3), label="shapes")
    x = data.draw(arrays(dtype, sx), label="x")
    lo = data.draw(st.one_of(st.none(), st.integers(-10, 0), st.floats(-10, 0),
                             arrays(dtype, slo, -10, 0)), label="lo")
    hi = data.draw(st.one_of(st.integers(0, 10), st.floats(0, 10), arrays(dtype, shi, 0, 10)), label="hi")
    check_op(lambda a: rnp.clip(a, lo, hi), lambda a: np.clip(a, lo, hi), x)
    check_op(lambda a: a.clip(lo, hi), lambda a: a.clip(lo, hi), x)
    if lo is not None:
        check_op(lambda a: rnp.clip(a, lo), lambda a: np.clip(a, lo, None), x)


@given(dx=st.sampled_from(DTYPES), dy=st.sampled_from(DTYPES), data=st.data())
def test_where(dx, dy, data):
    sc, sx, sy = data.draw(broadcastable_shapes(3), label="shapes")
    c = data.draw(arrays("bool", sc), label="cond")
    x = data.draw(arrays(dx, sx), label="x")
    y = data.draw(st.one_of(arrays(dy, sy), st.floats(-5, 5), st.integers(-5, 5)), label="y")
    check_op(lambda c, a: rnp.where(c, a, y), lambda c, a: np.where(c, a, y), c, x)
    check_op(lambda c, a: rnp.where(c, y, a), lambda c, a: np.where(c, y, a), c, x)
    # a non-bool condition means "!= 0"
    check_op(lambda a: rnp.where(a, 1.0, 0), lambda a: np.where(a, 1.0, 0), x)


def test_where_weak_scalars():
    x = np.arange(6, dtype=np.float32) - 3
    check_op(lambda a: rnp.where(a > 0, a, 0.0), lambda a: np.where(a > 0, a, 0.0), x)
    check_op(lambda a: rnp.where(a > 0, 1, 0), lambda a: np.where(a > 0, 1, 0), x)
    i = np.arange(6, dtype=np.int32)
    check_op(lambda a: rnp.where(a > 2, a, -1), lambda a: np.where(a > 2, a, -1), i)


@given(src=st.sampled_from(DTYPES), dst=st.sampled_from(DTYPES + ["float16", "int8", "uint8"]),
       shape=shapes(1, 3), data=st.data())
def test_astype(src, dst, shape, data):
    x = data.draw(arrays(src, shape, -100, 100))
    check_op(lambda a: rnp.astype(a, dst), lambda a: a.astype(dst), x)
    check_op(lambda a: a.astype(dst), lambda a: a.astype(dst), x)
    check_op(lambda a: a.astype(np.dtype(dst)), lambda a: a.astype(dst), x)


# ---------------------------------------------------------------------------------------
# Python operators on traced arrays
# ---------------------------------------------------------------------------------------

OPERATORS = [
    ("x + 1.0", lambda x: x + 1.0, DTYPES),
    ("1.0 + x", lambda x: 1.0 + x, DTYPES),
    ("x + 1", lambda x: x + 1, DTYPES),
    ("2 * x", lambda x: 2 * x, DTYPES),
    ("x * 2.0", lambda x: x * 2.0, DTYPES),
    ("x - 3", lambda x: x - 3, ["float32", "float64", "int32", "int64"]),
    ("3 - x", lambda x: 3 - x, ["float32", "float64", "int32", "int64"]),
    ("x / 2", lambda x: x / 2, DTYPES),
    ("2.0 / (x*x + 1)", lambda x: 2.0 / (x * x + 1), DTYPES),
    ("x ** 2", lambda x: x ** 2, DTYPES),
    ("x ** 3", lambda x: x ** 3, DTYPES),
    ("x ** 0.5", lambda x: abs(x) ** 0.5, ["float32", "float64", "int32", "int64"]),
    ("2.0 ** x", lambda x: 2.0 ** x, DTYPES),
    ("-x", lambda x: -x, ["float32", "float64", "int32", "int64"]),
    ("+x", lambda x: +x, DTYPES),
    ("abs(x)", lambda x: abs(x), DTYPES),
    ("x > 0", lambda x: x > 0, DTYPES),
    ("x >= 0", lambda x: x >= 0, DTYPES),
    ("x < 1.5", lambda x: x < 1.5, DTYPES),
    ("x <= 1", lambda x: x <= 1, DTYPES),
    ("x == 0", lambda x: x == 0, DTYPES),
    ("x != 0", lambda x: x != 0, DTYPES),
    ("0 < x", lambda x: 0 < x, DTYPES),
    ("~(x > 0)", lambda x: ~(x > 0), DTYPES),
    ("~x", lambda x: ~x, ["int32", "int64", "bool"]),
    ("x // 3", lambda x: x // 3, ["float32", "float64", "int32", "int64"]),
    ("x % 3", lambda x: x % 3, ["float32", "float64", "int32", "int64"]),
    ("x // -2.5", lambda x: x // -2.5, ["float32", "float64", "int32", "int64"]),
    ("x % -2.5", lambda x: x % -2.5, ["float32", "float64", "int32", "int64"]),
    ("7 // (x*x + 1)", lambda x: 7 // (x * x + 1), ["float32", "float64", "int32", "int64"]),
    ("7 % (x*x + 1)", lambda x: 7 % (x * x + 1), ["float32", "float64", "int32", "int64"]),
    ("x & 6", lambda x: x & 6, ["int32", "int64", "bool"]),
    ("x | 1", lambda x: x | 1, ["int32", "int64", "bool"]),
    ("x ^ 5", lambda x: x ^ 5, ["int32", "int64", "bool"]),
    ("(x > 0) & (x < 3)", lambda x: (x > 0) & (x < 3), DTYPES),
    ("(x > 0) | (x < -3)", lambda x: (x > 0) | (x < -3), DTYPES),
    ("x << 2", lambda x: x << 2, ["int32", "int64"]),
    ("x >> 1", lambda x: x >> 1, ["int32", "int64"]),
    ("x * x - x / 3.0", lambda x: x * x - x / 3.0, DTYPES),
]


@pytest.mark.parametrize("name,fn,dtypes", OPERATORS, ids=[o[0] for o in OPERATORS])
@given(data=st.data())
@PER_OP
def test_python_operators(name, fn, dtypes, data):
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    x = data.draw(arrays(dtype, data.draw(shapes(1, 3)), -10, 10), label="x")
    check_op(fn, fn, x)


@given(dx=st.sampled_from(DTYPES), dy=st.sampled_from(DTYPES), data=st.data())
def test_python_binary_operators_two_arrays(dx, dy, data):
    sx, sy = data.draw(broadcastable_shapes(2), label="shapes")
    x = data.draw(arrays(dx, sx), label="x")
    y = data.draw(arrays(dy, sy), label="y")
    for f in (operator.add, operator.sub, operator.mul, operator.truediv, operator.lt, operator.ge,
              operator.eq, operator.ne):
        check_op(f, f, x, y)
    if dx in INTS + ["bool"] and dy in INTS + ["bool"]:
        for f in (operator.and_, operator.or_, operator.xor):
            check_op(f, f, x, y)


def test_unary_plus_on_bool_raises():
    with pytest.raises(TypeError):
        rj.jit(lambda a: +a)(np.array([True, False]))


def test_bool_pow_2_operator_dtype():
    x = np.array([True, False])
    assert_same(rj.jit(lambda a: a ** 2)(x), x ** 2)


def test_numpy_ufunc_on_tracer_dispatches():
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    check_op(lambda a: np.exp(a) + np.maximum(a, 0.0), lambda a: np.exp(a) + np.maximum(a, 0.0), x)
    check_op(lambda a: np.add(a, 1), lambda a: np.add(a, 1), x)


# ---------------------------------------------------------------------------------------
# NEP 50 promotion, explicitly
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,arg_dtypes,want", [
    (lambda x: x * 2.0, ["float32"], "float32"),
    (lambda x: 2.0 * x, ["float32"], "float32"),
    (lambda x: x + 1, ["int32"], "int32"),
    (lambda x: x + 1.0, ["int32"], "float64"),
    (lambda x: x + True, ["int32"], "int32"),
    (lambda x: x + 1, ["bool"], "int64"),
    (lambda x: x + 1.5, ["bool"], "float64"),
    (lambda x, y: x / y, ["int32", "int32"], "float64"),
    (lambda x: x / 2, ["int32"], "float64"),
    (lambda x, y: x / y, ["int64", "int64"], "float64"),
    (lambda x, y: x + y, ["float32", "float64"], "float64"),
    (lambda x, y: x + y, ["int32", "float32"], "float64"),
    (lambda x, y: x + y, ["int32", "int64"], "int64"),
    (lambda x, y: x * y, ["bool", "int32"], "int32"),
    (lambda x: rnp.exp(x), ["int32"], "float64"),
    (lambda x: rnp.sqrt(x), ["float32"], "float32"),
    (lambda x: x ** 2, ["int32"], "int32"),
    (lambda x: x ** 2.0, ["float32"], "float32"),
    (lambda x: x // 2, ["int32"], "int32"),
    (lambda x: x % 2.0, ["int64"], "float64"),
    (lambda x: rnp.maximum(x, 0), ["float32"], "float32"),
    (lambda x: rnp.maximum(x, 0.0), ["int32"], "float64"),
    (lambda x: rnp.where(x > 0, x, 0.0), ["float32"], "float32"),
    (lambda x: rnp.where(x > 0, 1.0, 0.0), ["float32"], "float64"),
    (lambda x: rnp.arctan2(x, 1), ["int32"], "float64"),
])
def test_nep50_promotion(fn, arg_dtypes, want):
    args = [np.arange(1, 6).astype(d) for d in arg_dtypes]
    with np.errstate(all="ignore"):
        npres = fn(*args)
    assert npres.dtype == np.dtype(want)          # the oracle agrees with the table
    for b in BACKENDS:
        got = rj.jit(fn, backend=b)(*args)
        assert got.dtype == np.dtype(want)
        np.testing.assert_allclose(got, npres)


@pytest.mark.parametrize("name,fn", [
    ("where(c, 1.0, 0.0) * x", lambda m, x: m.where(x > 0, 1.0, 0.0) * x),
    ("x * sqrt(2.0)", lambda m, x: x * m.sqrt(2.0)),
    ("exp(1) * x", lambda m, x: m.exp(1) * x),
    ("x * add(1.0, 2.0)", lambda m, x: x * m.add(1.0, 2.0)),
    ("x / sqrt(x.shape[0])", lambda m, x: x / m.sqrt(x.shape[0])),
    ("x * maximum(x.shape[0], 1.0)", lambda m, x: x * m.maximum(x.shape[0], 1.0)),
    ("x * round(2.5)", lambda m, x: x * m.round(2.5)),
    ("x * square(3)", lambda m, x: x * m.square(3)),
    ("x * positive(3)", lambda m, x: x * m.positive(3)),
    ("x * clip(x.shape[0], 0, 1.5)", lambda m, x: x * m.clip(x.shape[0], 0, 1.5)),
    ("x * (x.shape[0] / 2)", lambda m, x: x * (x.shape[0] / 2)),
    ("x * (x.shape[0] * 1.5 - 1)", lambda m, x: x * (x.shape[0] * 1.5 - 1)),
])
def test_numpy_functions_return_strong_arrays(name, fn):
    """NEP 50: only Python scalars are weak; a NumPy function's result is an array (strong),
    so ``x_f32 * np.sqrt(2.0)`` is float64.  Python arithmetic on shapes stays weak."""
    for x in (np.ones(3, np.float32), np.ones(3, np.int32)):
        want = fn(np, x)
        for b in BACKENDS:
            assert_same(rj.jit(lambda a: fn(rnp, a), backend=b)(x), want)


@pytest.mark.parametrize("fn", [lambda x: x + 2 ** 40, lambda x: 2 ** 40 * x,
                                lambda x: rnp.add(x, 2 ** 40), lambda x: rnp.maximum(x, -2 ** 35),
                                lambda x: x - 2 ** 31])
def test_python_int_overflow_raises(fn):
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(OverflowError):
        fn(x)                                       # NumPy
    for b in BACKENDS:
        with pytest.raises(OverflowError):
            rj.jit(fn, backend=b)(x)


COMPARISONS = [o for o in BINARY if o.name in ("equal", "not_equal", "less", "less_equal", "greater",
                                                 "greater_equal")]


@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.name)
@given(dtype=st.sampled_from(["int32", "int64", "uint8"]), v=st.one_of(
    st.integers(-2 ** 63, 2 ** 64 - 1), st.sampled_from([-1, 256, 2 ** 31, -2 ** 31 - 1, 2 ** 63])),
    data=st.data())
@PER_OP
def test_compare_with_out_of_range_python_int(op, dtype, v, data):
    """NumPy 2 compares integer arrays with any Python int exactly (no OverflowError)."""
    x = data.draw(arrays(dtype, data.draw(shapes(1, 2)), -1000, 1000))
    check_op(lambda a: op.rj_fn(a, v), lambda a: op.np_fn(a, v), x)
    check_op(lambda a: op.rj_fn(v, a), lambda a: op.np_fn(v, a), x)


def test_compare_operators_with_huge_python_int():
    x = np.array([-3, 0, 7], np.int32)
    for f in (lambda a: a > 2 ** 40, lambda a: a <= -2 ** 40, lambda a: 2 ** 40 == a, lambda a: a != 2 ** 40):
        check_op(f, f, x)


def test_float32_with_huge_python_float_is_silent_inf():
    x = np.array([1.0, -2.0], np.float32)
    check_op(lambda a: a + 1e300, lambda a: a + 1e300, x)
    check_op(lambda a: a * 1e39, lambda a: a * 1e39, x)


def test_python_int_in_range_keeps_dtype():
    x = np.arange(4, dtype=np.int32)
    check_op(lambda a: a + (2 ** 31 - 1), lambda a: a + (2 ** 31 - 1), x)
    u = np.arange(4, dtype=np.uint8)
    check_op(lambda a: a + 255, lambda a: a + 255, u)
    with pytest.raises(OverflowError):
        rj.jit(lambda a: a + 256)(u)


# ---------------------------------------------------------------------------------------
# Shape polymorphism: one compile for many batch sizes
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x, y: rnp.tanh(x * 2.0 + y) - rnp.maximum(x, 0.0),
    lambda x, y: rnp.where(x > y, rnp.exp(x), rnp.log1p(rnp.abs(y))),
    lambda x, y: rnp.clip(x // 3 % 5, -1, 2.5) ** 2,
], ids=["tanh_mul_add", "where_exp", "clip_floordiv_mod"])
def test_compiles_once_for_many_batch_sizes(fn):
    f = rj.jit(fn)
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 17, 64, 257):
        x = rng.standard_normal((n, 7)).astype(np.float32)
        y = rng.standard_normal((n, 7)).astype(np.float32)
        with np.errstate(all="ignore"):
            assert_same(f(x, y), fn(x, y))
    assert f.cache_info().compiles == 1


@given(n=SIZES, m=SIZES)
@settings(max_examples=15)
def test_binary_broadcast_row_column(n, m):
    """(n, 1) op (1, m) and (n, m) op (m,) with larger sizes."""
    rng = np.random.default_rng(n * 1000 + m)
    a = rng.standard_normal((n, 1))
    b = rng.standard_normal((1, m))
    c = rng.standard_normal((m,))
    check_op(lambda x, y: x * y + 1.0, lambda x, y: x * y + 1.0, a, b)
    check_op(lambda x, y: rnp.maximum(x * y, c), lambda x, y: np.maximum(x * y, c), a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_exp_far_below_zero_is_zero_without_libm(dtype):
    """exp of arguments far enough below (a softmax's -inf or -1e9 mask) is 0 without
    calling libmvec (which runs them lane by lane); around the thresholds and in the
    subnormal range the results are NumPy's, to within libm's last-place differences."""
    x = np.array([-np.inf, -1e9, -800.0, -746.5, -745.5, -745.0, -120.0, -104.5, -104.0,
                  -103.9, -103.0, -95.0, -87.5, -20.0, 0.0, np.nan], dtype=dtype)
    with np.errstate(all="ignore"):
        want = np.exp(x)
    # one last place in absolute terms among the subnormals (CUDA's exp gives 0 for -745.0,
    # whose exact value rounds to the smallest float64 subnormal)
    tiny = np.finfo(dtype).smallest_subnormal
    for b in BACKENDS:
        got = rj.jit(rnp.exp, backend=b)(x)
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype != "float16" else 1e-3, atol=tiny)
        assert (got[:3] == 0).all() and np.isnan(got[-1])
