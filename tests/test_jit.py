"""jit: the cache keyed by symbolic signature, explicit shapes, guards, errors, pytrees,
match_cast and data-dependent shapes."""
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
import relaxjax.nn as nn
from helpers import BACKENDS, SIZES, assert_same

S = rj.ShapeDtypeStruct
n, k, m = rj.dims("n k m")


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mlp(x, w):
    return rnp.tanh(x @ w + 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fifty_batch_sizes_compile_once(backend):
    f = rj.jit(mlp, backend=backend)
    w = f32(8, 5)
    for b in range(2, 52):
        x = f32(b, 8, seed=b)
        assert_same(f(x, w), np.tanh(x @ w + np.float32(1.0)))
    info = f.cache_info()
    assert (info.compiles, info.misses, info.hits) == (1, 1, 49)
    (module,) = f.compiled_modules()              # one entry, its graph as the backend runs it
    assert module.main.params[0].type.shape[0] not in range(2, 52)     # the batch dim is symbolic


def test_size_one_is_symbolic_and_size_zero_specialized():
    """A dim of size 1 starts symbolic (batch sizes 1, 2, 3 ... compile once); a guard n == 1
    is recorded only where an op must know (broadcasting against another size)."""
    f = rj.jit(lambda x: x * 2.0)
    f(f32(1, 4)), f(f32(3, 4)), f(f32(5, 4)), f(f32(1, 9))
    assert f.cache_info().compiles == 1
    assert f(np.zeros((0, 4), np.float32)).shape == (0, 4)
    assert f.cache_info().compiles == 1          # empty results: traced, nothing compiled
    h = rj.jit(lambda x: x.sum(axis=0))           # an empty input with results to compute
    np.testing.assert_array_equal(h(np.zeros((0, 4), np.float32)), np.zeros(4, np.float32))
    assert h.cache_info().compiles == 1
    g = rj.jit(lambda x, y: x + y)                # x's rows broadcast when they are 1
    np.testing.assert_array_equal(g(f32(1, 4), f32(3, 4)), f32(1, 4) + f32(3, 4))
    np.testing.assert_array_equal(g(f32(3, 4), f32(3, 4)), f32(3, 4) * 2)
    np.testing.assert_array_equal(g(f32(1, 4), f32(1, 4)), f32(1, 4) * 2)
    np.testing.assert_array_equal(g(f32(1, 4), f32(7, 4)), f32(1, 4) + f32(7, 4))
    assert g.cache_info().compiles == 2          # x rows == 1 (broadcast), x rows == y rows


def test_dtype_and_rank_are_part_of_the_key():
    f = rj.jit(lambda x: x + 1)
    assert f(np.ones(3, np.int32)).dtype == np.int32
    assert f(np.ones(3, np.float32)).dtype == np.float32
    assert f(np.ones((3, 2), np.float32)).shape == (3, 2)
    assert f.cache_info().compiles == 3


def test_explicit_shapes_one_compile_and_precise_errors():
    g = rj.jit(mlp, shapes=(S((n, k), "float32"), S((k, m), "float32")))
    w = f32(6, 3)
    for b in (1, 2, 7, 100):
        assert g(f32(b, 6), w).shape == (b, 3)
    assert (g.cache_info().compiles, g.cache_info().hits) == (1, 3)
    # the errors below come after the fast dispatch table knows (float32, 2) x 2: a call it
    # rejects must still take the full path and be explained precisely
    with pytest.raises(rj.ShapeError, match=r"argument w axis 0: expected k .*k=6.*got 5"):
        g(f32(4, 6), f32(5, 3))
    with pytest.raises(rj.ShapeError, match=r"argument x: expected rank 2"):
        g(f32(4, 6, 1), w)
    with pytest.raises(TypeError, match=r"argument x: expected dtype float32, got float64"):
        g(np.ones((4, 6)), w)


def test_explicit_expressions_are_solved_and_checked():
    f = rj.jit(lambda x, y: x.reshape(-1) + y, shapes=(S((n, 4), "float32"), S((n * 4,), "float32")))
    assert f(f32(3, 4), f32(12)).shape == (12,)
    with pytest.raises(rj.ShapeError, match=r"argument y axis 0: expected n \* 4 .*n=3.*got 13"):
        f(f32(3, 4), f32(13))
    h = rj.jit(lambda y: y * 2, shapes=(S((n * 2,), "float32"),))
    assert h(f32(8)).shape == (8,)
    with pytest.raises(rj.ShapeError, match="expected n \\* 2"):
        h(f32(7))


def test_bounds_are_checked_at_call_time():
    b = rj.dim("b", min=1, max=8)
    f = rj.jit(lambda x: x + 1, shapes=(S((b,), "float32"),))
    f(f32(8))
    with pytest.raises(rj.ShapeError, match=r"b = 9 is outside its bounds \[1, 8\]"):
        f(f32(9))


def test_inconclusive_in_explicit_mode():
    g = rj.jit(lambda x, y: x + y, shapes=(S((n,), "float32"), S((m,), "float32")))
    with pytest.raises(rj.InconclusiveDimensionError, match=r"n == m.*Fix"):
        g(f32(3), f32(3))


def test_python_control_flow_on_dims_guards_in_auto_mode():
    calls = []

    def f(x):
        calls.append(1)
        if x.shape[0] > 5:
            return x * 2.0
        return x - 1.0
    jf = rj.jit(f)
    for b in (7, 9, 30):
        assert_same(jf(f32(b)), f32(b) * 2)
    for b in (2, 4, 5):
        assert_same(jf(f32(b)), f32(b) - 1)
    assert len(calls) == 2 and jf.cache_info().compiles == 2
    assert "guards: x0 > 5" in str(jf.lower(f32(7)).module)
    ex = rj.jit(f, shapes=(S((n,), "float32"),))
    with pytest.raises(rj.InconclusiveDimensionError):
        ex(f32(7))


def test_concrete_value_specializes_dim():
    jf = rj.jit(lambda x: x / math.sqrt(x.shape[-1]))
    assert_same(jf(f32(3, 16)), f32(3, 16) / np.float32(4.0))
    assert_same(jf(f32(5, 16)), f32(5, 16) / np.float32(4.0))
    assert jf.cache_info().compiles == 1
    assert_same(jf(f32(3, 9)), f32(3, 9) / np.float32(3.0))
    assert jf.cache_info().compiles == 2
    with pytest.raises(rj.InconclusiveDimensionError, match="static"):
        rj.jit(lambda x: x / math.sqrt(x.shape[-1]), shapes=(S((n, k), "float32"),))(f32(3, 16))


def test_symbolic_dim_as_value_stays_symbolic():
    jf = rj.jit(lambda x: x / rnp.sqrt(x.shape[-1]).astype(x.dtype) + x.shape[0])
    for b, d in ((3, 16), (4, 9)):
        x = f32(b, d)
        assert_same(jf(x), x / np.sqrt(d).astype(np.float32) + b)
    assert jf.cache_info().compiles == 1


def test_auto_unification_of_equal_dims():
    jf = rj.jit(lambda x, y: x + y)
    jf(f32(4), f32(4))
    text = jf.lower(f32(4), f32(4)).as_text()
    assert "def lambda(x: f32[x0], y: f32[x0])" in text
    jf(f32(9), f32(9))
    assert jf.cache_info().compiles == 1
    with pytest.raises(rj.ShapeError, match="cannot be broadcast"):
        jf(f32(4), f32(5))


def test_pytrees_in_and_out():
    @rj.jit
    def f(params, x, scale=2.0):
        h = x @ params["w"] + params["b"]
        return {"out": h * scale, "n": h.shape[0], "aux": (None, [h.sum()])}
    p = {"w": f32(4, 3), "b": f32(3)}
    for b in (2, 5):
        x = f32(b, 4)
        r = f(p, x)
        want = (x @ p["w"] + p["b"])
        assert r["n"] == b and type(r["n"]) is int and r["aux"][0] is None
        assert_same(r["out"], want * np.float32(2.0))
        assert_same(r["aux"][1][0], want.sum(), rtol=1e-5, atol=1e-4)
    assert f.cache_info().compiles == 1
    assert f(p, f32(3, 4), scale=3.0)["out"].dtype == np.float32   # weak Python scalar


def test_static_argnums_key_the_cache():
    f = rj.jit(lambda x, axis: x.sum(axis=axis), static_argnums=(1,))
    x = f32(3, 4)
    assert_same(f(x, 0), x.sum(axis=0), rtol=1e-5)
    assert_same(f(x, 1), x.sum(axis=1), rtol=1e-5)
    f(f32(7, 4), 1)
    assert f.cache_info().compiles == 2
    g = rj.jit(lambda x, mode: x * 2 if mode == "double" else x, static_argnames="mode")
    assert_same(g(x, mode="double"), x * 2)
    with pytest.raises(TypeError, match="hashable"):
        rj.jit(lambda x, s: x, static_argnums=1)(x, [1, 2])


def test_bad_arguments():
    f = rj.jit(lambda x: x)
    with pytest.raises(TypeError, match="argument x: unsupported type str"):
        f("hello")
    with pytest.raises(TypeError, match=r"datetime64\[s\] is not supported"):
        f(np.ones(3, "datetime64[s]"))


def test_traced_values_in_python_control_flow_are_clear_errors():
    with pytest.raises(rj.TracerConversionError, match="where"):
        rj.jit(lambda x: x if x.sum() > 0 else -x)(f32(3))
    leaked = []
    rj.jit(lambda x: leaked.append(x) or x)(f32(3))
    with pytest.raises(rj.TracerConversionError, match="leaked"):
        rnp.exp(leaked[0])


def test_numpy_ufuncs_dispatch_on_tracers():
    f = rj.jit(lambda x: np.exp(x) + np.float32(1))
    x = f32(5)
    assert_same(f(x), np.exp(x) + np.float32(1))


def test_nested_jit_inlines():
    inner = rj.jit(lambda x: x * 2.0)
    outer = rj.jit(lambda x: inner(x) + 1.0)
    assert_same(outer(f32(4)), f32(4) * 2 + 1)
    assert "mul" in outer.lower(f32(4)).as_text()


@settings(max_examples=20)
@given(st.lists(st.floats(-2, 2, width=32), min_size=1, max_size=200))
def test_boolean_mask_has_a_run_time_dim(vals):
    x = np.asarray(vals, np.float32)
    f = rj.jit(lambda x: (x[x > 0] * 2.0, rnp.nonzero(x > 0)[0]))
    a, idx = f(x)
    assert_same(a, x[x > 0] * np.float32(2))
    assert_same(idx, np.nonzero(x > 0)[0])


def test_data_dependent_dims_need_match_cast():
    def bad(x, y):
        return x[x > 0] + y                         # nz0 vs n: unknown until run time
    with pytest.raises(rj.InconclusiveDimensionError, match="match_cast"):
        rj.jit(bad)(f32(6), f32(6))

    def good(x, y):
        z = rj.match_cast(x[x > 0], (y.shape[0],))
        return z + y
    jf = rj.jit(good)
    x = np.array([1, -1, 2, 3], np.float32)
    y = np.array([10, 20, 30], np.float32)
    assert_same(jf(x, y), np.array([11, 22, 33], np.float32))
    with pytest.raises(rj.ShapeError, match="match_cast"):
        jf(np.array([1, 2, -3, -4], np.float32), y)


def test_match_cast_binds_new_names():
    def f(x):
        y = rj.match_cast(x[x > 0], ("p",))
        return y, y.shape[0]
    jf = rj.jit(f)
    x = np.array([1, -1, 2, 3, -5], np.float32)
    y, p = jf(x)
    assert p == 3 and type(p) is int
    assert "f32[p] = match_cast" in jf.lower(x).as_text()


def test_lower_accepts_structs_and_make_ir_prints():
    text = str(rj.make_ir(mlp)(S((n, k), "float32"), S((k, m), "float32")))
    assert text == ("def mlp(x: f32[n, k], w: f32[k, m]) -> f32[n, m]:\n"
                    "  a: f32[n, m] = matmul(x, w)\n"
                    "  b: f32[n, m] = add(a, 1.0)\n"
                    "  c: f32[n, m] = tanh(b)\n"
                    "  return c")
    g = rj.jit(mlp, shapes=(S((n, k), "float32"), S((k, m), "float32")))
    assert g.lower(f32(3, 4), f32(4, 2)).as_text() == text
    with pytest.raises(TypeError, match="lower"):
        g(S((n, k), "float32"), S((k, m), "float32"))


def test_unknown_backend_lists_available_ones():
    with pytest.raises(ValueError, match="available backends: .*numpy"):
        rj.jit(mlp, backend="tpu")


def test_error_points_at_the_users_line():
    def f(x, y):
        return x @ y                                  # the line to report
    with pytest.raises(rj.ShapeError) as ei:
        rj.jit(f)(f32(3, 4), f32(5, 2))
    notes = "".join(getattr(ei.value, "__notes__", []))
    assert "test_jit.py" in notes


@settings(max_examples=15)
@given(st.lists(SIZES, min_size=3, max_size=6))
def test_layer_norm_serves_all_sizes_with_one_compile(batch_sizes):
    f = rj.jit(lambda x, g, b: nn.layer_norm(x, g, b))
    g, bb = f32(16, seed=1), f32(16, seed=2)
    for b in batch_sizes:
        x = f32(b, 16, seed=b).astype(np.float64)
        want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + bb
        assert_same(f(x, g.astype(np.float64), bb.astype(np.float64)), want, rtol=1e-10, atol=1e-10)
    assert f.cache_info().compiles == 1           # every batch size, 1 included


def test_lowered_compile_gives_a_callable_for_all_shapes():
    c = rj.jit(mlp, shapes=(S((n, k), "float32"), S((k, m), "float32"))).lower(
        S((n, k), "float32"), S((k, m), "float32")).compile()
    w = f32(4, 3)
    for b in (1, 6, 31):
        x = f32(b, 4, seed=b)
        assert_same(c(x, w), np.tanh(x @ w + np.float32(1.0)))
    with pytest.raises(rj.ShapeError, match="argument w axis 0: expected k"):
        c(f32(2, 4), f32(5, 3))
    assert re.search(r"call_tir\(fused_matmul_add_tanh, \w+\)", c.as_text()), c.as_text()


def test_shape_from_a_dim_no_argument_binds_is_a_shape_error():
    """A free rj.dim in a created shape has no size at run time: a ShapeError at trace time
    naming the op and the dim, not a verifier failure."""
    n, m = rj.dims("n m")
    f = rj.jit(lambda x: rnp.broadcast_to(x, (n, m)) * 2.0, shapes=(rj.ShapeDtypeStruct((m,), "float32"),))
    with pytest.raises(rj.ShapeError, match="broadcast_to .* dim n that no argument"):
        f.lower(rj.ShapeDtypeStruct((m,), "float32"))
    g = rj.jit(lambda x, y: rnp.broadcast_to(x, y.shape) * 2.0)       # bound through y: fine
    x, y = np.arange(3, dtype=np.float32), np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(g(x, y), np.broadcast_to(x, (4, 3)) * 2.0)

@pytest.mark.parametrize("mode", ["explicit", "auto"])
def test_mlp_and_attention_scores_compile_once_for_all_drawn_shapes(mode):
    """relaxjax.testing.assert_shape_polymorphic: fresh jits called with 2-4 drawn shape sets
    each compile once and match NumPy."""
    from relaxjax.testing import assert_shape_polymorphic
    assert_shape_polymorphic(mlp, [S((n, k), "float32"), S((k, m), "float32")], mode=mode,
                             backend=BACKENDS, max_examples=4)
    h = rj.dim("h", max=8)

    def scores(q, kk):                 # (b, h * 4) heads split, scaled by a constant
        b = q.shape[0]
        qh = rnp.reshape(q, (b, -1, 4)).transpose(1, 0, 2)
        kh = rnp.reshape(kk, (b, -1, 4)).transpose(1, 2, 0)
        return nn.softmax(qh @ kh * 0.5, axis=-1)
    assert_shape_polymorphic(scores, [S((n, h * 4), "float64"), S((n, h * 4), "float64")], mode=mode,
                             max_examples=4)


def test_pytree_arguments_take_the_fast_path_with_the_same_results():
    """Dicts and lists of arrays (a model's parameters) are keyed by their structure,
    dtypes and ranks without the full argument analysis; another structure, a masked array
    or a Python scalar leaf takes the full path, as before."""
    f = rj.jit(lambda x, p: x @ p["w"] + p["b"][0])
    rng = np.random.default_rng(0)
    for n in (3, 5, 3, 7):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        p = {"w": rng.standard_normal((4, 2)).astype(np.float32), "b": [np.ones(2, np.float32)]}
        np.testing.assert_allclose(f(x, p), x @ p["w"] + 1, rtol=1e-6)
    assert f.cache_info().compiles == 1
    p2 = {"w": p["w"], "b": [np.ones(2, np.float32), np.zeros(2, np.float32)]}      # new structure
    np.testing.assert_allclose(f(x, p2), x @ p["w"] + 1, rtol=1e-6)
    assert f.cache_info().compiles == 2
    with pytest.raises(TypeError, match="masked"):
        f(x, {"w": np.ma.masked_array(p["w"]), "b": p["b"]})
    np.testing.assert_allclose(f(x, {"w": p["w"], "b": [2.0]}), x @ p["w"] + 2, rtol=1e-6)


def _full_path_calls(j) -> list:
    """The calls ``j`` takes through the full path from now on (one list entry each)."""
    slow = []
    full_path = j._call_slow
    j._call_slow = lambda *a: slow.append(a) or full_path(*a)
    return slow


def _scaled(x, scale, bias=None, power=2):
    y = x * scale
    return (y if bias is None else y + bias) ** power


def test_python_scalars_on_the_fast_path_keep_their_weak_types():
    """Python scalars (a position, a step size; flat or in a pytree) take the fast path
    after the first call, each type weakly typed and keyed apart from the NumPy scalar of
    its default dtype: NumPy's result dtypes, one compile per type, every value."""
    f = rj.jit(lambda x, p: x * p)
    slow = _full_path_calls(f)
    x = np.arange(1, 4, dtype=np.float32)
    calls = [3, np.int64(3), 2.5, np.float64(2.5), True, 1j, -7, 0.125, False, 2j]
    for a in calls:
        got = f(x, a)
        assert got.dtype == (x * a).dtype, (a, got.dtype)
        np.testing.assert_allclose(got, x * a, rtol=1e-6)
    assert f.cache_info().compiles == 6 and f.cache_info().hits == 4
    assert len(slow) == 6                      # the first call of each type only
    for big in (2**63, -2**63 - 1, 2**70):     # no int64 holds it: said, not wrapped
        with pytest.raises(OverflowError, match="argument p: Python int .* out of range for dtype int64"):
            f(x, big)
    np.testing.assert_array_equal(f(x, -2**63), x * float(-2**63))
    g = rj.jit(lambda d: d["x"] * d["lr"])
    for lr in (0.5, 2.0, 1e-3):
        np.testing.assert_allclose(g({"x": x, "lr": lr}), x * lr, rtol=1e-6)
    assert g({"x": x, "lr": np.float64(2)}).dtype == np.float64
    assert g.cache_info().compiles == 2 and g.cache_info().hits == 2


def test_calls_leaving_out_defaulted_arguments_take_the_fast_path():
    """A function with trailing defaulted parameters called without them (``bias=None``)
    takes the fast path after its first call, keyed apart from calls passing them: each
    form gives NumPy's numbers and goes through the full path once."""
    f = _scaled
    j = rj.jit(f)
    slow = _full_path_calls(j)
    x, b = np.arange(1.0, 5.0), np.full(4, 0.5)
    for _ in range(3):
        np.testing.assert_allclose(j(x, 2.0), f(x, 2.0))
        np.testing.assert_allclose(j(x, 2.0, b), f(x, 2.0, b))
        np.testing.assert_allclose(j(x, 2.0, b, 3), f(x, 2.0, b, 3))
    assert len(slow) == 3 and j.cache_info().compiles == 3
    with pytest.raises(TypeError, match="missing"):
        j(x)
    # explicit signatures: the entries of parameters left out go unused
    S, n = rj.ShapeDtypeStruct, rj.dim("n")
    e = rj.jit(f, shapes=(S((n,), "float64"), S((), "float64"), S((n,), "float64"), S((), "int64")))
    for m in (4, 9):
        y = np.arange(float(m))
        np.testing.assert_allclose(e(y, 2.0), f(y, 2.0))
        np.testing.assert_allclose(e(y, 2.0, y), f(y, 2.0, y))
    assert e.cache_info().compiles == 2
    with pytest.raises(TypeError, match="expected dtype float64, got float32"):
        e(y.astype(np.float32), 2.0)


def test_keyword_arguments_take_the_fast_path_as_positional_ones():
    """Keywords naming the parameters after the positional arguments are bound as the full
    path binds them (positionally: one entry for ``f(x, s)`` and ``f(x, scale=s)``) and take
    the fast path; a keyword after a gap, or one repeating a positional argument, goes
    through the full path (its numbers, its error)."""
    f = _scaled
    j = rj.jit(f)
    slow = _full_path_calls(j)
    x, b = np.arange(1.0, 5.0), np.full(4, 0.5)
    for _ in range(3):
        np.testing.assert_allclose(j(x, scale=2.0), f(x, 2.0))
        np.testing.assert_allclose(j(x, 2.0), f(x, 2.0))
        np.testing.assert_allclose(j(x=x, bias=b, scale=2.0), f(x, 2.0, b))
    assert len(slow) == 2 and j.cache_info().compiles == 2
    # (a keyword after a gap was dropped when tracing: power=3 ran as power=2)
    np.testing.assert_allclose(j(x, 2.0, power=3), f(x, 2.0, power=3))
    np.testing.assert_allclose(j(x, scale=2.0, power=3), f(x, 2.0, power=3))
    assert len(slow) == 4
    with pytest.raises(TypeError, match="multiple values"):
        j(x, 2.0, scale=3.0)


def test_every_way_of_passing_the_arguments_computes_what_python_does():
    """Every split of a signature's arguments into positional and keyword ones, defaulted
    ones left out anywhere, with and without static arguments, ``*args`` and ``**kwargs``:
    the jitted function returns what the Python function does, on its first call and from
    its cache."""
    import itertools

    def f(a, b, c=None, d=2.0, *, e=1.0, g=None):
        out = a * b
        if c is not None:
            out = out + c
        out = out * d + e
        return out if g is None else out - g
    x = np.arange(1.0, 4.0)
    vals = {"a": x, "b": 2.0, "c": np.full(3, 0.5), "d": 3.0, "e": -1.0, "g": x * 0.25}
    order = ["a", "b", "c", "d"]
    checked = 0
    for statics in [(), ("d",), ("e",), ("b", "d")]:
        j = rj.jit(f, static_argnames=statics)
        for n_pos in range(5):
            for chosen in itertools.product([False, True], repeat=4):
                passed = [n for n, g in zip(["c", "d", "e", "g"], chosen) if g]
                pos = order[:n_pos]
                if any(n not in passed for n in pos[2:]):
                    continue
                kw = {n: vals[n] for n in ["a", "b"] + passed if n not in pos}
                args = [vals[n] for n in pos]
                want = f(*args, **kw)
                for _ in range(2):
                    np.testing.assert_allclose(j(*args, **kw), want, err_msg=f"{statics} {pos} {sorted(kw)}")
                checked += 1
    assert checked == 4 * 60          # (c, d positional only where passed)

    def h(a, b=2.0, *rest, k=1.0, **extra):
        return a * b * k + sum(rest) + sum(extra.values())
    j = rj.jit(h)
    for n_pos in range(1, 5):                    # a; a, b; a, b and one or two of *rest
        for kws in itertools.product([False, True], repeat=3):
            kw = {n: vals for n, vals, g in zip(["b", "k", "z"], [5.0, -2.0, x * 0.5], kws) if g}
            if n_pos > 1 and "b" in kw:
                continue
            args = [x, 3.0, x * 2, x * 4][:n_pos]
            want = h(*args, **kw)
            for _ in range(2):
                np.testing.assert_allclose(j(*args, **kw), want, err_msg=f"{n_pos} {sorted(kw)}")


def test_star_args_take_the_fast_path():
    """A function of ``*arrays`` takes the fast path after the first call with each count
    (each count is an entry of its own), every count NumPy's sum."""
    @rj.jit
    def total(x, *rest):
        for r in rest:
            x = x + r
        return x
    slow = _full_path_calls(total)
    x = np.arange(3.0)
    for n in (0, 1, 3, 1, 0, 3):
        np.testing.assert_allclose(total(x, *[x * (i + 1) for i in range(n)]), x * (1 + n * (n + 1) // 2))
    assert len(slow) == 3 and total.cache_info().compiles == 3


def test_explicit_pytree_signatures_and_numpy_scalars_on_the_fast_path():
    """A signature of structs in a dict and a NumPy scalar argument (a decode step's
    position) take the fast path after the first call, and still reject what breaks the
    signature with its precise error."""
    S = rj.ShapeDtypeStruct
    n = rj.dim("n")
    f = rj.jit(lambda p, i: p["w"][i] * 2.0, shapes=({"w": S((n, 3), "float32")}, S((), "int32")))
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    for k in range(3):
        np.testing.assert_array_equal(f({"w": w}, np.int32(k)), w[k] * 2)
    assert f.cache_info().compiles == 1 and f.cache_info().hits == 2
    with pytest.raises(rj.ShapeError, match="axis 1: expected 3"):
        f({"w": np.ones((4, 5), np.float32)}, np.int32(0))
    with pytest.raises(TypeError, match="expected dtype float32"):
        f({"w": np.ones((4, 3))}, np.int32(0))
