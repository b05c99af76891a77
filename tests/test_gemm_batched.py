"""Batched products as one call of the generated product (``backends/llvm/gemm.py``): the
function takes a batch count and the strides between consecutive products' operands and
results (0: one operand shared by every product), and its threads split the products'
micro-tile bands.  Called directly on hypothesis-drawn batches (0, 1, primes), shapes and
strides, checked against NumPy in float64 within the dot product's error bound, with gaps
between the products that must stay unwritten; through ``jit``, every batched-matmul form
(batch dims on both operands, on one, broadcast, transposed operands, ``einsum``) agrees with
NumPy on every backend, and the batched rule is checked by shape class."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends.llvm import engine, gemm, gemm_rule, target

from helpers import BACKENDS
from test_gemm_generated import WIDTHS, _product, _rule_function

pytestmark = pytest.mark.skipif("avx2" not in target.host_features() or "fma" not in target.host_features(),
                                reason="the generated product needs FMA vectors (AVX2 or AVX-512)")

SMALL = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 12, 13, 33]), st.integers(1, 150))


def _bound(A, B, k, dtype):
    return 1.01 * k * np.finfo(dtype).eps / 2 * (np.abs(A) @ np.abs(B)) + np.finfo(dtype).tiny


@given(batch=st.sampled_from([0, 1, 2, 3, 7, 11]), m=SMALL, n=SMALL, k=SMALL, ta=st.booleans(),
       tb=st.booleans(), letter=st.sampled_from("sd"), shared=st.sampled_from(["", "a", "b"]),
       gap=st.sampled_from([0, 5]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=60, deadline=None)
def test_batched_product_agrees_with_numpy(batch, m, n, k, ta, tb, letter, shared, gap, seed):
    dtype = np.float32 if letter == "s" else np.float64
    rng = np.random.default_rng(seed)
    ashape, bshape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    # each operand: one matrix for all products (stride 0) or one per product, ``gap``
    # elements apart
    a = rng.uniform(-1, 1, (1 if shared == "a" else batch, ashape[0] * ashape[1] + gap)).astype(dtype)
    b = rng.uniform(-1, 1, (1 if shared == "b" else batch, bshape[0] * bshape[1] + gap)).astype(dtype)
    if a.size == 0 or b.size == 0:      # batch 0: nothing to read
        a, b = np.zeros((1, a.shape[1]), dtype), np.zeros((1, b.shape[1]), dtype)
    keep = a.copy(), b.copy()
    sa = 0 if shared == "a" else a.shape[1]
    sb = 0 if shared == "b" else b.shape[1]
    sc = m * n + gap
    for bits in WIDTHS:
        c = np.full(max(batch, 1) * sc + 1, np.nan, dtype)
        _product(gemm.gemm_symbol(letter, ta, tb), bits)[1](
            batch, sa, sb, sc, m, n, k, a.ctypes.data, ashape[1], b.ctypes.data, bshape[1],
            c.ctypes.data, n, None, None)
        for t in range(batch):
            A = a[0 if shared == "a" else t, :ashape[0] * ashape[1]].reshape(ashape).astype(np.float64)
            B = b[0 if shared == "b" else t, :bshape[0] * bshape[1]].reshape(bshape).astype(np.float64)
            A, B = (A.T if ta else A), (B.T if tb else B)
            got = c[t * sc:t * sc + m * n].reshape(m, n)
            assert np.all(np.abs(got - A @ B) <= _bound(A, B, k, dtype)), (bits, t)
            assert np.isnan(c[t * sc + m * n:(t + 1) * sc]).all(), "wrote between products"
        assert np.isnan(c[batch * sc:]).all(), "wrote past the last product"
    np.testing.assert_array_equal(a, keep[0])
    np.testing.assert_array_equal(b, keep[1])


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_products_split_between_threads(threads):
    """Bands of products split between threads at every boundary: more products than
    threads, fewer (one product split), a prime batch of products of a few tiles."""
    rng = np.random.default_rng(threads)
    try:
        engine.set_num_threads(threads)
        for batch, m, k, n in ((2, 517, 60, 333), (13, 37, 70, 200), (101, 12, 16, 40), (3, 5, 300, 1100)):
            a = rng.uniform(-1, 1, (batch, m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (batch, k, n)).astype(np.float32)
            c = np.full((batch, m, n), np.nan, np.float32)
            _product("rj_gemm_s_nn", target.vector_bits())[1](
                batch, m * k, k * n, m * n, m, n, k, a.ctypes.data, k, b.ctypes.data, n, c.ctypes.data, n, None, None)
            want = a.astype(np.float64) @ b
            assert np.all(np.abs(c - want) <= 1.01 * k * 2 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30)
    finally:
        engine.set_num_threads(0)


# the batched matmul forms a program meets: (name, function, A's shape, B's shape) in dims
# b (batch), h (heads), m, k, n
FORMS = {
    "both batched": (lambda a, c: a @ c, ("b", "m", "k"), ("b", "k", "n")),
    "A shared": (lambda a, c: a @ c, ("m", "k"), ("b", "k", "n")),
    "B shared": (lambda a, c: a @ c, ("b", "m", "k"), ("k", "n")),
    "heads": (lambda a, c: a @ c, ("b", "h", "m", "k"), ("b", "h", "k", "n")),
    "broadcast": (lambda a, c: a @ c, ("b", 1, "m", "k"), (1, "h", "k", "n")),
    "unit batch": (lambda a, c: a @ c, (1, "m", "k"), ("b", "k", "n")),
    "nt": (lambda a, c: a @ rnp.swapaxes(c, -1, -2), ("b", "m", "k"), ("b", "n", "k")),
    "tn": (lambda a, c: rnp.swapaxes(a, -1, -2) @ c, ("b", "k", "m"), ("b", "k", "n")),
    "einsum": (lambda a, c: rnp.einsum("bhqd,bhkd->bhqk", a, c), ("b", "h", "m", "k"), ("b", "h", "n", "k")),
}


@given(form=st.sampled_from(sorted(FORMS)), b=st.sampled_from([1, 2, 3, 7]), h=st.sampled_from([1, 2, 3]),
       m=st.sampled_from([1, 2, 5, 13, 64]), k=st.sampled_from([1, 16, 37, 64]),
       n=st.sampled_from([1, 8, 31, 100]), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2 ** 16))
@settings(max_examples=40, deadline=None)
def test_jit_batched_matmul_forms(form, b, h, m, k, n, dtype, seed):
    fun, ashape, bshape = FORMS[form]
    size = dict(b=b, h=h, m=m, k=k, n=n)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, [size.get(d, d) for d in ashape]).astype(dtype)
    y = rng.uniform(-1, 1, [size.get(d, d) for d in bshape]).astype(dtype)
    f = {"nt": lambda a, c: a @ np.swapaxes(c, -1, -2), "tn": lambda a, c: np.swapaxes(a, -1, -2) @ c,
         "einsum": lambda a, c: np.einsum("bhqd,bhkd->bhqk", a, c)}.get(form, fun)
    want = f(x.astype(np.float64), y.astype(np.float64))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-5, atol=2e-7 * k)
    for backend in BACKENDS:
        got = rj.jit(fun, backend=backend)(x, y)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)


def test_batched_matmul_is_one_call_of_the_generated_product():
    """The segment calls the generated product once for the batch (with its count and
    strides) where the rule may say so; a broadcast it cannot stride keeps the loop."""
    f = rj.jit(lambda a, c: a @ c)
    a = np.ones((6, 64, 64), np.float32)
    text = f.lower(a, a).as_text("llvm")
    if target.vector_bits() >= 512 and engine.generated_products():
        assert "@rj_gemm_s_nn_ptr" in text and "bgen" in text
    g = rj.jit(lambda a, c: a @ c)
    text = g.lower(np.ones((2, 1, 64, 64), np.float32), np.ones((1, 3, 64, 64), np.float32)).as_text("llvm")
    assert "bgen" not in text


# the batched rule by shape class: (letter, batch, M, K, N) -> generated?
BATCHED_RULE = {("s", 96, 128, 64, 128): True, ("s", 512, 64, 64, 64): True, ("s", 512, 32, 32, 32): True,
                ("s", 4096, 8, 8, 8): False, ("s", 4, 512, 512, 512): False, ("s", 256, 4, 256, 256): True,
                ("s", 64, 1, 64, 64): False, ("s", 1, 64, 64, 64): False, ("d", 64, 128, 128, 128): True,
                ("s", 2, 16, 512, 2048): True}


@pytest.mark.parametrize("case", sorted(BATCHED_RULE))
def test_the_batched_rule_by_shape_class(case):
    import ctypes
    import llvmlite.binding as llvm
    letter, batch, m, k, n = case
    lines = ["define i1 @rule(i64 %B, i64 %M, i64 %N, i64 %K) {", "entry:"]
    count = [0]

    def val(instr):
        count[0] += 1
        lines.append(f"  %r{count[0]} = {instr}")
        return f"%r{count[0]}"
    lines += [f"  ret i1 {gemm_rule.use_generated(val, letter, 512, '%M', '%N', '%K', batch='%B')}", "}"]
    _rule_function(letter)                  # initialises LLVM's target
    mod = llvm.parse_assembly("\n".join(lines))
    ee = llvm.create_mcjit_compiler(mod, target.target_machine())
    ee.finalize_object()
    rule = ctypes.CFUNCTYPE(ctypes.c_bool, *[ctypes.c_int64] * 4)(ee.get_function_address("rule"))
    assert rule(batch, m, n, k) == BATCHED_RULE[case]
    if BATCHED_RULE[case]:      # the compile-time rule never says no where the run-time one says yes
        assert gemm_rule.may_use_generated(letter, 512, m, n, k, batched=True)


@pytest.mark.parametrize("name", ["t", "gemm"])
def test_a_dim_named_like_the_batch_counter(name):
    """The batched loop's counter is no dim's name (a dim ``t`` was overwritten by it)."""
    S = rj.ShapeDtypeStruct
    rng = np.random.default_rng(0)
    p, v = rng.standard_normal((3, 5, 4)).astype(np.float32), rng.standard_normal((3, 4, 8)).astype(np.float32)
    f = rj.jit(lambda p, v: p @ v * 2.0, shapes=(S(("b", name, "s"), "float32"), S(("b", "s", 8), "float32")))
    np.testing.assert_allclose(f(p, v), 2 * (p.astype(np.float64) @ v), rtol=1e-5, atol=1e-5)
