"""The generated matrix product (``backends/llvm/gemm.py``): packed, register-blocked,
threaded, one function per element type and transposes for every shape.  Each variant is
called directly on hypothesis-drawn shapes (0, 1, primes, edge tiles, operands inside
larger arrays) and checked against NumPy in float64 within the dot product's error bound,
for both vector widths it is generated for; C's memory outside the product is never
written.  Through ``jit``, products of the shape classes the rule sends to it agree with
NumPy on every backend, and the rule itself is checked by shape class."""
from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
from relaxjax.backends.llvm import engine, gemm, gemm_module, gemm_rule, target

from helpers import BACKENDS

pytestmark = pytest.mark.skipif("avx2" not in target.host_features() or "fma" not in target.host_features(),
                                reason="the generated product needs FMA vectors (AVX2 or AVX-512)")

_I, _P = ctypes.c_int64, ctypes.c_void_p
# batch, sa, sb, sc, M, N, K, A, lda, B, ldb, C, ldc, epilogue, its argument
_SIG = ctypes.CFUNCTYPE(None, _I, _I, _I, _I, _I, _I, _I, _P, _I, _P, _I, _P, _I, _P, _P)
WIDTHS = [b for b in (256, 512) if b <= target.vector_bits()]
DIMS = st.one_of(st.sampled_from([0, 1, 2, 3, 5, 7, 11, 12, 13, 31, 32, 33, 97]), st.integers(1, 300))


@functools.lru_cache(maxsize=None)
def _product(variant: str, bits: int):
    engine.prepare_process()
    mod = engine.compile_llvm(gemm_module.module_text(variant, bits), [variant], native=engine.native_code())
    return mod, _SIG(mod.address(variant))


def _call(variant, bits, a, b, m, n, k, pad):
    """C (m x n, row stride n + pad, inside a NaN-filled array) = op(a) @ op(b)."""
    _, f = _product(variant, bits)
    big = np.full((m + 1, n + pad), np.nan, a.dtype)
    f(1, 0, 0, 0, m, n, k, a.ctypes.data, a.strides[0] // a.itemsize, b.ctypes.data,
      b.strides[0] // b.itemsize, big.ctypes.data, n + pad, None, None)
    return big


def _operand(rng, rows, cols, pad, dtype):
    """A rows x cols matrix inside a wider array (row stride cols + pad), and its copy."""
    full = rng.uniform(-1, 1, (rows, cols + pad)).astype(dtype)
    return full, full[:, :cols]


@given(m=DIMS, n=DIMS, k=DIMS, ta=st.booleans(), tb=st.booleans(), letter=st.sampled_from("sd"),
       pad=st.sampled_from([0, 0, 3]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=80, deadline=None)
def test_generated_product_agrees_with_numpy(m, n, k, ta, tb, letter, pad, seed):
    dtype = np.float32 if letter == "s" else np.float64
    rng = np.random.default_rng(seed)
    a_full, a = _operand(rng, *((k, m) if ta else (m, k)), pad, dtype)
    b_full, b = _operand(rng, *((n, k) if tb else (k, n)), pad, dtype)
    keep = a_full.copy(), b_full.copy()
    A = (a.T if ta else a).astype(np.float64)
    B = (b.T if tb else b).astype(np.float64)
    want = A @ B
    # the dot product's error bound: |fl(AB) - AB| <= k u |A| |B| (+ what rounding the
    # float64 oracle's inputs adds nothing to: they are exact)
    u = np.finfo(dtype).eps / 2
    bound = 1.01 * k * u * (np.abs(A) @ np.abs(B)) + np.finfo(dtype).tiny
    for bits in WIDTHS:
        big = _call(gemm.gemm_symbol(letter, ta, tb), bits, a, b, m, n, k, pad)
        got = big[:m, :n].astype(np.float64)
        assert np.all(np.abs(got - want) <= bound), (bits, np.max(np.abs(got - want) - bound))
        assert np.isnan(big[m]).all() and np.isnan(big[:m, n:]).all(), "wrote outside C"
    np.testing.assert_array_equal(a_full, keep[0])
    np.testing.assert_array_equal(b_full, keep[1])


@pytest.mark.parametrize("m", range(1, 50))
def test_every_micro_tile_height(m):
    """Products of fewer than SHORT_TILE_ROWS rows run the micro-tile padding them least
    (12, 8, 4 or 2 rows on 512 bits; 6, 4, 2 on 256): every row count through each one,
    with column tiles at their edge (N = 200: a 192-column tile and 8 more) and two
    contraction slices (K = 300 > KC), both transposes of B, float32 and float64."""
    rng = np.random.default_rng(m)
    n, k = 200, 300
    for letter, dtype in (("s", np.float32), ("d", np.float64)):
        for tb in (False, True):
            a = rng.uniform(-1, 1, (m, k)).astype(dtype)
            b_full, b = _operand(rng, *((n, k) if tb else (k, n)), 0, dtype)
            B = (b.T if tb else b).astype(np.float64)
            want = a.astype(np.float64) @ B
            bound = 1.01 * k * np.finfo(dtype).eps / 2 * (np.abs(a.astype(np.float64)) @ np.abs(B))
            for bits in WIDTHS:
                big = _call(gemm.gemm_symbol(letter, False, tb), bits, a, b, m, n, k, 0)
                assert np.all(np.abs(big[:m, :n] - want) <= bound), (letter, tb, bits)
                assert np.isnan(big[m]).all(), "wrote past C's last row"


@pytest.mark.parametrize("m", [49, 53, 56, 58, 60, 64, 68, 71])
def test_edge_tiles_of_the_default_micro_tile(m):
    """The default tile's last row tile of 1-8 rows runs a kernel computing only those
    (``gemm.EDGE_HEIGHTS``), A packed (N > 512) or read in place, and 9-11 rows the full
    one: every remainder's rows right and nothing written past C's last row."""
    rng = np.random.default_rng(m)
    k = 70
    for letter, dtype in (("s", np.float32), ("d", np.float64)):
        for n in (200, 600):
            a = rng.uniform(-1, 1, (m, k)).astype(dtype)
            b_full, b = _operand(rng, k, n, 0, dtype)
            want = a.astype(np.float64) @ b.astype(np.float64)
            bound = 1.01 * k * np.finfo(dtype).eps / 2 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
            big = _call(gemm.gemm_symbol(letter, False, False), target.vector_bits(), a, b, m, n, k, 0)
            assert np.all(np.abs(big[:m, :n] - want) <= bound), (letter, n)
            assert np.isnan(big[m]).all(), "wrote past C's last row"


@pytest.mark.parametrize("threads", [1, 2])
def test_large_products_on_one_and_two_threads(threads):
    """Several column blocks, contraction slices and row blocks (and the edge tiles of
    each), on the calling thread and split between threads by rows and by columns; a few
    rows by B transposed split by B's rows."""
    rng = np.random.default_rng(threads)
    try:
        engine.set_num_threads(threads)
        for m, k, n in ((517, 601, 4133), (1031, 300, 45), (9, 1100, 700)):
            a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
            want = a.astype(np.float64) @ b
            bound = 1.01 * k * 2 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
            got = _call("rj_gemm_s_nn", target.vector_bits(), a, b, m, n, k, 0)[:m, :n]
            assert np.all(np.abs(got - want) <= bound)
            if m <= gemm_rule.SKINNY_M:       # B transposed: streamed, split by its rows
                got = _call("rj_gemm_s_nt", target.vector_bits(), a, np.ascontiguousarray(b.T), m, n, k, 0)
                assert np.all(np.abs(got[:m, :n] - want) <= bound) and np.isnan(got[m]).all()
    finally:
        engine.set_num_threads(0)


# what the rule decides, by shape class (gemm.py's table): (letter, M, K, N) -> generated?
RULE = {("s", 16, 512, 2048): True, ("s", 2, 512, 2048): True, ("s", 300, 64, 1000): True,
        ("d", 300, 64, 1000): True, ("d", 16, 512, 2048): True, ("s", 64, 64, 64): False,
        ("s", 1024, 1024, 1024): False, ("s", 1024, 1024, 64): False, ("s", 100, 64, 64): False,
        ("s", 8, 30000, 10000): True, ("s", 32, 8192, 8192): False, ("d", 8, 8192, 8192): False,
        ("d", 32, 512, 512): True, ("s", 48, 512, 2048): True, ("d", 48, 384, 1152): True,
        ("s", 49, 512, 2048): False, ("d", 56, 512, 2048): False, ("s", 8, 3, 30000): True,
        ("s", 1, 512, 2048): False}


# products by B stored transposed (``a @ b.T``): a few rows stream B in the generated code
RULE_NT = {("s", 1, 384, 8192): False, ("s", 2, 384, 8192): True, ("d", 16, 512, 2048): True,
           ("s", 16, 4096, 4096): True, ("s", 32, 4096, 4096): True, ("s", 33, 4096, 4096): False,
           ("s", 1, 8, 8): False,
           ("s", 48, 512, 2048): True, ("s", 1024, 1024, 1024): False}


@functools.lru_cache(maxsize=None)
def _rule_function(letter: str, nt: bool = False):
    """The rule's LLVM code as a function ``i1 f(M, N, K)`` (for 512-bit vectors)."""
    n = [0]

    def val(instr):
        n[0] += 1
        lines.append(f"  %r{n[0]} = {instr}")
        return f"%r{n[0]}"
    lines = ["define i1 @rule(i64 %M, i64 %N, i64 %K) {", "entry:"]
    out = gemm_rule.use_generated(val, letter, 512, "%M", "%N", "%K", nt=nt)
    lines += [f"  ret i1 {out}", "}"]
    target.init()
    mod = llvm.parse_assembly("\n".join(lines))
    ee = llvm.create_mcjit_compiler(mod, target.target_machine())
    ee.finalize_object()
    return ee, ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
        ee.get_function_address("rule"))


@pytest.mark.parametrize("case", sorted(RULE))
def test_the_rule_by_shape_class(case):
    letter, m, k, n = case
    assert _rule_function(letter)[1](m, n, k) == RULE[case]
    # the compile-time rule never says no where the run-time one says yes
    assert gemm_rule.may_use_generated(letter, 512, m, n, k) == RULE[case]
    assert gemm_rule.may_use_generated(letter, 512, None, None, None)
    assert not gemm_rule.may_use_generated(letter, 256, m, n, k)


@pytest.mark.parametrize("case", sorted(RULE_NT))
def test_the_rule_for_b_transposed(case):
    letter, m, k, n = case
    assert _rule_function(letter, nt=True)[1](m, n, k) == RULE_NT[case]
    assert gemm_rule.may_use_generated(letter, 512, m, n, k, nt=True) == RULE_NT[case]
    assert not gemm_rule.may_use_generated(letter, 256, m, n, k, nt=True)


@given(m=st.one_of(st.sampled_from([1, 2, 3, 13, 16, 17, 32]), st.integers(1, 32)), n=st.integers(65, 700),
       k=st.sampled_from([7, 64, 333, 512]), dtype=st.sampled_from(["float32", "float64"]),
       form=st.sampled_from(["nn", "nt", "epilogue", "nt_epilogue"]))
@settings(max_examples=30, deadline=None)
def test_jit_products_the_rule_sends_to_generated_code(m, n, k, dtype, form):
    """Short (decode-sized) and shallow products through ``jit``, with an epilogue and a
    transposed operand (a few rows of it: gemm_skinny's path), on every backend."""
    f = {"nn": lambda a, b: a @ b, "nt": lambda a, b: a @ b.T,
         "epilogue": lambda a, b: np.tanh(a @ b + 1.0),
         "nt_epilogue": lambda a, b: np.tanh(a @ b.T + 1.0)}[form]
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.uniform(-1, 1, (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if form.startswith("nt") else (k, n)).astype(dtype)
    want = f(a.astype(np.float64), b.astype(np.float64))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-5, atol=2e-7 * k)
    for backend in BACKENDS:
        got = rj.jit(f, backend=backend)(a, b)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.astype(np.float64), want, **tol)


def test_generated_product_with_the_cache_off():
    """With ``RELAXJAX_CACHE=0`` executables compile in memory (MCJIT), which cannot hold the
    product's thread-local packing buffers: the product is linked into a temporary shared
    library instead (it aborted the process before), and its results are NumPy's."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, relaxjax as rj\n"
        "from relaxjax.backends.llvm import engine, gemm, target\n"
        "f = rj.jit(lambda a, b: a @ b)\n"
        "rng = np.random.default_rng(0)\n"
        "for m, k, n in ((16, 512, 2048), (300, 64, 257), (5, 7, 3)):\n"
        "    a = rng.standard_normal((m, k)).astype(np.float32)\n"
        "    b = rng.standard_normal((k, n)).astype(np.float32)\n"
        "    want = a.astype(np.float64) @ b\n"
        "    assert np.all(np.abs(f(a, b) - want) <= 1e-5 * (np.abs(a) @ np.abs(b)) + 1e-6)\n"
        "print('generated', sorted(engine._GEMMS), engine.native_code())\n")
    env = dict(os.environ, RELAXJAX_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = ["rj_gemm_s_nn"] if engine.generated_products() and target.vector_bits() >= 512 else []
    assert f"generated {expected} False" in out.stdout, out.stdout


@pytest.mark.skipif(not engine.generated_products() or target.vector_bits() < 512,
                    reason="the rule sends products to the generated code on AVX-512 hosts")
@pytest.mark.parametrize("loads", [True, False])
def test_generated_products_load_at_their_first_call(tmp_path, loads):
    """A program that may run a generated product compiles or loads it only when a call
    reaches it: a one-row product (BLAS's gemv) loads nothing, eight rows load the float32
    product, and its transposed form stays unloaded.  If the load fails (``loads`` False:
    the loader made to raise), the call runs BLAS instead and gives the same results."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, relaxjax as rj\n"
        "from relaxjax.backends.llvm import engine\n"
        + ("" if loads else
           "def fail(variants):\n    raise RuntimeError('no linker here')\nengine.use_gemms = fail\n") +
        "f = rj.jit(lambda a, b: a @ b)\n"
        "rng = np.random.default_rng(0)\n"
        "b = rng.standard_normal((512, 2048)).astype(np.float32)\n"
        "seen = []\n"
        "for m in (1, 8, 8):\n"
        "    a = rng.standard_normal((m, 512)).astype(np.float32)\n"
        "    want = a.astype(np.float64) @ b\n"
        "    assert np.all(np.abs(f(a, b) - want) <= 1e-5 * (np.abs(a) @ np.abs(b)) + 1e-6)\n"
        "    seen.append(sorted(engine._GEMMS))\n"
        "print('loaded', seen)\n")
    env = dict(os.environ, RELAXJAX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    if loads:
        assert "loaded [[], ['rj_gemm_s_nn'], ['rj_gemm_s_nn']]" in out.stdout, out.stdout
    else:
        assert "loaded [[], [], []]" in out.stdout, out.stdout
        assert "did not load" in out.stderr and "BLAS runs it" in out.stderr, out.stderr
