"""The reference ``numpy`` backend runs every module the pass pipeline can produce:
``call_tir`` (through the loop interpreter), ``call_library`` (BLAS as ``np.matmul``) and calls
of graph sub-functions (fused groups), next to graph primitives.

Each function is jitted on the numpy backend under four pipelines: plain (graph primitives
only), legalized (every primitive a loop program or library call), fused (FuseOps: primitive
sub-functions called from the entry) and fused + legalized (FuseTIR programs).  NumPy is the
oracle for all of them; the legalized run must also agree with the plain one.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import arrays, assert_same, tolerance
from relaxjax.backends import get_backend
from relaxjax.lax.tir_interp import compile_primfunc, run_primfunc
from relaxjax import tir
from relaxjax.compile.fuse import fuse_ops
from relaxjax.compile.legalize import HOST_OPS, legalize
from relaxjax.compile import Pass, dead_code_elimination
from relaxjax.compile.verify import verify
from relaxjax.errors import ShapeError
from relaxjax.ir import Binding, Function, IRModule, Var

TINY = st.sampled_from([1, 2, 3, 5, 7])
FEW = settings(max_examples=12)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]

PIPELINES_BY_NAME = {
    "plain": [dead_code_elimination],                              # graph primitives only
    "lowered": [dead_code_elimination, legalize],                  # one program per primitive
    "fused": [dead_code_elimination, fuse_ops],                    # "function" bindings
    "fused_lowered": [dead_code_elimination, fuse_ops, legalize],  # fused loop programs
}
_JITS: dict = {}


def jits(key, fn) -> dict:
    """``fn`` jitted on the numpy backend under each pipeline, made once per key so later
    examples run entries traced for other sizes."""
    if key not in _JITS:
        _JITS[key] = {name: rj.jit(fn, backend="numpy", pipeline=p)
                      for name, p in PIPELINES_BY_NAME.items()}
    return _JITS[key]


def pair(key, fn):
    """The (lowered, plain) jits of ``fn``."""
    j = jits(key, fn)
    return j["lowered"], j["plain"]


def quiet(fn, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def check(key, fn, np_fn, *args, exact_vs_plain=False, **tol):
    """Every pipeline's run matches NumPy without warnings; the legalized run matches the
    plain one (bit for bit with ``exact_vs_plain``).  Returns the legalized run's result."""
    want = quiet(np_fn, *args)
    j = jits(key, fn)
    got = {}
    for name, jf in j.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got[name] = jf(*args)
        assert_same(got[name], want, **tol)
    assert_same(got["lowered"], got["plain"], **({"rtol": 0, "atol": 0} if exact_vs_plain else tol))
    return got["lowered"]


def lowered_module(fn, *args) -> IRModule:
    return legalize(dead_code_elimination(rj.jit(fn).lower(*args).module))


def assert_fully_lowered(fn, *args, kinds=("tir",)):
    """Legalize leaves no graph primitive but host ops, and makes bindings of ``kinds``."""
    m = lowered_module(fn, *args)
    seen = {b.kind for b in m.main.bindings}
    assert all(b.kind != "primitive" or b.callee.name in HOST_OPS for b in m.main.bindings), str(m)
    for k in kinds:
        assert k in seen, str(m)
    return m


def with_specials(dtype, shape):
    """Float arrays where some elements are NaN, infinities or signed zeros."""
    base = arrays(dtype, shape, -4.0, 4.0)
    mask = hnp.arrays(np.int8, shape, elements=st.integers(-len(SPECIAL), len(SPECIAL) - 1))

    def mix(a, m):
        a = a.copy()
        sel = m >= 0
        a[sel] = np.asarray(SPECIAL, dtype)[m[sel]]
        return a
    return st.tuples(base, mask).map(lambda t: mix(*t))


# ---------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------

def _chain(x, y):
    t = rnp.tanh(x * y + 1.5) - rnp.maximum(x, y) / (rnp.abs(y) + 1.0)
    return t + rnp.where(x > y, rnp.sqrt(rnp.abs(x)), rnp.minimum(x, -y)), (x != x) | (y < 0.5)


def _np_chain(x, y):
    t = np.tanh(x * y + 1.5) - np.maximum(x, y) / (np.abs(y) + 1.0)
    return t + np.where(x > y, np.sqrt(np.abs(x)), np.minimum(x, -y)), (x != x) | (y < 0.5)


@given(st.sampled_from(["float32", "float64"]), TINY, TINY, TINY, st.data())
def test_elementwise_chain_broadcasting(dtype, a, b, c, data):
    x = data.draw(with_specials(dtype, (a, 1, c)))
    y = data.draw(with_specials(dtype, (b, c)))
    out, mask = check(("chain", dtype), _chain, _np_chain, x, y)
    assert out.shape == (a, b, c) and mask.dtype == np.bool_


def test_elementwise_chain_is_loops():
    x, y = np.ones((2, 1, 3), np.float32), np.ones((5, 3), np.float32)
    m = assert_fully_lowered(_chain, x, y)
    low = jits(("chain", "float32"), _chain)["lowered"]
    text = low.lower(x, y).compile(pipeline=[legalize]).as_text("loops")
    assert "@tir" in text and "for " in text


def _ints(x, y):
    s = rnp.where((x & 3) == 1, x << (y & 7), (x ^ y) >> 2)
    return s - rnp.sign(x) * rnp.abs(y) + (~x | y), rnp.maximum(x, y) * 3 - rnp.minimum(x, -y)


def _np_ints(x, y):
    s = np.where((x & 3) == 1, x << (y & 7), (x ^ y) >> 2)
    return s - np.sign(x) * np.abs(y) + (~x | y), np.maximum(x, y) * 3 - np.minimum(x, -y)


@given(st.sampled_from(["int8", "int32", "int64"]), TINY, TINY, st.data())
def test_integer_chain_wraps_like_numpy(dtype, a, b, data):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = data.draw(arrays(dtype, (a, b), lo, hi))
    y = data.draw(arrays(dtype, (b,), lo, hi))
    check(("ints", dtype), _ints, _np_ints, x, y, exact_vs_plain=True)


UNARY = [
    ("negative", rnp.negative, np.negative), ("abs", rnp.abs, np.abs), ("sign", rnp.sign, np.sign),
    ("exp", rnp.exp, np.exp), ("exp2", rnp.exp2, np.exp2), ("expm1", rnp.expm1, np.expm1),
    ("log", rnp.log, np.log), ("log2", rnp.log2, np.log2), ("log10", rnp.log10, np.log10),
    ("log1p", rnp.log1p, np.log1p), ("sqrt", rnp.sqrt, np.sqrt), ("sin", rnp.sin, np.sin),
    ("cos", rnp.cos, np.cos), ("tan", rnp.tan, np.tan), ("arcsin", rnp.arcsin, np.arcsin),
    ("arccos", rnp.arccos, np.arccos), ("arctan", rnp.arctan, np.arctan),
    ("sinh", rnp.sinh, np.sinh), ("cosh", rnp.cosh, np.cosh), ("tanh", rnp.tanh, np.tanh),
    ("arcsinh", rnp.arcsinh, np.arcsinh), ("arccosh", rnp.arccosh, np.arccosh),
    ("arctanh", rnp.arctanh, np.arctanh), ("floor", rnp.floor, np.floor),
    ("ceil", rnp.ceil, np.ceil), ("trunc", rnp.trunc, np.trunc), ("round", rnp.round, np.round),
    ("reciprocal", rnp.reciprocal, np.reciprocal), ("isnan", rnp.isnan, np.isnan),
    ("isinf", rnp.isinf, np.isinf), ("isfinite", rnp.isfinite, np.isfinite),
    ("erf", rj.nn.erf, None),
]


def _np_erf(x):
    import math
    return np.vectorize(math.erf, otypes=[x.dtype])(x).astype(x.dtype)


@pytest.mark.parametrize("name,rj_fn,np_fn", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ops_on_special_values(name, rj_fn, np_fn):
    rng = np.random.default_rng(len(name))
    for dtype in ("float32", "float64"):
        x = np.concatenate([np.asarray(SPECIAL + [0.5, -0.5, 2.5, -2.5, 1e30, -1e-30], dtype),
                            rng.uniform(-3, 3, 15).astype(dtype)]).reshape(4, 7)
        check((name, dtype), rj_fn, np_fn or _np_erf, x, **tolerance(dtype))


BINARY_F = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
    ("true_divide", np.true_divide), ("floor_divide", np.floor_divide), ("mod", np.mod),
    ("power", np.power), ("maximum", np.maximum), ("minimum", np.minimum),
    ("arctan2", np.arctan2), ("equal", np.equal), ("not_equal", np.not_equal),
    ("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
    ("greater_equal", np.greater_equal),
]


@pytest.mark.parametrize("name,np_fn", BINARY_F, ids=[b[0] for b in BINARY_F])
def test_binary_float_ops_on_special_values(name, np_fn):
    rj_fn = getattr(rnp, name)
    vals = SPECIAL + [0.5, 2.5, -2.5, 7.0, -0.75]
    x, y = np.meshgrid(np.asarray(vals), np.asarray(vals))
    for dtype in ("float32", "float64"):
        check((name, dtype), rj_fn, np_fn, x.astype(dtype), y.astype(dtype), **tolerance(dtype))


# ---------------------------------------------------------------------------------------
# Integer division, remainder, conversions
# ---------------------------------------------------------------------------------------

def _divmod(x, y):
    return rnp.floor_divide(x, y), rnp.remainder(x, y), x // 3, x % 5


def _np_divmod(x, y):
    return np.floor_divide(x, y), np.remainder(x, y), x // 3, x % 5


@given(st.sampled_from(["int8", "int32", "int64", "uint8"]), TINY, TINY, st.data())
def test_integer_floor_divide_remainder_zero_and_negative(dtype, a, b, data):
    info = np.iinfo(dtype)
    x = data.draw(arrays(dtype, (a, b), info.min, info.max))
    y = data.draw(arrays(dtype, (a, b), max(info.min, -5), 5))      # many zeros and -1s
    if x.size:
        x.flat[0] = info.min                                           # INT_MIN // -1 wraps
        y.flat[0] = 0 if dtype == "uint8" else -1
        y.flat[-1] = 0
    got = check(("divmod", dtype), _divmod, _np_divmod, x, y, exact_vs_plain=True)
    assert got[0].flat[-1] == 0 and got[1].flat[-1] == 0            # a zero divisor gives 0


def test_float_floor_divide_remainder_by_zero():
    x = np.asarray([5.0, -5.0, 0.0, 7.5, -7.5, np.inf], np.float32)
    y = np.asarray([0.0, 0.0, 0.0, -2.0, 2.0, 3.0], np.float32)
    got = check("fdivmod", _divmod, _np_divmod, x, y, exact_vs_plain=True)
    assert np.isinf(got[0][0]) and np.isnan(got[1][0])


CONVERT_TO = ["int8", "uint8", "int32", "int64", "bool", "float16", "float64"]


@given(st.sampled_from(CONVERT_TO), st.integers(1, 40), st.data())
def test_float_to_int_convert(dtype, n, data):
    x = data.draw(arrays("float32", (n,), -300.0, 300.0))
    if dtype in ("int32", "int64", "bool", "float16", "float64"):
        x = data.draw(with_specials("float32", (n,)))
    if dtype in ("int8", "uint8"):                  # in range of an int64 detour, like NumPy
        x = np.clip(x, -120, 120) if dtype == "int8" else x
    check(("astype", dtype), lambda v: v.astype(dtype), lambda v: v.astype(dtype), x,
          exact_vs_plain=True)


def test_convert_is_a_loop_program_and_wraps_to_uint8():
    x = np.asarray([-1.0, -2.7, 255.9, 3.2], np.float32)
    assert_fully_lowered(lambda v: v.astype(np.uint8), x)
    got = check(("astype", "uint8"), lambda v: v.astype("uint8"), lambda v: v.astype("uint8"), x)
    assert got.tolist() == [255, 254, 255, 3]


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------

REDUCTIONS = {
    "sum": (rnp.sum, np.sum, "float64"), "prod": (rnp.prod, np.prod, "float64"),
    "max": (rnp.max, np.max, "float32"), "min": (rnp.min, np.min, "float32"),
    "mean": (rnp.mean, np.mean, "float64"), "any": (rnp.any, np.any, "bool"),
    "all": (rnp.all, np.all, "bool"), "argmax": (rnp.argmax, np.argmax, "float32"),
    "argmin": (rnp.argmin, np.argmin, "float32"), "isum": (rnp.sum, np.sum, "int32"),
    "imax": (rnp.max, np.max, "int8"), "bmax": (rnp.max, np.max, "bool"),
}


@given(st.sampled_from(sorted(REDUCTIONS)), st.lists(TINY, min_size=1, max_size=3), st.data())
def test_reductions(kind, shape, data):
    rj_fn, np_fn, dtype = REDUCTIONS[kind]
    rank = len(shape)
    if kind.startswith("arg"):
        axis = data.draw(st.sampled_from([None] + list(range(-rank, rank))))
    else:
        axis = data.draw(st.sampled_from([None, tuple(sorted({0, rank - 1}))] + list(range(rank))))
    if dtype in ("float32", "float64"):
        x = data.draw(with_specials(dtype, tuple(shape)))
        if kind == "prod":
            x = np.clip(x, -2, 2)
    else:
        x = data.draw(arrays(dtype, tuple(shape), -100, 100))
    check((kind, axis), lambda v: rj_fn(v, axis=axis), lambda v: np_fn(v, axis=axis), x,
          **({"rtol": 1e-12, "atol": 1e-9} if dtype == "float64" else {}))


def test_argmax_first_nan_and_ties():
    x = np.asarray([[1.0, 3.0, 3.0, np.nan, np.nan], [np.nan, 1.0, 9.0, 9.0, 0.0],
                    [2.0, 2.0, 1.0, -np.inf, 0.0]], np.float32)
    for axis in (0, 1):
        got = check(("argmax-nan", axis), lambda v: rnp.argmax(v, axis=axis),
                    lambda v: np.argmax(v, axis=axis), x)
        got2 = check(("argmin-nan", axis), lambda v: rnp.argmin(v, axis=axis),
                     lambda v: np.argmin(v, axis=axis), x)
        if axis == 1:
            assert got.tolist() == [3, 0, 0] and got2.tolist() == [3, 0, 3]
    assert_fully_lowered(lambda v: rnp.argmax(v, axis=1), x)


# ---------------------------------------------------------------------------------------
# Layout: transpose, slice, concatenate, pad, take
# ---------------------------------------------------------------------------------------

def _layout(x, y):
    t = rnp.transpose(x, (2, 0, 1))
    s = x[::-1, 1::2, :]
    c = rnp.concatenate([x, y * 2.0, x[:, :1] - 1.0], axis=1)
    p = rnp.pad(x, ((1, 0), (0, 2), (3, 1)), constant_values=-7.5)
    return t, s, c, p


def _np_layout(x, y):
    return (np.transpose(x, (2, 0, 1)), x[::-1, 1::2, :],
            np.concatenate([x, y * 2.0, x[:, :1] - 1.0], axis=1),
            np.pad(x, ((1, 0), (0, 2), (3, 1)), constant_values=-7.5))


@given(TINY, TINY, TINY, TINY, st.data())
def test_transpose_slice_concatenate_pad(a, b, c, d, data):
    x = data.draw(arrays("float32", (a, b, c)))
    y = data.draw(arrays("float32", (a, d, c)))
    check("layout", _layout, _np_layout, x, y, exact_vs_plain=True)


def _take(x, i):
    return rnp.take(x, i, axis=1), rnp.take(x, i[:2], axis=0) + 1


def _np_take(x, i):
    return np.take(x, i, axis=1), np.take(x, i[:2], axis=0) + 1


@given(st.integers(2, 7), st.integers(2, 7), st.integers(2, 9), st.data())
def test_take_negative_indices(rows, cols, k, data):
    x = data.draw(arrays("int32", (rows, cols), -1000, 1000))
    n = min(rows, cols)
    i = data.draw(arrays("int64", (k,), -n, n - 1))
    check("take", _take, _np_take, x, i, exact_vs_plain=True)


def test_take_out_of_range_raises_index_error():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_fully_lowered(lambda v, j: rnp.take(v, j, axis=1), x, np.array([0, 1], np.int32))
    low, plain = pair("take1", lambda v, j: rnp.take(v, j, axis=1))
    assert_same(low(x, np.array([-4, 3], np.int32)), x[:, [-4, 3]])
    for bad in (4, -5):
        j = np.array([0, bad, 1], np.int32)
        with pytest.raises(IndexError) as lowered_err:
            low(x, j)
        with pytest.raises(IndexError) as numpy_err:
            np.take(x, j, axis=1)
        assert str(lowered_err.value) == str(numpy_err.value)
        with pytest.raises(IndexError):
            plain(x, j)


# ---------------------------------------------------------------------------------------
# matmul: BLAS (float) as a library call, integers as loops
# ---------------------------------------------------------------------------------------

@given(st.sampled_from(["float32", "float64", "int32", "int8"]), TINY, TINY, TINY, st.data())
def test_matmul(dtype, n, k, m, data):
    lo, hi = (-4, 4) if dtype == "int8" else (-100, 100)
    a = data.draw(arrays(dtype, (n, k), lo, hi))
    b = data.draw(arrays(dtype, (k, m), lo, hi))
    check(("matmul", dtype), rnp.matmul, np.matmul, a, b,
          **({"rtol": 1e-5, "atol": 1e-3} if dtype == "float32" else {}))


@given(st.sampled_from(["float32", "int32"]), TINY, TINY, TINY, TINY, TINY, st.data())
def test_batched_matmul_broadcast(dtype, b1, b2, n, k, m, data):
    a = data.draw(arrays(dtype, (b1, 1, n, k), -50, 50))
    b = data.draw(arrays(dtype, (b2, k, m), -50, 50))
    out = check(("bmm", dtype), rnp.matmul, np.matmul, a, b,
                **({"rtol": 1e-5, "atol": 1e-3} if dtype == "float32" else {}))
    assert out.shape == (b1, b2, n, m)


def test_matmul_kinds():
    f32 = np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32)
    m = assert_fully_lowered(rnp.matmul, *f32, kinds=("library",))
    assert [b.callee.name for b in m.main.bindings if b.kind == "library"] == ["blas.sgemm"]
    i32 = np.ones((2, 3, 4), np.int32), np.ones((4, 5), np.int32)
    assert_fully_lowered(rnp.matmul, *i32, kinds=("tir",))
    exe = get_backend("numpy")(m)
    got = exe({"a0": 2, "a1": 3, "a2": 4, "b1": 5}, list(f32))
    assert_same(got[0], np.full((2, 3, 5), 4.0, np.float32))


# ---------------------------------------------------------------------------------------
# Graph sub-functions ("function" bindings), built by hand
# ---------------------------------------------------------------------------------------

def outline(fn: Function, lo: int, hi: int, name: str) -> tuple[Function, Function]:
    """Move bindings ``[lo, hi)`` of ``fn`` into a sub-function called from ``fn``."""
    inner = fn.bindings[lo:hi]
    defined = {v for b in inner for v in b.outvars}
    params = []
    for b in inner:
        for a in b.args:
            if isinstance(a, Var) and a not in defined and a not in params:
                params.append(a)
    later = [a for b in fn.bindings[hi:] for a in b.args] + list(fn.results)
    results = [v for b in inner for v in b.outvars if any(v is x for x in later)]
    # fresh variables inside the callee
    ren = {v: Var(v.type, v.hint) for v in list(params) + list(defined)}
    sub_bindings = [Binding([ren[v] for v in b.outvars], b.callee,
                            [ren.get(a, a) if isinstance(a, Var) else a for a in b.args],
                            dict(b.params), b.source) for b in inner]
    sub = Function(name, [ren[p] for p in params], [f"p{k}" for k in range(len(params))],
                   sub_bindings, [ren[r] for r in results], attrs={"primitive": True})
    call = Binding(list(results), sub, list(params))
    main = Function(fn.name, fn.params, fn.param_names,
                    fn.bindings[:lo] + [call] + fn.bindings[hi:], fn.results, fn.bounds,
                    fn.guards, fn.attrs)
    return main, sub


def _outline_module(module: IRModule, lo: int, hi: int, name="grp") -> IRModule:
    main, sub = outline(module.main, lo, hi, name)
    return IRModule({**module.functions, main.name: main, sub.name: sub}, module.entry)


def _fused(x, w):
    h = rnp.tanh(x * 2.0 + w)
    s = rnp.sum(h, axis=1)
    return rnp.exp(-h) + s[:, None], s * 3.0


def _np_fused(x, w):
    h = np.tanh(x * 2.0 + w)
    s = np.sum(h, axis=1)
    return np.exp(-h) + s[:, None], s * 3.0


STRUCTS = (rj.ShapeDtypeStruct(("n", 4), "float32"), rj.ShapeDtypeStruct((4,), "float32"))


@pytest.mark.parametrize("lowered", [False, True])
def test_function_binding_built_by_hand(lowered):
    module = rj.jit(_fused).lower(*STRUCTS).module
    if lowered:
        module = legalize(module)
    n_b = len(module.main.bindings)
    module = _outline_module(module, 1, n_b - 2)
    verify(module)
    kinds = [b.kind for b in module.main.bindings]
    assert "function" in kinds and len(module.functions["grp"].bindings) == n_b - 3
    if lowered:
        assert any(b.kind == "tir" for b in module.functions["grp"].bindings)
    exe = get_backend("numpy")(module)
    assert "@grp(" in exe.as_text("optimized") and "def grp(" in exe.as_text("optimized")
    rng = np.random.default_rng(1)
    for n in (1, 3, 6):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        w = rng.standard_normal(4).astype(np.float32)
        got = exe({"n": n}, [x, w])
        want = _np_fused(x, w)
        for g, v in zip(got, want):
            assert_same(g, v, **tolerance("float32"))


def test_nested_function_bindings_and_dims_from_expressions():
    """A callee whose parameter is f32[2 * n] binds n by solving; a callee calls a callee."""
    def f(x):
        c = rnp.concatenate([x, x + 1.0])
        return rnp.sqrt(rnp.abs(c)) * 2.0 - c[::-1]

    def np_f(x):
        c = np.concatenate([x, x + 1.0])
        return np.sqrt(np.abs(c)) * 2.0 - c[::-1]

    module = legalize(rj.jit(f).lower(rj.ShapeDtypeStruct(("n",), "float64")).module)
    nb = len(module.main.bindings)
    assert nb == 7, str(module)
    outer_main, outer = outline(module.main, 2, nb, "outer")      # takes b: f64[n * 2]
    assert not isinstance(outer.params[0].type.shape[0], sympy.Symbol)
    outer2, inner = outline(outer, 0, 2, "inner")                  # outer calls inner
    call = outer_main.bindings[-1]
    assert call.callee is outer
    main = Function(outer_main.name, outer_main.params, outer_main.param_names,
                    outer_main.bindings[:-1] + [Binding(call.outvars, outer2, call.args)],
                    outer_main.results, outer_main.bounds)
    module = IRModule({**module.functions, main.name: main, "outer": outer2, "inner": inner},
                      module.entry)
    verify(module)
    exe = get_backend("numpy")(module)
    for n in (1, 2, 5):
        x = np.linspace(-3, 3, n)
        assert_same(exe({"n": n}, [x])[0], np_f(x))
    text = exe.as_text("optimized")
    assert "def outer(" in text and "def inner(" in text and "@inner(" in text


def _outline_pass(lo, hi_from_end):
    return Pass("Outline", lambda m: _outline_module(m, lo, len(m.main.bindings) - hi_from_end))


PIPELINES = {
    # a sub-function of graph primitives
    "outline": ([_outline_pass(1, 2)], "@grp("),
    # a sub-function of call_tir bindings
    "legalize-outline": ([legalize, _outline_pass(1, 2)], "@grp("),
    # legalize lowers the primitive sub-function (one fused program, or op by op when the
    # group is not one loop nest): no function binding is left
    "outline-legalize": ([_outline_pass(1, 2), legalize], "call_tir("),
}


@given(st.sampled_from(sorted(PIPELINES)), st.integers(1, 6), st.data())
@FEW
def test_function_binding_through_pipeline(which, n, data):
    passes, marker = PIPELINES[which]
    key = ("outline", which)
    if key not in _JITS:
        _JITS[key] = rj.jit(_fused, backend="numpy", pipeline=passes)
    jf = _JITS[key]
    x = data.draw(arrays("float32", (n, 4), -2, 2))
    w = data.draw(arrays("float32", (4,), -2, 2))
    got = jf(x, w)
    for g, v in zip(got, _np_fused(x, w)):
        assert_same(g, v, **tolerance("float32"))
    text = jf.lower(x, w).compile(pipeline=passes).as_text("optimized")
    assert marker in text, text
    assert ("@grp(" in text) == (which != "outline-legalize"), text


def test_function_binding_argument_shape_is_checked():
    """A callee binds its dims from its arguments and rejects arguments that contradict them."""
    from relaxjax.backends.numpy_backend import _FunctionInterp
    module = _outline_module(rj.jit(_fused).lower(*STRUCTS).module, 0, 3)
    sub = module.functions["grp"]
    assert [str(p.type) for p in sub.params] == ["f32[n, 4]", "f32[4]"]
    interp = _FunctionInterp(sub, {})
    x, w = np.ones((3, 4), np.float32), np.full(4, 0.5, np.float32)
    (h,) = interp.call([x, w])
    assert_same(h, np.tanh(x * 2.0 + w))
    with pytest.raises(ShapeError):
        interp.call([np.ones((3, 5), np.float32), w])
    with pytest.raises(ShapeError):
        interp.call([np.ones((3, 4), np.float64), w])


# ---------------------------------------------------------------------------------------
# Fused kernels (FuseOps / FuseTIR): row-wise reductions, matmul epilogues
# ---------------------------------------------------------------------------------------

def _softmax_ln(x, g):
    e = rnp.exp(x - rnp.max(x, axis=1, keepdims=True))
    mu = rnp.mean(x, axis=1, keepdims=True)
    var = rnp.mean((x - mu) ** 2, axis=1, keepdims=True)
    return e / rnp.sum(e, axis=1, keepdims=True), (x - mu) / rnp.sqrt(var + 1e-5) * g


def _np_softmax_ln(x, g):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    mu = np.mean(x, axis=1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=1, keepdims=True)
    return e / np.sum(e, axis=1, keepdims=True), (x - mu) / np.sqrt(var + 1e-5) * g


def _mlp(x, w, b):
    return rnp.tanh(x @ w + b) * 0.5


def _np_mlp(x, w, b):
    return np.tanh(x @ w + b) * np.float32(0.5)


@given(TINY, TINY, st.data())
@FEW
def test_fused_row_reductions(n, m, data):
    x = data.draw(arrays("float64", (n, m), -5, 5))
    g = data.draw(arrays("float64", (m,), -2, 2))
    check("softmax_ln", _softmax_ln, _np_softmax_ln, x, g, rtol=1e-9, atol=1e-9)


@given(TINY, TINY, TINY, st.data())
@FEW
def test_fused_matmul_epilogue(n, k, m, data):
    x = data.draw(arrays("float32", (n, k), -2, 2))
    w = data.draw(arrays("float32", (k, m), -2, 2))
    b = data.draw(arrays("float32", (m,), -2, 2))
    check("mlp", _mlp, _np_mlp, x, w, b, rtol=1e-5, atol=1e-5)


def test_fused_pipelines_make_function_bindings_and_fused_programs():
    x, g = np.ones((3, 4)), np.ones(4)
    traced = dead_code_elimination(rj.jit(_softmax_ln).lower(x, g).module)
    fused = fuse_ops(traced)
    subs = [b.callee for b in fused.main.bindings if b.kind == "function"]
    assert subs and all(f.attrs.get("primitive") for f in subs)
    exe = get_backend("numpy")(fused)
    assert_same(exe({"x0": 3, "x1": 4}, [x, g]), list(_np_softmax_ln(x, g)), rtol=1e-12, atol=1e-12)
    lowered = legalize(fused)
    progs = [b.callee for b in lowered.main.bindings if b.kind == "tir"]
    assert any(p.name.startswith("fused_") for p in progs), str(lowered)
    exe = get_backend("numpy")(lowered)
    assert "fused_" in exe.as_text("loops")
    assert_same(exe({"x0": 3, "x1": 4}, [x, g]), list(_np_softmax_ln(x, g)), rtol=1e-12, atol=1e-12)
    x32, w32, b32 = np.ones((2, 3), np.float32), np.ones((3, 5), np.float32), np.ones(5, np.float32)
    mlp = legalize(fuse_ops(rj.jit(_mlp).lower(x32, w32, b32).module))
    assert {b.kind for b in mlp.main.bindings} == {"library", "tir"}, str(mlp)


# ---------------------------------------------------------------------------------------
# The loop interpreter itself
# ---------------------------------------------------------------------------------------

def _shift_program(op_name):
    """out[i] = op(i >= 1, a[i - 1], -1.0): a[-1] for i = 0 unless only the taken branch runs."""
    n = tir.Var("n")
    a = tir.Buffer("a", (sympy.Symbol("n"),), np.dtype("float64"))
    out = tir.Buffer("out", (sympy.Symbol("n"),), np.dtype("float64"))
    i = tir.Var("i")
    cond = tir.op("ge", i, 1)
    val = tir.op(op_name, cond, a[i - 1], tir.Const(-1.0, np.dtype("float64")), dtype="float64")
    body = tir.For(i, n, "serial", tir.Store(out, (i,), val))
    return tir.PrimFunc(f"shift_{op_name}", [a, out], 1, ["n"], body)


def test_if_then_else_is_lazy_and_select_is_eager():
    a = np.arange(5.0) + 10
    out = np.zeros(5)
    run_primfunc(_shift_program("if_then_else"), [a, out])
    assert out.tolist() == [-1.0, 10.0, 11.0, 12.0, 13.0]
    # select evaluates a[-1] too: the interpreter reports it instead of wrapping around
    with pytest.raises(IndexError, match="index -1 is out of bounds for axis 0 of buffer a"):
        run_primfunc(_shift_program("select"), [a, np.zeros(5)])


def test_primfunc_checks_buffer_shapes_and_dims():
    f = _shift_program("if_then_else")
    with pytest.raises(ShapeError):
        run_primfunc(f, [np.arange(5.0), np.zeros(4)])
    c = compile_primfunc(f)
    assert compile_primfunc(f) is c and "def _prim" in c.source
    outs = c.allocate_outputs([np.arange(3.0)])
    assert outs[0].shape == (3,) and np.isnan(outs[0]).all()     # poisoned until written
    c([np.arange(3.0)] + outs)
    assert outs[0].tolist() == [-1.0, 0.0, 1.0]


def test_reduction_with_local_accumulator_and_float16():
    x = (np.arange(24, dtype=np.float16) / 7).reshape(2, 3, 4)
    check(("f16sum", 1), lambda v: rnp.sum(v, axis=(0, 2)), lambda v: np.sum(v, axis=(0, 2)), x,
          rtol=1e-2, atol=1e-2)
