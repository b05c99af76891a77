"""User kernels (``rj.kernel`` + ``rj.call_tir``): the loop-level programs they parse to, that
they fuse like generated programs, their numbers on every backend (NumPy, or the kernel's
own Python run on NumPy scalars, is the oracle), and every error a kernel can raise."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.tir.analysis import classify_primfunc, loop_is_independent
from relaxjax.tir import For

from helpers import BACKENDS, SIZES, assert_same

S = rj.ShapeDtypeStruct
F32 = "float32"
SMALL = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 13]), st.integers(1, 24))


@pytest.fixture(autouse=True)
def _verify_every_pass(monkeypatch):
    monkeypatch.setenv("RELAXJAX_VERIFY", "1")


@rj.kernel
def row_scale(x: rj.Buffer[("n", "m"), "float32"], s: rj.Buffer[("n",), "float32"],
              out: rj.Buffer[("n", "m"), "float32"]):
    for i, j in rj.grid(x.shape[0], x.shape[1]):
        out[i, j] = x[i, j] * s[i]


@rj.kernel
def row_sum(x: rj.Buffer[("n", "m"), "float32"], out: rj.Buffer[("n",), "float32"]):
    for i in range(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[1]):
            if x[i, j] > 0.0:
                acc += x[i, j]
        out[i] = acc


@rj.kernel
def features(x: rj.Buffer[("n", "m"), "float32"], w: rj.Buffer[("m",), "int32"],
             out: rj.Buffer[("n", "m"), "float32"], count: rj.Buffer[("n",), "int64"]):
    """Locals, if/elif/else, math functions, casts, min/max/abs, and/or, a ternary."""
    eps = 1e-3
    for i in range(x.shape[0]):
        c = 0
        for j in range(x.shape[1]):
            v = x[i, j]
            if v > 1.0:
                t = math.sqrt(v) + rj.math.exp(-v)
            elif v < -1.0 and w[j] > 0:
                t = abs(v) * w[j]
            else:
                t = rj.float32(w[j] // 3) + float(v) ** 2
                c += 1
            out[i, j] = max(t, eps) if j % 2 == 0 else min(t, 2.5) - int(v) + math.tanh(v)
        count[i] = c


@rj.kernel
def triangle(a: rj.Buffer[("n", "n"), "float64"], out: rj.Buffer[("n",), "float64"]):
    half = a.shape[0] // 2
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(i + 1):                    # a triangular loop
            s += a[i, j]
        for j in range(a.shape[0] - 1, -1, -2):   # a negative step
            s -= a[j, i] * 0.5
        out[i] = s + half


@rj.kernel
def histogram(idx: rj.Buffer[("n",), "int32"], out: rj.Buffer[("k",), "int64"]):
    for b in range(out.shape[0]):
        out[b] = 0
    for i in range(idx.shape[0]):
        if 0 <= idx[i] and idx[i] < out.shape[0]:
            out[idx[i]] += 1


def python_run(k, *arrays, outs):
    """The kernel's own Python function run on NumPy arrays: the oracle for what it means."""
    res = [np.zeros(shape, dtype) for shape, dtype in outs]
    k.__wrapped__(*arrays, *res)
    return res


def scale_exp(x, s):
    y = rj.call_tir(row_scale, x, s, out=S(x.shape, x.dtype))
    return rnp.exp(y) + 1.0


def calls(text: str) -> dict:
    main = text.split("\n\n")[0]
    return {k: len(re.findall(rf"\b{k}\(", main)) for k in ("call_tir", "call_library")}


# ---------------------------------------------------------------------------------------
# The loop-level programs
# ---------------------------------------------------------------------------------------

def test_kernels_print_as_loop_level_programs():
    assert str(row_scale) == (
        "@tir\n"
        "def row_scale(x: f32[n, m], s: f32[n], out: f32[n, m]; m, n):\n"
        "  parallel for i in range(n):\n"
        "    vectorized for j in range(m):\n"
        "      out[i, j] = x[i, j] * s[i]")
    assert str(row_sum) == (
        "@tir\n"
        "def row_sum(x: f32[n, m], out: f32[n]; m, n):\n"
        "  parallel for i in range(n):\n"
        "    acc: f32 = f32(0.0)\n"
        "    for j in range(m):\n"
        "      if x[i, j] > f32(0.0):\n"
        "        acc = acc + x[i, j]\n"
        "    out[i] = acc")


def test_local_dtypes_follow_nep50():
    text = str(features)
    assert "c: i64 = 0" in text                  # Python ints alone: int64
    assert "v: f32 = x[i, j]" in text
    assert "t: f64" in text                      # float32 * int32 promotes to float64
    assert "f32(w[j] // i32(3))" in text         # an explicit cast; 3 is weak

    @rj.kernel
    def fixed(x: rj.Buffer[("n",), "float64"], out: rj.Buffer[("n",), "float32"]):
        for i in range(x.shape[0]):
            acc: rj.float32 = 0
            acc += x[i]
            out[i] = acc
    assert "acc: f32 = f32(0.0)" in str(fixed) and "acc = f32(f64(acc) + x[i])" in str(fixed)


def test_loop_kinds_come_from_independence():
    def loops(k):
        out, todo = [], [k.primfunc.body]
        while todo:
            s = todo.pop()
            if isinstance(s, For):
                out.append((s.var.name, s.kind))
                todo.append(s.body)
            todo.extend(getattr(s, "stmts", []))
        return dict(out)
    assert loops(row_scale) == {"i": "parallel", "j": "vectorized"}
    assert loops(row_sum) == {"i": "parallel", "j": "serial"}          # j carries acc
    assert loops(histogram) == {"b": "parallel", "i": "serial"}        # out[idx[i]] may collide
    assert loops(triangle) == {"i": "parallel", "j": "serial"}
    assert loop_is_independent(row_scale.primfunc.body)
    assert not loop_is_independent(row_sum.primfunc.body.body.stmts[1])


@rj.kernel
def fill_segments(off: rj.Buffer[("b1",), "int64"], out: rj.Buffer[("t",), "int64"]):
    for s in rj.prange(off.shape[0] - 1):       # the sequences' rows are disjoint
        for i in range(off[s], off[s + 1]):
            out[i] = s + 1


@rj.kernel
def fill_segments_serial(off: rj.Buffer[("b1",), "int64"], out: rj.Buffer[("t",), "int64"]):
    for s in range(off.shape[0] - 1):
        for i in range(off[s], off[s + 1]):
            out[i] = s + 1


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=40))
@settings(max_examples=10, deadline=None)
def test_prange_runs_loops_the_analysis_cannot_prove_in_parallel(lengths):
    """``rj.prange``: the author says the iterations are independent (stores to rows read
    from data, which the loop level cannot prove disjoint): parallel where ``range`` is
    serial, with the same result on every backend and eagerly."""
    assert str(fill_segments).splitlines()[2].strip().startswith("parallel for s")
    assert str(fill_segments_serial).splitlines()[2].strip().startswith("for s")
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    want = np.repeat(np.arange(1, len(lengths) + 1), lengths)
    S = rj.ShapeDtypeStruct
    for backend in BACKENDS:
        for k in (fill_segments, fill_segments_serial):
            got = rj.jit(lambda off, like, k=k: rj.call_tir(k, off, out=S(like.shape, "int64")),
                         backend=backend)(off, np.empty(int(off[-1])))
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(rj.call_tir(fill_segments, off, out=S((int(off[-1]),), "int64")), want)


@rj.kernel
def scale_first(n: rj.Buffer[(1,), "int64"], x: rj.Buffer[("m",), "float32"], out: rj.Buffer[("m",), "float32"]):
    for g in range(n[0]):                       # a trip count read from data, in parallel
        out[g] = x[g] * 2.0


@pytest.mark.parametrize("n", [0, 1, 7, 65536, 200000])
def test_a_parallel_loop_whose_trip_count_is_read_from_data(n):
    """The trip count of a loop run in parallel is read from a buffer: the LLVM backend's
    entry (which splits the loop between the threads) evaluates it there."""
    assert "parallel for g in range(n[0])" in str(scale_first)
    x = np.random.default_rng(n).standard_normal(200000).astype(np.float32)
    for backend in BACKENDS:                    # (out[n:] is not written)
        got = rj.jit(lambda c, x: rj.call_tir(scale_first, c, x, out=rj.ShapeDtypeStruct(x.shape, "float32")),
                     backend=backend)(np.array([n]), x)
        np.testing.assert_array_equal(got[:n], 2 * x[:n])


@rj.kernel
def ufunc_calls(x: rj.Buffer[("n",), "float32"], y: rj.Buffer[("n",), "float32"],
                out: rj.Buffer[("n",), "float32"]):
    for i in range(x.shape[0]):
        out[i] = np.true_divide(np.add(np.multiply(x[i], y[i]), np.subtract(x[i], 1.0)), y[i])


def test_numpy_arithmetic_ufuncs_as_functions_in_kernels():
    """``np.add``/``subtract``/``multiply``/``true_divide`` called in a kernel are its
    operators (a combining step can be passed as a value), float32 as NumPy computes it."""
    x = np.linspace(-2, 3, 7, dtype=np.float32)
    y = np.linspace(0.5, 4, 7, dtype=np.float32)
    want = (x * y + (x - np.float32(1.0))) / y
    S = rj.ShapeDtypeStruct
    for backend in BACKENDS:
        got = rj.jit(lambda x, y: rj.call_tir(ufunc_calls, x, y, out=S(x.shape, x.dtype)), backend=backend)(x, y)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == np.float32


def test_user_kernels_are_classified_like_generated_ones():
    assert classify_primfunc(row_scale.primfunc) == "injective"
    assert classify_primfunc(row_sum.primfunc) == "opaque"


def test_row_scale_exp_add_fuse_into_one_kernel():
    low = rj.jit(scale_exp).lower(S(("n", "m"), F32), S(("n",), F32))
    assert "call_tir(row_scale, x, s)" in low.as_text("traced")
    text = low.as_text("optimized")
    assert calls(text) == {"call_tir": 1, "call_library": 0}, text
    assert "call_tir(fused_row_scale_exp_add, x, s)" in text
    loops = low.as_text("loops")
    assert "v: f32 = exp(a[i0, i1] * b[i0]) + f32(1.0)" in loops, loops


def test_dim_names_bind_to_the_callers_symbolic_dims():
    b = rj.dim("b")

    def f(x):                                    # the kernel's n is the caller's b * 4
        y = x.reshape((x.shape[0] * 4, x.shape[1] // 4))
        return rj.call_tir(row_sum, y, out=S((y.shape[0],), y.dtype)) * 2.0
    low = rj.jit(f).lower(S((b, 8), F32))
    assert "c: f32[b * 4] = call_tir(row_sum, a)" in low.as_text()
    loops = low.as_text("loops")
    assert "def row_sum(x: f32[b * 4, 2], out: f32[b * 4]; b):" in loops
    assert "parallel for i in range(4 * b):" in loops
    for backend in BACKENDS:
        g = rj.jit(f, backend=backend, shapes=(S((b, 8), F32),))
        for n in (1, 2, 5):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            want = (np.where(x > 0, x, 0).reshape(n * 4, 2).sum(1) * 2).astype(np.float32)
            assert_same(g(x), want)
        assert g.cache_info().compiles == 1


def test_same_kernel_twice_with_different_bindings():
    def f(x, y):
        a = rj.call_tir(row_sum, x, out=S((x.shape[0],), x.dtype))
        b = rj.call_tir(row_sum, y, out=S((y.shape[0],), y.dtype))
        return a, b
    low = rj.jit(f).lower(S(("n", 3), F32), S(("k", 5), F32))
    assert "call_tir(row_sum, x)" in low.as_text() and "call_tir(row_sum_1, y)" in low.as_text()
    x, y = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    for backend in BACKENDS:
        a, b = rj.jit(f, backend=backend)(x, y)
        assert_same(a, np.full(2, 3, np.float32))
        assert_same(b, np.full(4, 5, np.float32))


def test_automatic_mode_equalities_found_after_the_call():
    # z's dims are equated with x's only after the kernel call was recorded
    def f(z, x):
        y = rj.call_tir(row_sum, z, out=S((z.shape[0],), z.dtype))
        return y + x
    x = np.arange(4, dtype=np.float32)
    z = np.ones((4, 3), np.float32)
    for backend in BACKENDS:
        assert_same(rj.jit(f, backend=backend)(z, x), x + 3)


# ---------------------------------------------------------------------------------------
# Numbers on every backend
# ---------------------------------------------------------------------------------------

@settings(max_examples=8, deadline=None)
@given(n=SIZES, m=SMALL, seed=st.integers(0, 2**16))
def test_row_scale_numbers(n, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m)).astype(np.float32)
    s = rng.standard_normal(n).astype(np.float32)
    want = np.exp(x * s[:, None]) + np.float32(1.0)
    for backend in BACKENDS:
        assert_same(rj.jit(scale_exp, backend=backend)(x, s), want)
    assert_same(rj.call_tir(row_scale, x, s, out=S(x.shape, x.dtype)), x * s[:, None])


@settings(max_examples=8, deadline=None)
@given(n=SMALL, m=SIZES, seed=st.integers(0, 2**16))
def test_row_sum_numbers(n, m, seed):
    x = np.random.default_rng(seed).standard_normal((n, m)).astype(np.float32)
    want = np.where(x > 0, x, np.float32(0)).sum(axis=1)

    def f(x):
        return rj.call_tir(row_sum, x, out=S((x.shape[0],), x.dtype))
    for backend in BACKENDS:
        assert_same(rj.jit(f, backend=backend)(x), want, rtol=1e-5, atol=1e-5)
    assert_same(f(x), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=8, deadline=None)
@given(n=SMALL, m=SMALL, seed=st.integers(0, 2**16))
def test_locals_branches_math_and_casts(n, m, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, m)) * 2).astype(np.float32)
    w = rng.integers(-3, 6, m).astype(np.int32)
    outs = [S((n, m), F32), S((n,), "int64")]
    want = python_run(features, x, w, outs=[((n, m), np.float32), ((n,), np.int64)])

    def f(x, w):
        return rj.call_tir(features, x, w, out=[S(x.shape, F32), S((x.shape[0],), "int64")])
    for backend in BACKENDS:
        assert_same(rj.jit(f, backend=backend)(x, w), want, rtol=1e-5, atol=1e-5)
    assert_same(rj.call_tir(features, x, w, out=outs), tuple(want), rtol=1e-5, atol=1e-5)


@settings(max_examples=6, deadline=None)
@given(n=SMALL, seed=st.integers(0, 2**16))
def test_triangular_and_strided_loops(n, seed):
    a = np.random.default_rng(seed).standard_normal((n, n))
    want = python_run(triangle, a, outs=[((n,), np.float64)])[0]
    for backend in BACKENDS:
        got = rj.jit(lambda a: rj.call_tir(triangle, a, out=S((a.shape[0],), a.dtype)),
                     backend=backend)(a)
        assert_same(got, want)


@settings(max_examples=6, deadline=None)
@given(n=SIZES, k=SMALL, seed=st.integers(0, 2**16))
def test_data_dependent_stores(n, k, seed):
    idx = np.random.default_rng(seed).integers(-2, k + 2, n).astype(np.int32)
    want = np.bincount(idx[(idx >= 0) & (idx < k)], minlength=k).astype(np.int64)
    for backend in BACKENDS:
        got = rj.jit(lambda i: rj.call_tir(histogram, i, out=S((k,), "int64")), backend=backend)(idx)
        assert_same(got, want)
    assert_same(rj.call_tir(histogram, idx, out=S((k,), "int64")), want)


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------

def test_provably_out_of_bounds_access_is_an_error():
    with pytest.raises(rj.ShapeError, match=r"kernel shifted \(test_kernel.py:\d+: `out\[i, j\] = "
                       r"x\[i \+ 1, j\]`\): index i \+ 1 into axis 0 of x \(size n\) reaches n"):
        @rj.kernel
        def shifted(x: rj.Buffer[("n", "m"), "float32"], out: rj.Buffer[("n", "m"), "float32"]):
            for i, j in rj.grid(x.shape[0], x.shape[1]):
                out[i, j] = x[i + 1, j]

    @rj.kernel
    def guarded(x: rj.Buffer[("n",), "float32"], out: rj.Buffer[("n",), "float32"]):
        for i in range(x.shape[0]):
            out[i] = x[i + 1] if i + 1 < x.shape[0] else x[i]       # guarded: fine
    x = np.arange(4, dtype=np.float32)
    assert_same(rj.call_tir(guarded, x, out=S((4,), F32)), np.array([1, 2, 3, 3], np.float32))

    @rj.kernel
    def third(x: rj.Buffer[("n", "m"), "float32"], out: rj.Buffer[("n",), "float32"]):
        for i in range(x.shape[0]):
            out[i] = x[i, 2]                     # fine when m > 2, wrong when m <= 2
    f = rj.jit(lambda x: rj.call_tir(third, x, out=S((x.shape[0],), F32)))
    f.lower(S(("n", "m"), F32))
    with pytest.raises(rj.ShapeError, match=r"index 2 into axis 1 of x \(size 2\) reaches 2"):
        f.lower(S(("n", 2), F32))
    with pytest.raises(rj.ShapeError, match="reaches 2"):
        rj.call_tir(third, np.ones((3, 2), np.float32), out=S((3,), F32))


def test_store_to_an_input_is_an_error():
    with pytest.raises(TypeError, match=r"kernel writes_x .*store to input buffer x"):
        @rj.kernel(n_outputs=1)
        def writes_x(x: rj.Buffer[("n",), "float32"], out: rj.Buffer[("n",), "float32"]):
            for i in range(x.shape[0]):
                x[i] = 0.0
                out[i] = x[i]
    with pytest.raises(TypeError, match=r"store to input buffer out.*y is read only"):
        @rj.kernel
        def out_first(x: rj.Buffer[("n",), "float32"], out: rj.Buffer[("n",), "float32"],
                      y: rj.Buffer[("n",), "float32"]):
            for i in range(x.shape[0]):
                out[i] = x[i] + y[i]


def test_shape_mismatches_at_trace_time():
    @rj.kernel
    def transpose(x: rj.Buffer[("n", "n"), "float32"], out: rj.Buffer[("n", "n"), "float32"]):
        for i, j in rj.grid(*x.shape):
            out[i, j] = x[j, i]

    def f(x):
        return rj.call_tir(transpose, x, out=S(x.shape, x.dtype))
    with pytest.raises(rj.ShapeError, match=r"kernel transpose: argument x axis 1: expected 3 "
                                            r"\(dim n, bound by x axis 0\), got 4"):
        rj.jit(f).lower(S((3, 4), F32))
    with pytest.raises(rj.InconclusiveDimensionError, match=r"argument x axis 1: expected a .*got b"):
        rj.jit(f).lower(S(("a", "b"), F32))
    with pytest.raises(rj.ShapeError, match="argument x axis 1: expected x0"):
        rj.jit(f)(np.ones((3, 4), np.float32))              # automatic mode
    with pytest.raises(TypeError, match="argument x: expected dtype float32, got float64"):
        rj.jit(f)(np.ones((3, 3)))
    with pytest.raises(rj.ShapeError, match=r"argument x: expected rank 2 f32\[n, n\], got rank 1"):
        rj.jit(f).lower(S(("a",), F32))
    with pytest.raises(rj.ShapeError, match=r"output out axis 0: expected a"):
        rj.jit(lambda x: rj.call_tir(transpose, x, out=S((1, 1), F32))).lower(S(("a", "a"), F32))
    with pytest.raises(rj.ShapeError, match="uses k, which no argument binds"):
        rj.jit(lambda x: rj.call_tir(row_sum, x, out=S(("k",), F32))).lower(S(("a", 3), F32))
    with pytest.raises(TypeError, match=r"takes 2 inputs \(x, s\) and 1 outputs"):
        rj.call_tir(row_scale, np.ones((2, 2), np.float32), out=S((2, 2), F32))
    assert_same(rj.jit(f)(np.eye(3, dtype=np.float32)), np.eye(3, dtype=np.float32))


def _define(src: str):
    ns = {"rj": rj, "np": np, "math": math}
    path = "kernel_src.py"
    import linecache
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    exec(compile(src, path, "exec"), ns)  # noqa: S102


@pytest.mark.parametrize("body, error, message", [
    ("i = 0\n    while i < 3:\n        out[i] = x[i]", rj.KernelSyntaxError, r"while loops are not supported"),
    ("for i in range(x.shape[0]):\n        if i > 2:\n            break\n        out[i] = x[i]",
     rj.KernelSyntaxError, r"`break`\): break is not supported"),
    ("for i in range(x.shape[0]):\n        out[i] = np.linalg.norm(x[i])", rj.KernelSyntaxError,
     r"calls to 'norm' with 1 arguments are not supported"),
    ("for i in range(x.shape[0]):\n        out[i] = x[i] + W[i]", TypeError,
     r"captures an array \(W\) from its enclosing scope"),
    ("for i in range(x.shape[0]):\n        out[i] = x[i, 0]", TypeError, r"x has rank 1, indexed with 2"),
    ("for i in range(x.shape[0]):\n        out[i] = x[i * 0.5]", TypeError, r"must be an integer, got float64"),
    ("for i in x:\n        out[0] = i", rj.KernelSyntaxError, r"iterate over range\(...\), rj.prange\(...\) or rj.grid"),
    ("for i in range(x.shape[0]):\n        pass\n    out[0] = x[i]", rj.KernelSyntaxError,
     r"loop variable i is used after its loop"),
])
def test_unsupported_python_is_a_clear_error(body, error, message):
    src = ("W = np.ones(4, np.float32)\n\n"
           "@rj.kernel\n"
           "def k(x: rj.Buffer[('n',), 'float32'], out: rj.Buffer[('n',), 'float32']):\n"
           f"    {body}\n")
    with pytest.raises(error, match=r"kernel k \(kernel_src.py:\d+: .*" + message):
        _define(src)


def test_readme_kernel_section_prints_what_it_shows(capsys):
    import pathlib
    src = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = src.split("## Writing your own kernels\n", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shown = re.findall(r"prints[^\n]*\n```\n(.*?)```", section, re.S)[0]
    path = "README_kernels.py"
    import linecache
    linecache.cache[path] = (len(code), None, code.splitlines(True), path)
    exec(compile(code, path, "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == shown


@rj.kernel
def flip(x: rj.Buffer[("n", "m"), "float32"], out: rj.Buffer[("n", "m"), "float32"]):
    for i, j in rj.grid(*x.shape):
        out[i, j] = x[i, x.shape[1] - 1 - j] * (j + 1)


@settings(max_examples=6, deadline=None)
@given(n=SMALL, k=SMALL, seed=st.integers(0, 2**16))
def test_kernel_using_dims_fuses_when_bound_to_expressions(n, k, seed):
    kd = rj.dim("k")

    def f(x):
        y = rj.call_tir(flip, x, out=S(x.shape, x.dtype))
        return rnp.tanh(y) * 2.0
    text = rj.jit(f).lower(S(("n", kd * 2), F32)).as_text("loops")
    assert "tanh(a[i0, -1 + 2 * k - i1]" in text.replace("(2 * k - 1)", "-1 + 2 * k"), text
    x = np.random.default_rng(seed).standard_normal((n, 2 * k)).astype(np.float32)
    want = np.tanh(x[:, ::-1] * np.arange(1, 2 * k + 1, dtype=np.float32)) * np.float32(2)
    for backend in BACKENDS:
        g = rj.jit(f, backend=backend, shapes=(S(("n", kd * 2), F32),))
        assert_same(g(x), want)


# ---------------------------------------------------------------------------------------
# Buffer dims as expressions over names
# ---------------------------------------------------------------------------------------

@rj.kernel
def pair_sums(x: rj.Buffer[("2*n", "m"), "float64"], out: rj.Buffer[("n", "m"), "float64"]):
    for i, j in rj.grid(n, m):
        out[i, j] = x[2 * i, j] + x[2 * i + 1, j]


@rj.kernel
def neighbour_diff(x: rj.Buffer[("n + 1",), "float32"], out: rj.Buffer[("n",), "float32"]):
    for i in range(n):
        out[i] = x[i + 1] - x[i]


@rj.kernel
def halves(x: rj.Buffer[("n",), "float64"], out: rj.Buffer[("n // 2",), "float64"]):
    for i in range(n // 2):
        out[i] = x[i] + x[n - 1 - i]


def test_buffer_dim_expressions_print_and_bind():
    assert "x: f64[n * 2, m]" in str(pair_sums) and "x: f32[n + 1]" in str(neighbour_diff)
    assert "out: f64[n // 2]" in str(halves)
    n = rj.dim("n")
    assert rj.Buffer[(2 * n + 1,), F32].shape == (2 * n.expr + 1,)


@settings(max_examples=8, deadline=None)
@given(n=SIZES, m=SMALL, seed=st.integers(0, 2**16))
def test_buffer_dim_expressions_numbers(n, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2 * n, m))
    y = rng.standard_normal(n + 1).astype(np.float32)
    z = rng.standard_normal(n)
    for b in BACKENDS:
        f = rj.jit(lambda x, y, z: (
            rj.call_tir(pair_sums, x, out=S((x.shape[0] // 2, x.shape[1]), "float64")),
            rj.call_tir(neighbour_diff, y, out=S((y.shape[0] - 1,), F32)),
            rj.call_tir(halves, z, out=S((z.shape[0] // 2,), "float64"))), backend=b)
        got = f(x, y, z)
        assert_same(got[0], x[0::2] + x[1::2])
        assert_same(got[1], np.diff(y))
        assert_same(got[2], z[:n // 2] + z[::-1][:n // 2])
    assert_same(rj.call_tir(pair_sums, x, out=S((n, m), "float64")), x[0::2] + x[1::2])


def test_buffer_dim_expression_errors():
    with pytest.raises(rj.ShapeError, match=r"x axis 0: expected 8 \(n \* 2\), got 9"):
        rj.call_tir(pair_sums, np.ones((9, 2)), out=S((4, 2), "float64"))
    with pytest.raises(rj.ShapeError, match="9 is not a multiple of 2|expected"):
        rj.call_tir(pair_sums, np.ones((9, 2)), out=S((5, 2), "float64"))

    @rj.kernel
    def floor_only(x: rj.Buffer[("k // 2",), "float64"], out: rj.Buffer[("m",), "float64"]):
        out[0] = x[0]
    with pytest.raises(rj.ShapeError, match="cannot bind k: name each dim alone"):
        rj.call_tir(floor_only, np.ones(4), out=S((1,), "float64"))
    for bad in ("n**2", "n / 2", "f(n)", "-3", "n +"):
        with pytest.raises(TypeError, match="rj.Buffer dim"):
            rj.Buffer[(bad,), F32]
