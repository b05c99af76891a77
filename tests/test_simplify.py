"""Graph simplification passes: FoldConstants, SimplifyAlgebra, CSE, SimplifyShapes and
Canonicalize, on the IR (structure and text) and numerically on every backend."""
import numpy as np
import pytest
import sympy
from hypothesis import given, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import lax
from relaxjax.compile import run_pipeline, verify
from relaxjax.compile.simplify import (canonicalize, eliminate_common_subexpr, fold_constants,
                                       simplify_algebra, simplify_shapes, simplify_dim,
                                       substitute_vars)
from relaxjax.ir import Binding, Function, IRModule, Literal, TensorType, Var
from relaxjax.shapes import ShapeEnv, as_dim, symbol

from helpers import BACKENDS, arrays, assert_same

S = rj.ShapeDtypeStruct
F32, I32, F64 = np.dtype("float32"), np.dtype("int32"), np.dtype("float64")


@pytest.fixture(autouse=True)
def _verify_every_pass(monkeypatch):
    monkeypatch.setenv("RELAXJAX_VERIFY", "1")


def traced(f, *structs):
    return rj.jit(f).lower(*structs).module


def run(module, *passes):
    """Run passes with the verifier on; the input module must come back untouched."""
    before = str(module)
    out = run_pipeline(module, list(passes), check=True)
    assert str(module) == before, "a pass mutated its input"
    return out


def ops(module, name=None):
    fn = module.main if name is None else module.functions[name]
    return [b.callee.name for b in fn.bindings]


def lit(value, dtype, weak=False):
    v = np.asarray(value, dtype)
    return Literal(v, TensorType(v.shape, v.dtype, weak))


def module_of(params, bindings, results, bounds=None, names=None):
    fn = Function("f", params, names or [f"p{i}" for i in range(len(params))], bindings, results,
                  bounds or {})
    m = IRModule({"f": fn}, "f")
    verify(m)
    return m


n = symbol("n")
XN8 = S(("n", 8), "float32")


# ---------------------------------------------------------------------------------------
# SimplifyAlgebra
# ---------------------------------------------------------------------------------------

def test_exact_identities_vanish():
    def f(x):
        d = as_dim(x.shape[0])
        return (x * 1.0, 1.0 * x, x / 1.0, x - 0.0, x + (-0.0), -(-x),
                lax.convert.bind(x, dtype=F32), lax.reshape.bind(x, new_sizes=(d, 8)),
                lax.broadcast_to.bind(x, shape=(d, 8)), lax.transpose.bind(x, perm=(0, 1)),
                lax.slice.bind(x, start=(0, 0), size=(d, 8), step=(1, 1)),
                lax.transpose.bind(lax.transpose.bind(x, perm=(1, 0)), perm=(1, 0)))
    m = traced(f, XN8)
    assert len(m.main.bindings) == 14           # 12 results, the inner neg and transpose
    out = run(m, simplify_algebra)
    x = out.main.params[0]
    assert out.main.results == [x] * 12
    assert ops(out) == ["neg", "transpose"]      # the inner ones, dead now
    assert ops(run(m, canonicalize)) == []
    assert str(run(m, canonicalize)).endswith("return " + ", ".join(["x"] * 12))


def test_integer_and_bool_zero_and_one():
    def f(i, b):
        return i * 1, 1 * i, i + 0, 0 + i, i - 0, -(-i), rnp.logical_or(b, False), ~~b
    m = traced(f, S(("n",), "int32"), S(("n",), "bool"))
    out = run(m, canonicalize)
    i, b = out.main.params
    assert out.main.results == [i] * 6 + [b] * 2
    assert out.main.bindings == []


def test_float_plus_zero_is_not_an_identity():
    # -0.0 + 0.0 is +0.0: x + 0.0 must stay; x - (-0.0) likewise; 0 * x is not x
    m = traced(lambda x: (x + 0.0, 0.0 + x, x - (-0.0), x * 0.0), XN8)
    out = run(m, canonicalize)
    assert ops(out) == ["add", "add", "sub", "mul"]
    assert "add(x, 0.0)" in str(out) and "mul(x, 0.0)" in str(out)


def test_identity_that_changes_dtype_or_shape_is_not_applied():
    def f(i, x, v):
        # int32 * 1.0 is float64; v (8,) * ones (3, 8) broadcasts; x (n, 8) + 0 ...
        return i * 1.0, v * np.ones((3, 8), np.float32), lax.broadcast_to.bind(v, shape=(3, 8)), \
            rnp.astype(i, "int64") * 1
    m = traced(f, S(("n", 8), "int32"), XN8, S((8,), "float32"))
    out = run(m, canonicalize)
    text = str(out)
    assert "convert(i, dtype=f64" in text              # the result stays float64
    res = out.main.results
    i, x, v = out.main.params
    assert res[0] is not i and res[0].type.dtype == F64
    assert res[1] is not v and res[1].type.shape == (3, 8)
    assert res[2] is not v and ops(out).count("broadcast_to") == 1
    assert res[3].type.dtype == np.dtype("int64") and "convert(i, dtype=i64" in text


def test_broadcasting_literal_one_never_widens_x():
    # x (1, 8) * ones (4, 8): the output (4, 8) is not x; x (n, 8) * ones (8,) is x
    m = traced(lambda x, y: (x * np.ones((4, 8), np.float32), y * np.ones(8, np.float32)),
               S((1, 8), "float32"), XN8)
    out = run(m, simplify_algebra)
    x, y = out.main.params
    assert out.main.results[0] is not x and out.main.results[1] is y


def test_weak_and_symbolic_shapes_must_match_exactly_for_results():
    # out: f32[n + n]; operand f32[2 * n] is provably equal: internal uses are replaced,
    # but a function result keeps its exact type
    x = Var(TensorType((2 * n,), F32))
    y = Var(TensorType((sympy.Add(n, n, evaluate=False),), F32))
    z = Var(TensorType((2 * n,), F32))
    m = module_of([x], [Binding([y], lax.mul, [x, lit(1.0, F32)]), Binding([z], lax.exp, [y])],
                  [y, z])
    out = run(m, simplify_algebra)
    fn = out.main
    assert fn.results[0] is y and fn.bindings[-1].args == [x]
    # a weak operand never stands for a non-weak result
    w = Var(TensorType((), F64, True))
    r = Var(TensorType((), F64, False))
    m2 = module_of([w], [Binding([r], lax.mul, [w, lit(1.0, F64)])], [r])
    assert run(m2, simplify_algebra).main is m2.main


def test_transposes_compose():
    def f(x):
        t = lax.transpose.bind(x, perm=(1, 2, 0))
        return lax.transpose.bind(t, perm=(1, 2, 0)), lax.transpose.bind(t, perm=(2, 0, 1))
    m = traced(f, S(("a", "b", "c"), "float32"))
    out = run(m, canonicalize)
    x = out.main.params[0]
    assert ops(out) == ["transpose"]
    (b,) = out.main.bindings
    assert b.args == [x] and b.params["perm"] == (2, 0, 1)
    assert out.main.results == [b.outvars[0], x]


# ---------------------------------------------------------------------------------------
# CSE
# ---------------------------------------------------------------------------------------

def test_cse_computes_exp_once():
    m = traced(lambda x: rnp.exp(x) + rnp.exp(x), XN8)
    assert ops(m) == ["exp", "exp", "add"]
    out = run(m, eliminate_common_subexpr)
    assert ops(out) == ["exp", "add"]
    e = out.main.bindings[0].outvars[0]
    assert out.main.bindings[1].args == [e, e]
    assert str(out).count("exp(x)") == 1


def test_cse_compares_params_and_literals_carefully():
    def f(x):
        return (x.sum(axis=0), x.sum(axis=0), x.sum(axis=1), x.max(axis=0),
                x * 2.0, x * 2.0, x * 3.0, x + 0.0, x + np.float32(-0.0),
                x.astype("float64"), x.astype("float64"), x.astype("int32"),
                x.reshape(8, -1), x.reshape(8, -1), x.reshape(-1))
    m = traced(f, XN8)
    out = run(m, eliminate_common_subexpr)
    assert ops(out) == ["reduce_sum", "reduce_sum", "reduce_max", "mul", "mul", "add", "add",
                        "convert", "convert", "reshape", "reshape"]
    r = out.main.results
    assert r[0] is r[1] and r[4] is r[5] and r[9] is r[10] and r[12] is r[13]
    assert len({id(v) for v in r}) == 11


def test_cse_keeps_data_dependent_and_match_cast():
    def f(x):
        a = rnp.nonzero(x > 0)[0]
        b = rnp.nonzero(x > 0)[0]
        y = rj.match_cast(x, ("n", 8))
        z = rj.match_cast(x, ("n", 8))
        return a.shape[0] + b.shape[0], y + z
    m = traced(f, XN8)
    out = run(m, canonicalize)
    assert ops(out).count("nonzero") == 2 and ops(out).count("match_cast") == 2
    assert ops(out).count("gt") == 1


def test_cse_literal_weakness_matters():
    x = Var(TensorType((), F64, True))
    a, b, c = (Var(TensorType((), F64, True)) for _ in range(3))
    m = module_of([x], [Binding([a], lax.add, [x, lit(1.0, F64, weak=True)]),
                        Binding([b], lax.add, [x, lit(1.0, F64, weak=True)]),
                        Binding([c], lax.add, [x, lit(1.0, F64, weak=False)])],
                  [a, b, c])
    # the third has a non-weak operand: its recorded type is weak only by the rule of a+b
    out = run(m, eliminate_common_subexpr)
    assert out.main.results[0] is out.main.results[1] is a and out.main.results[2] is c


# ---------------------------------------------------------------------------------------
# FoldConstants
# ---------------------------------------------------------------------------------------

def test_constants_fold():
    # the dims are equal once x + y is traced: (x0 - y0) * 2.0 becomes constant
    def f(x, y):
        d = (x.shape[0] - y.shape[0]) * 2.0
        return x + y + d, d
    m = rj.jit(f).lower(np.ones((3, 4), np.float32), np.ones((5, 4), np.float32)[:3]).module
    assert ops(m) == ["convert", "mul", "add", "convert", "add"]
    out = run(m, fold_constants)
    assert ops(out) == ["add", "add"]
    assert "add(a, 0.0)" in str(out)            # x + y + 0.0: not an identity for floats
    r = out.main.results[1]
    assert isinstance(r, Literal) and r.type == m.main.results[1].type and r.value == 0.0


def test_fold_small_arrays_and_multiple_steps():
    x = Var(TensorType((4,), F32))
    a, b, c = Var(TensorType((4,), F32)), Var(TensorType((2, 2), F32)), Var(TensorType((4,), F32))
    big = Var(TensorType((2000,), F32))
    m = module_of([x], [
        Binding([a], lax.mul, [lit([1, 2, 3, 4], F32), lit(3.0, F32)]),
        Binding([b], lax.reshape, [a], {"new_sizes": (2, 2)}),
        Binding([c], lax.add, [x, a]),
        Binding([big], lax.iota, [], {"shape": (2000,), "dimension": 0, "dtype": F32})],
        [b, c, big])
    out = run(m, fold_constants)
    assert ops(out) == ["add", "iota"]              # 2000 elements stay computed
    rb = out.main.results[0]
    assert isinstance(rb, Literal) and rb.type == b.type
    np.testing.assert_array_equal(rb.value, [[3, 6], [9, 12]])
    assert out.main.bindings[0].args[1].value.tolist() == [3, 6, 9, 12]


def test_fold_skips_symbolic_and_erroring_ops():
    # symbolic operands and params are not constants; an out-of-range take stays (it raises
    # at run time, where the program would)
    x = Var(TensorType((n, 4), F32))
    s = Var(TensorType((), F32, True))
    t = Var(TensorType((2,), F32))
    m = module_of([x], [
        Binding([s], lax.convert, [Literal(n, TensorType((), np.dtype("int64"), True))],
                {"dtype": F32, "weak": True}),
        Binding([t], lax.take, [lit([1.0, 2.0], F32), lit([0, 7], np.dtype("int64"))], {"axis": 0})],
        [s, t], bounds={n: (1, 100)})
    assert run(m, fold_constants).main is m.main


# ---------------------------------------------------------------------------------------
# SimplifyShapes
# ---------------------------------------------------------------------------------------

def test_simplify_dim_uses_bounds():
    env = ShapeEnv("explicit", {n: (1, 10)})
    assert simplify_dim(sympy.Min(n, 16), env) == n
    assert simplify_dim(sympy.Max(n, 11), env) == 11
    assert simplify_dim(sympy.Mod(n, 16), env) == n
    assert simplify_dim(sympy.floor(n / 16), env) == 0
    assert simplify_dim(sympy.Add(n, n, evaluate=False), env) == 2 * n
    k = symbol("k")
    assert simplify_dim(sympy.Min(n + 1, n + 2, k), env) == sympy.Min(n + 1, k)
    assert simplify_dim(sympy.Min(n, k), env) == sympy.Min(n, k)       # undecided: stays
    assert simplify_dim(n, ShapeEnv("explicit", {n: (5, 5)})) == n      # symbols stay


def test_shapes_simplify_in_types_params_literals_and_results():
    four_n_half = sympy.floor(sympy.Mul(n, 4, evaluate=False) / 2, evaluate=False)
    x = Var(TensorType((n, 8), F32))
    y = Var(TensorType((sympy.Min(n, 16), 8), F32))                 # n <= 10: min is n
    z = Var(TensorType((four_n_half, 4), F32))
    c = Var(TensorType((), F32, True))
    e = Var(TensorType((), np.dtype("int64"), True))
    m = module_of([x], [
        Binding([y], lax.slice, [x], {"start": (0, 0), "size": (sympy.Min(n, 16), 8), "step": (1, 1)}),
        Binding([z], lax.reshape, [y], {"new_sizes": (four_n_half, 4)}),
        Binding([c], lax.convert, [Literal(sympy.floor(n / 16), TensorType((), np.dtype("int64"), True))],
                {"dtype": F32, "weak": True}),
        Binding([e], lax.add, [Literal(sympy.Mod(n, 16), TensorType((), np.dtype("int64"), True)),
                               lit(1, np.dtype("int64"), weak=True)])],
        [y, z, c, e], bounds={n: (1, 10)}, names=["x"])
    assert "min(16, n)" in str(m)
    out = run(m, simplify_shapes)
    text = str(out)
    assert "min" not in text and "//" not in text and "%" not in text, text
    assert "f32[n, 8] = slice(x, start=(0, 0), size=(n, 8)" in text
    assert "f32[n * 2, 4] = reshape(" in text and "new_sizes=(n * 2, 4)" in text
    assert "convert(0, dtype=f32" in text and "add(n, 1)" in text
    fn = out.main
    assert fn.params[0] is x                                  # unchanged type: same Var
    assert fn.results[0] is fn.bindings[0].outvars[0] is not y
    assert fn.results[1] is fn.bindings[1].outvars[0] is not z
    assert fn.bindings[1].args == [fn.bindings[0].outvars[0]]
    assert fn.results[2] is c                                  # its type did not change
    # everything then canonicalizes away: slice of all of x, folded constants
    canon = run(m, canonicalize)
    assert ops(canon) == ["reshape", "add"] and canon.main.results[0] is x    # add(n, 1) is symbolic
    assert isinstance(canon.main.results[2], Literal) and canon.main.results[2].value == 0.0


def test_every_function_is_rewritten_and_others_pass_through():
    t = TensorType((n,), F32)
    x, a, b = Var(t), Var(t), Var(t)
    g = Function("g", [x], ["x"], [Binding([a], lax.exp, [x]), Binding([b], lax.exp, [x])], [a, b])
    p, r1, r2 = Var(t), Var(t), Var(t)
    h = Function("h", [p], ["p"], [Binding([r1, r2], g, [p])], [r1])
    other = object()
    m = IRModule({"h": h, "g": g, "lib": other}, "h")
    out = run_pipeline(m, [eliminate_common_subexpr], check=False)
    assert out.functions["lib"] is other
    g2 = out.functions["g"]
    assert ops(out, "g") == ["exp"] and g2.results[0] is g2.results[1]
    assert out.functions["h"].bindings[0].callee is g2           # the caller calls the new g
    assert h.bindings[0].callee is g                              # the input is untouched


def test_substitute_vars_follows_chains_and_reuses_unchanged_bindings():
    t = TensorType((3,), F32)
    x, a, b, c = Var(t), Var(t), Var(t), Var(t)
    ba, bb, bc = Binding([a], lax.exp, [x]), Binding([b], lax.exp, [a]), Binding([c], lax.exp, [x])
    fn = Function("f", [x], ["x"], [ba, bb, bc], [b, c])
    assert substitute_vars(fn, {}) is fn
    new = substitute_vars(fn, {b: a, a: x})
    assert new is not fn and new.results == [x, c]
    assert new.bindings[0] is ba and new.bindings[2] is bc and new.bindings[1].args == [x]
    assert bb.args == [a] and fn.results == [b, c]


# ---------------------------------------------------------------------------------------
# Numerics: canonicalized programs agree with NumPy on every backend
# ---------------------------------------------------------------------------------------

def _program(x, i):
    e = rnp.exp(x * 1.0) + rnp.exp(x)
    t = lax.transpose.bind(lax.transpose.bind(x, perm=(1, 0)), perm=(1, 0))
    j = (i * 1 + 0) - 0
    return e - 0.0, t + (-0.0), x + 0.0, -(-x) / 1.0, j * 2, (i * 1.0) + 1.0, x.T.T.sum(axis=0)


def _program_np(x, i):
    e = np.exp(x * np.float32(1.0)) + np.exp(x)
    return (e - np.float32(0), x + np.float32(-0.0), x + np.float32(0.0), x.copy(), i * 2,
            i * 1.0 + 1.0, x.sum(axis=0))


_JITTED: dict = {}


def _jitted(backend):
    if backend not in _JITTED:
        _JITTED[backend] = rj.jit(_program, backend=backend, pipeline=[canonicalize],
                                  shapes=(S(("n", "m"), "float32"), S(("n", "m"), "int32")))
    return _JITTED[backend]


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data())
def test_canonicalized_program_matches_numpy(backend, data):
    shape = data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9)))
    x = data.draw(arrays("float32", shape, -3.0, 3.0))
    x.flat[0] = -0.0                                      # x + 0.0 makes it +0.0, x*1 keeps it
    i = data.draw(arrays("int32", shape, -1000, 1000))
    f = _jitted(backend)
    got, want = f(x, i), _program_np(x, i)
    assert_same(got, want)
    assert np.signbit(got[1].flat[0]) and not np.signbit(got[2].flat[0])
    assert f.cache_info().compiles == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_canonicalized_ir_is_what_runs(backend):
    f = _jitted(backend)
    lowered = f.lower(S(("n", "m"), "float32"), S(("n", "m"), "int32"))
    graph = run(lowered.module, canonicalize)
    names = ops(graph)
    assert names.count("exp") == 1 and names.count("transpose") == 0 and names.count("neg") == 0
    if backend == "numpy":
        text = lowered.compile([canonicalize]).as_text("optimized")
        assert text.count("exp(") == 1 and "neg(" not in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_folded_and_aliased_results_run(backend):
    def f(x, y):
        d = (x.shape[0] - y.shape[0]) * 2.0
        return x + y + d, d, x * 1.0, rnp.exp(x) - rnp.exp(x)
    g = rj.jit(f, backend=backend, pipeline=[canonicalize])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.ones((3, 4), np.float32)
    got = g(x, y)
    assert_same(got, (x + y + np.float32(0.0), np.float64(0.0), x, np.exp(x) - np.exp(x)))
