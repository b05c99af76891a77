"""The loop level and the LLVM backend: cross-level IR, vectorized and threaded code, NumPy's
integer semantics, one compiled artifact for many shapes, inputs of any layout."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import nn as rnn
from relaxjax.backends import llvm as rj_llvm
from relaxjax import tir
from relaxjax.compile.legalize import legalize
from relaxjax.tir import Buffer, For, PrimFunc, Store, TIRError, Var, verify_primfunc

from helpers import SIZES, assert_same, tolerance

S = rj.ShapeDtypeStruct


def mlp(x, w):
    return rnp.tanh(x @ w + 1.0)


# ---------------------------------------------------------------------------------------
# The cross-level IR
# ---------------------------------------------------------------------------------------

def test_lowered_graph_shows_library_and_tir_calls_side_by_side():
    low = rj.jit(mlp).lower(S(("n", "k"), "float32"), S(("k", "m"), "float32"))
    assert "matmul(x, w)" in low.as_text()          # as traced: graph primitives
    text = low.as_text("optimized")
    assert 'a: f32[n, m] = call_library("blas.sgemm", x, w)' in text
    assert re.search(r"f32\[n, m\] = call_tir\(fused_matmul_add_tanh, a\)", text)   # the epilogue
    loops = low.as_text("loops")
    assert "parallel for i0 in range(n):" in loops
    assert "vectorized for i1 in range(m):" in loops
    assert "v: f32 = tanh(a[i0, i1] + f32(1.0))" in loops


def test_legalize_is_a_pass_that_prints_before_and_after(tmp_path, monkeypatch):
    dump = tmp_path / "ir.txt"
    monkeypatch.setenv("RELAXJAX_DUMP_IR", str(dump))
    f = rj.jit(lambda x: rnp.exp(x) * 2.0)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_same(f(x), np.exp(x) * 2)
    text = dump.read_text()
    assert "IR after tracing" in text and "IR after FuseOps" in text and "IR after Legalize" in text
    before, after = text.split("IR after Legalize")
    assert "exp(x)" in before and "@fused_exp_mul(x)" in before and "call_tir(fused_exp_mul" in after


def test_reductions_lower_to_accumulator_loops():
    low = rj.jit(lambda x: rnp.sum(x, axis=1)).lower(S(("n", "m"), "float32"))
    loops = low.as_text("loops")
    assert "acc: f32 = f32(0.0)" in loops
    assert "reduction for r0 in range(m):" in loops


def test_integer_matmul_lowers_to_loops_not_blas():
    text = rj.jit(lambda a, b: a @ b).lower(S(("n", "k"), "int32"), S(("k", "m"), "int32")).as_text("optimized")
    assert "call_library" not in text and "call_tir(matmul_" in text


def test_tir_verifier_rejects_malformed_programs():
    a = Buffer("a", ("n",), np.dtype("float32"))
    out = Buffer("out", ("n",), np.dtype("float32"))
    i = Var("i")
    ok = PrimFunc("ok", [a, out], 1, ["n"], For(i, Var("n"), "parallel", Store(out, (i,), a[i])))
    verify_primfunc(ok)
    with pytest.raises(TIRError, match="store to input buffer a"):
        verify_primfunc(PrimFunc("bad", [a, out], 1, ["n"], For(i, Var("n"), "serial", Store(a, (i,), a[i]))))
    with pytest.raises(TIRError, match="variable j is used outside its scope"):
        verify_primfunc(PrimFunc("bad", [a, out], 1, ["n"],
                                 For(i, Var("n"), "serial", Store(out, (i,), a[Var("j")]))))
    with pytest.raises(TIRError, match="rank 1, indexed with 2"):
        verify_primfunc(PrimFunc("bad", [a, out], 1, ["n"], For(i, Var("n"), "serial", Store(out, (i,), a[i, i]))))
    with pytest.raises(TIRError, match="store of float64 into out"):
        verify_primfunc(PrimFunc("bad", [a, out], 1, ["n"], For(
            i, Var("n"), "serial", Store(out, (i,), tir.op("convert", a[i], dtype="float64")))))


def test_module_verifier_checks_call_tir_operands():
    from relaxjax.compile import verify, VerificationError
    low = rj.jit(lambda x: rnp.exp(x)).lower(S(("n",), "float32"))
    mod = legalize(low.module)
    verify(mod)
    call = mod.main.bindings[0]
    call.args[0].type = rj.TensorType(call.args[0].type.shape, np.dtype("float64"))
    with pytest.raises(VerificationError, match="passed for buffer"):
        verify(mod)


# ---------------------------------------------------------------------------------------
# Machine code: vectorized math, threads
# ---------------------------------------------------------------------------------------

def test_elementwise_kernel_is_vectorized():
    asm = rj.jit(lambda x, y: x * y + 1.0).lower(S(("n",), "float32"), S(("n",), "float32")).as_text("asm")
    assert re.search(r"\bv?(mul|add|fmadd\w*)ps\s[^\n]*%[xyz]mm", asm), "no packed float arithmetic in the kernel"


@pytest.mark.skipif(rj_llvm.target.vector_isa() != "avx512", reason="512-bit vectors need AVX-512")
def test_avx512_hosts_vectorize_at_512_bits():
    """LLVM tunes Intel's AVX-512 server CPUs to 256-bit vectors; the backend asks for 512
    (target.host_feature_string): the kernel's arithmetic and its libmvec call are 16 wide."""
    low = rj.jit(lambda x: rnp.tanh(x * 2.0 + 1.0)).lower(S(("n",), "float32"))
    assert re.search(r"\bv(mul|add|fmadd\w*)ps\s[^\n]*%zmm", low.as_text("asm")), "no 512-bit arithmetic"
    assert re.search(r"call .*<16 x float> @_ZGVeN16v_tanhf", low.as_text("llvm-optimized"))


def test_math_calls_use_vector_variants():
    low = rj.jit(lambda x: rnp.tanh(rnp.exp(x))).lower(S(("n",), "float32"))
    opt = low.as_text("llvm-optimized")
    assert re.search(r"call .*<\d+ x float> @_ZGV\w+_expf", opt), "exp is scalarized"
    assert re.search(r"call .*<\d+ x float> @_ZGV\w+_tanhf", opt), "tanh is scalarized"


@pytest.mark.parametrize("fn", [lambda x: rnp.tanh(x * 2.0) + 1.0,
                                lambda x: rnp.sum(rnp.exp(x), axis=-1),
                                lambda x: rnn.softmax(x, axis=-1),
                                lambda x: rnp.argmax(x, axis=0)])
def test_threaded_results_equal_single_threaded(fn):
    x = np.random.default_rng(0).standard_normal((301, 1031)).astype(np.float32)
    try:
        rj_llvm.set_parallel_threshold(0)       # force threads even where they do not pay
        rj_llvm.set_num_threads(1)
        one = rj.jit(fn)(x)
        rj_llvm.set_num_threads(2)
        two = rj.jit(fn)(x)
        rj_llvm.set_num_threads(3)              # more threads than cores, uneven chunks
        three = rj.jit(fn)(x)
    finally:
        rj_llvm.set_num_threads(0)
        rj_llvm.set_parallel_threshold(rj_llvm.engine.DEFAULT_PARALLEL_MIN_WORK)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, three)


def test_compiled_functions_run_from_many_python_threads():
    import concurrent.futures as cf
    f = rj.jit(lambda x: rnp.exp(x) - x)
    xs = [np.full((n, 7), n / 100, np.float32) for n in range(1, 40)]
    with cf.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(f, xs))
    for x, o in zip(xs, outs):
        assert_same(o, np.exp(x) - x, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# One artifact, many shapes; any input layout
# ---------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(n=SIZES, m=st.sampled_from([1, 2, 3, 7, 16, 61, 257, 1031]))
def test_one_compile_serves_every_shape(n, m):
    f = _explicit_mlp()
    rng = np.random.default_rng(n * 1000 + m)
    x = rng.standard_normal((n, 5)).astype(np.float32)
    w = rng.standard_normal((5, m)).astype(np.float32)
    assert_same(f(x, w), np.tanh(x.astype(np.float64) @ w + 1.0).astype(np.float32), rtol=2e-5, atol=2e-5)
    assert f.cache_info().compiles == 1


_EXPLICIT = []


def _explicit_mlp():
    if not _EXPLICIT:
        _EXPLICIT.append(rj.jit(mlp, shapes=(S(("n", "k"), "float32"), S(("k", "m"), "float32"))))
    return _EXPLICIT[0]


def test_large_and_prime_sizes():
    f = rj.jit(lambda x: rnp.sqrt(rnp.abs(x)) * 3.0 - x)
    for n in (1, 2, 97, 65537, 1_000_003):
        x = np.linspace(-5, 5, n, dtype=np.float32)
        assert_same(f(x), np.sqrt(np.abs(x)) * np.float32(3) - x)
    assert f.cache_info().compiles == 1            # every size shares one (1 included)


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed", "fortran", "offset"])
def test_non_contiguous_inputs(layout):
    base = np.random.default_rng(1).standard_normal((37, 41)).astype(np.float32)
    x = {"transposed": base.T, "strided": base[::3, ::2], "reversed": base[::-1],
         "fortran": np.asfortranarray(base), "offset": base[5:, 7:]}[layout]
    f = rj.jit(lambda a: rnp.sum(a * 2.0, axis=0) + a[0])
    assert_same(f(x), np.sum(x * np.float32(2), axis=0) + x[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (3, 0, 2)])
def test_zero_size_arrays(shape):
    x = np.zeros(shape, np.float32)
    f = rj.jit(lambda a: (rnp.exp(a) + 1.0, rnp.sum(a, axis=-1), a.T))
    for got, want in zip(f(x), (np.exp(x) + 1, np.sum(x, axis=-1), x.T)):
        assert_same(got, want)


def test_matmul_with_zero_contraction_gives_zeros():
    f = rj.jit(lambda a, b: a @ b)
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    assert_same(f(a, b), np.zeros((3, 4), np.float32))


@settings(max_examples=20, deadline=None)
@given(batch_a=st.sampled_from([(), (1,), (3,), (2, 1)]), batch_b=st.sampled_from([(), (1,), (3,), (1, 3)]),
       n=SIZES, k=st.sampled_from([1, 2, 5, 17]), m=st.sampled_from([1, 3, 8]),
       dtype=st.sampled_from(["float32", "float64", "int32"]))
def test_batched_matmul_broadcasts_like_numpy(batch_a, batch_b, n, k, m, dtype):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(batch_a + (n, k)) * 4).astype(dtype)
    b = (rng.standard_normal(batch_b + (k, m)) * 4).astype(dtype)
    got = rj.jit(lambda x, y: x @ y)(a, b)
    assert got.dtype == (a @ b).dtype and got.shape == (a @ b).shape
    if dtype == "int32":
        np.testing.assert_array_equal(got, a @ b)
        return
    # the floating-point error bound of a dot product of length k
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * k * np.finfo(dtype).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(got - exact) <= bound + np.finfo(dtype).tiny)


# ---------------------------------------------------------------------------------------
# NumPy's integer and conversion semantics, exactly
# ---------------------------------------------------------------------------------------

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _edge_ints(dtype):
    info = np.iinfo(dtype)
    vals = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min]
    if info.min < 0:
        vals += [-1, -2, -3, -7, info.min + 1]
    return np.array(vals, dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("name", ["floor_divide", "remainder", "add", "subtract", "multiply",
                                  "left_shift", "right_shift", "maximum", "minimum", "bitwise_xor"])
def test_integer_binary_semantics_exact(dtype, name):
    v = _edge_ints(dtype)
    x, y = np.meshgrid(v, v)
    if name in ("left_shift", "right_shift"):
        y = np.meshgrid(v, np.array([0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 100], dtype))[1]
        x = np.meshgrid(v, y[:, 0])[0]
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, y)
    got = rj.jit(lambda a, b: getattr(rnp, name)(a, b))(x, y)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dst", INT_DTYPES + ["bool", "float16"])
def test_float_to_int_conversions_in_range(src, dst):
    x = np.array([-100.7, -1.5, -1.0, -0.5, -0.0, 0.0, 0.4, 0.5, 1.0, 1.5, 99.9, 127.0], src)
    if np.dtype(dst).kind == "u":
        x = np.abs(x)
    np.testing.assert_array_equal(rj.jit(lambda a: a.astype(dst))(x), x.astype(dst))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floor_divide_and_remainder_special_values(dtype):
    v = np.array([-7.5, -3.0, -1.0, -0.0, 0.0, 0.5, 3.0, 7.5, np.inf, -np.inf, np.nan], dtype)
    x, y = np.meshgrid(v, v)
    for name in ("floor_divide", "remainder"):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(x, y)
        got = rj.jit(lambda a, b: getattr(rnp, name)(a, b))(x, y)
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------
# Math precision: float32 within a few ulp of NumPy
# ---------------------------------------------------------------------------------------

MATH = {"exp": (-80, 80), "log": (1e-30, 1e30), "tanh": (-20, 20), "sin": (-100, 100),
        "cos": (-100, 100), "arctan": (-1e4, 1e4), "log1p": (-0.9, 1e3), "expm1": (-20, 20),
        "sinh": (-80, 80), "arcsinh": (-1e3, 1e3), "exp2": (-100, 100), "log2": (1e-20, 1e20)}


@pytest.mark.parametrize("name", sorted(MATH))
def test_float32_math_within_few_ulp(name):
    lo, hi = MATH[name]
    x = np.linspace(lo, hi, 100_003).astype(np.float32)
    if lo > 0:
        x = np.geomspace(lo, hi, 100_003).astype(np.float32)
    got = rj.jit(lambda a: getattr(rnp, name)(a))(x)
    exact = getattr(np, name)(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - exact) / ulp
    assert np.nanmax(err) <= 4, f"{name}: {np.nanmax(err):.1f} ulp at x={x[np.nanargmax(err)]}"


# ---------------------------------------------------------------------------------------
# Bad input: the same precise errors as the reference backend
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_bad_inputs_raise_the_same_errors(backend):
    f = rj.jit(mlp, shapes=(S(("n", "k"), "float32"), S(("k", "m"), "float32")), backend=backend)
    with pytest.raises(rj.ShapeError, match=r"argument w axis 0: expected k \(with n=2, k=4\), got 5"):
        f(np.ones((2, 4), np.float32), np.ones((5, 3), np.float32))
    with pytest.raises(rj.ShapeError, match="argument x: expected rank 2"):
        f(np.ones(4, np.float32), np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="argument x: expected dtype float32, got float64"):
        f(np.ones((2, 4)), np.ones((4, 3), np.float32))


def test_data_dependent_shapes_run_between_segments():
    f = rj.jit(lambda x: rnp.exp(x[x > 0]) + rnp.sum(x))
    for n in (1, 5, 40):
        x = np.linspace(-1, 1, n).astype(np.float32)
        assert_same(f(x), np.exp(x[x > 0]) + np.sum(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_out_of_range_gather_indices_raise_like_numpy(backend):
    x = np.arange(10, dtype=np.float32)
    f = rj.jit(lambda a, i: rnp.take(a, i * 2), backend=backend)
    assert_same(f(x, np.array([0, 4, -3])), x[[0, 8, -6]])
    with pytest.raises(IndexError, match="index 10 is out of bounds for axis 0 with size 10"):
        f(x, np.array([1, 5]))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 10"):
        f(x, np.array([-6]))
    g = rj.jit(lambda a, i: rnp.take_along_axis(a, i, axis=1), backend=backend)
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 3"):
        g(np.ones((2, 3)), np.array([[0], [3]]))


# ---------------------------------------------------------------------------------------
# Kernel families: kernels equal but for numbers compile once
# ---------------------------------------------------------------------------------------

@settings(max_examples=10, deadline=None)
@given(n=SIZES, extra=st.integers(0, 5))
def test_kernels_equal_but_for_numbers_share_one_code(n, extra):
    """Three slices of columns 0, 1, 2: the two exp kernels differ only in the column they
    read, so the module holds one code for them, called with 0 and with 2."""
    @rj.jit
    def f(x):
        return rnp.exp(x[:, 0]), rnp.sin(x[:, 1]), rnp.exp(x[:, 2])

    x = np.random.default_rng(n).standard_normal((n, 3 + extra))
    assert_same(f(x), (np.exp(x[:, 0]), np.sin(x[:, 1]), np.exp(x[:, 2])))
    text = f.lower(x).compile().as_text("llvm")
    assert text.count("define void @rjk_") == 2


def _copy_program(name: str, offset: int, divisor: int) -> PrimFunc:
    """out[i] = a[i // divisor + offset] over a buffer of 8 elements."""
    a, out = Buffer("a", (8,), np.dtype("float64")), Buffer("out", (4,), np.dtype("float64"))
    i = Var("i", tir.INDEX)
    return PrimFunc(name, [a, out], 1, [], For(i, tir.Const(4, tir.INDEX), "serial",
                                                Store(out, (i,), a[i // divisor + offset])))


def test_kernel_families_lift_only_differing_nonnegative_numbers_and_no_divisor():
    from relaxjax.tir.families import families
    key = lambda g: g.signature_text()
    same = [_copy_program("p", 1, 2), _copy_program("q", 3, 2)]
    fam = families(same, key)
    (prog, nums_p), (_, nums_q) = fam[id(same[0])], fam[id(same[1])]
    assert (nums_p, nums_q) == ((1,), (3,))          # only the offset differs
    assert len(prog.dim_vars) == 1 and "// 2" in str(prog)
    # a different divisor is different code: no family
    assert families([_copy_program("p", 1, 2), _copy_program("q", 1, 3)], key) == {}


@settings(max_examples=10, deadline=None)
@given(n=SIZES)
def test_index_division_of_sizes_is_unsigned(n):
    """Index arithmetic over dims and loop counters is never negative: its floor division
    is LLVM's udiv (NumPy's floor semantics for signed values cost a dozen instructions)."""
    @rj.jit
    def f(x):
        return rnp.reshape(x, (-1, 3)).T * 2.0 + 1.0

    x = np.random.default_rng(n).standard_normal(3 * n)
    assert_same(f(x), x.reshape(-1, 3).T * 2.0 + 1.0)
    text = f.lower(x).compile().as_text("llvm")
    body = re.search(r"define internal void @rjk_\w+\.body.*?\n}", text, re.S).group(0)
    assert "udiv i64" in body and "sdiv i64" not in body
