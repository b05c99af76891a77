"""FuseOps / FuseTIR: what gets fused (IR tests) and that fused programs compute what NumPy
computes (numeric tests on every backend, many shapes), for the default pipeline and for
partial pipelines."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import nn
from relaxjax.compile import verify
from relaxjax.tir.analysis import classify_primfunc
from relaxjax.compile.fuse import fuse_ops
from relaxjax.compile.legalize import legalize
from relaxjax.compile import dead_code_elimination, default_pipeline
from relaxjax import tir
from relaxjax.tir import PrimFunc
from relaxjax.tir.share import bind_shared

from helpers import BACKENDS, SIZES, assert_same

S = rj.ShapeDtypeStruct
F32 = "float32"
GELU_C = math.sqrt(2.0 / math.pi)


@pytest.fixture(autouse=True)
def _verify_every_pass(monkeypatch):
    monkeypatch.setenv("RELAXJAX_VERIFY", "1")


def layer_norm_by_hand(x, g, b):
    mu = rnp.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = rnp.mean(xc * xc, axis=-1, keepdims=True)
    return xc * (1.0 / rnp.sqrt(var + 1e-5)) * g + b


def mlp(x, w1, b1, w2, b2):
    h = x @ w1 + b1
    return (0.5 * h * (1.0 + rnp.tanh(GELU_C * (h + 0.044715 * h * h * h)))) @ w2 + b2


def chain(x):
    return rnp.tanh(rnp.exp(x) * 2.0 + 1.0) - x


def calls(text: str) -> dict:
    main = text.split("\n\n")[0]
    return {k: len(re.findall(rf"\b{k}\(", main)) for k in ("call_tir", "call_library")}


def optimized(fn, *structs, pipeline=None, backend="llvm"):
    return rj.jit(fn, backend=backend, pipeline=pipeline).lower(*structs).compile().as_text("optimized")


# ---------------------------------------------------------------------------------------
# What gets fused
# ---------------------------------------------------------------------------------------

def test_default_pipeline_is_printable():
    names = [p.name for p in default_pipeline()]
    assert "FuseOps" in names and names[-1] in ("Legalize", "DeadCodeElimination")
    assert "FuseOps" in repr(default_pipeline())


@pytest.mark.parametrize("fn, structs, n_tir, n_lib", [
    (chain, [S(("n", 1024), F32)], 1, 0),
    (lambda x: nn.softmax(x, axis=-1), [S(("n", "m"), F32)], 1, 0),
    (lambda x: nn.logsumexp(x, axis=-1), [S(("b", "t", 16), F32)], 1, 0),
    (lambda x: nn.log_softmax(x, axis=-1), [S(("n", 64), F32)], 1, 0),
    (layer_norm_by_hand, [S(("n", 768), F32), S((768,), F32), S((768,), F32)], 1, 0),
    (lambda x, g: nn.rms_norm(x, g), [S(("n", 512), F32), S((512,), F32)], 1, 0),
    (lambda x, g, b: nn.layer_norm(x, g, b), [S(("n", 96), F32), S((96,), F32), S((96,), F32)], 1, 0),
    (mlp, [S(("n", 64), F32), S((64, 256), F32), S((256,), F32), S((256, 64), F32), S((64,), F32)], 2, 2),
    # the epilogue of a full reduction stays with it; the count m * n is computed inside
    (lambda x: rnp.mean(x) * 2.0, [S(("n", "m"), F32)], 1, 0),
    (lambda x: rnp.var(x, axis=1), [S(("n", "m"), F32)], 1, 0),
])
def test_fused_workloads_are_few_kernels(fn, structs, n_tir, n_lib):
    text = optimized(fn, *structs)
    assert calls(text) == {"call_tir": n_tir, "call_library": n_lib}, text


def test_softmax_is_one_row_wise_kernel_that_stores_exp_once():
    loops = rj.jit(lambda x: nn.softmax(x, axis=-1)).lower(S(("n", "m"), F32)).as_text("loops")
    assert loops.count("parallel for") == 1
    assert loops.count("reduction for") == 2            # max, then sum
    assert loops.count("exp(") == 1, loops              # the second pass re-reads it
    assert "vectorized for" in loops


@pytest.mark.parametrize("shape", [("n", 1, 384), (1, "n", 384), ("n", 1, 1, 7)])
def test_row_wise_groups_with_axes_of_extent_one_fuse(shape):
    """A layer norm over rows kept with axes of size 1 (a decode step's (b, 1, d)): the
    reduction is read at index 0 of those axes where it is broadcast, and at the loop
    variable of their one-trip loop where it is stored -- the same element; one program,
    right values on every backend."""
    g = np.random.default_rng(0).standard_normal(shape[-1]).astype(np.float32)
    f = lambda x: nn.layer_norm(x, g, g) * 2.0 + x                     # noqa: E731
    assert calls(optimized(f, S(shape, F32)))["call_tir"] == 1
    x = np.random.default_rng(1).standard_normal(tuple(5 if d == "n" else d for d in shape)).astype(np.float32)
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    want = ((x - m) / np.sqrt(v + 1e-5) * g + g) * 2.0 + x
    for b in BACKENDS:
        np.testing.assert_allclose(rj.jit(f, shapes=S(shape, F32), backend=b)(x), want, rtol=1e-4, atol=1e-4)


def test_fusion_needs_proved_shape_equality():
    # exp(b) has 8 elements, the sum n*8: different loop nests, so not fused
    text = optimized(lambda x, b: x + rnp.exp(b), S(("n", 8), F32), S((8,), F32))
    assert calls(text)["call_tir"] == 2
    # same symbolic element count through a reshape: fused
    text = optimized(lambda x: rnp.exp(x).reshape((x.shape[0] * 4,)) + 1.0, S(("n", 4), F32))
    assert calls(text)["call_tir"] == 1
    # a size-1 reduction is no row-wise kernel: it reduces nothing
    text = optimized(lambda x: rnp.exp(rnp.sum(rnp.exp(x), axis=1)), S(("n", 1), F32))
    assert calls(text)["call_tir"] >= 1


def test_fuse_ops_alone_makes_primitive_subfunctions():
    text = optimized(layer_norm_by_hand, S(("n", 8), F32), S((8,), F32), S((8,), F32),
                     pipeline=[dead_code_elimination, fuse_ops], backend="numpy")
    assert re.search(r"= @fused_\w+\(x, g, b\)", text), text
    assert "# kind=reduction, primitive=True" in text


def test_loop_analysis_classifies_programs():
    low = rj.jit(lambda x, y: (x + y, x.T, rnp.sum(x, axis=1), x @ y), pipeline=[legalize])
    exe = low.lower(S((4, 4), "int32"), S((4, 4), "int32")).compile()._entry.module
    kinds = {f.name.rsplit("_", 1)[0]: classify_primfunc(f) for f in exe.functions.values()
             if isinstance(f, PrimFunc)}
    assert {k: kinds[k] for k in ("add", "transpose", "reduce_sum", "matmul")} == {
        "add": "elementwise", "transpose": "injective", "reduce_sum": "reduction", "matmul": "reduction"}


def test_loop_level_programs_fuse_by_their_analysis():
    # lower every op to its own program first; FuseOps then groups the call_tirs by the
    # analysis of their loops, and the second Legalize inlines them into one program
    pipe = [legalize, fuse_ops, legalize]
    text = optimized(chain, S(("n", 16), F32), pipeline=pipe)
    assert calls(text) == {"call_tir": 1, "call_library": 0}, text
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(F32)
    got = rj.jit(chain, pipeline=pipe)(x)
    np.testing.assert_allclose(got, np.tanh(np.exp(x) * 2 + 1) - x, rtol=2e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Numbers: fused programs against NumPy (float64 oracle), every backend, many shapes
# ---------------------------------------------------------------------------------------

PIPELINES = {
    "default": None,
    "unfused": [legalize],
    "fuse-only": [dead_code_elimination, fuse_ops],
    "tir-then-fuse": [legalize, fuse_ops, legalize],
}


def _oracle_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _oracle_ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * g + b


@settings(max_examples=12, deadline=None)
@given(n=SIZES, m=st.sampled_from([1, 2, 3, 7, 16, 31, 130]), seed=st.integers(0, 2**16),
       pipe=st.sampled_from(sorted(PIPELINES)), backend=st.sampled_from(BACKENDS))
def test_softmax_layernorm_logsumexp_match_numpy(n, m, seed, pipe, backend):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, m)) * 3).astype(F32)
    g, b = rng.standard_normal(m).astype(F32), rng.standard_normal(m).astype(F32)
    x64, g64, b64 = (a.astype(np.float64) for a in (x, g, b))
    jit = lambda f: rj.jit(f, backend=backend, pipeline=PIPELINES[pipe])  # noqa: E731
    np.testing.assert_allclose(jit(lambda x: nn.softmax(x, axis=-1))(x), _oracle_softmax(x64),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jit(layer_norm_by_hand)(x, g, b), _oracle_ln(x64, g64, b64),
                               rtol=1e-4, atol=2e-4)
    mx = x64.max(-1)
    np.testing.assert_allclose(jit(lambda x: nn.logsumexp(x, axis=-1))(x),
                               np.log(np.exp(x64 - mx[:, None]).sum(-1)) + mx, rtol=1e-5, atol=1e-5)
    got = jit(lambda x, g: nn.rms_norm(x, g))(x, g)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * g64
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(n=SIZES, seed=st.integers(0, 2**16), pipe=st.sampled_from(sorted(PIPELINES)),
       backend=st.sampled_from(BACKENDS))
def test_mlp_block_with_fused_epilogue(n, seed, pipe, backend):
    rng = np.random.default_rng(seed)
    d, h = 24, 40
    args = [rng.standard_normal(s).astype(F32) * sc for s, sc in
            [((n, d), 1.0), ((d, h), 1 / math.sqrt(d)), ((h,), 0.1), ((h, d), 1 / math.sqrt(h)), ((d,), 0.1)]]
    x, w1, b1, w2, b2 = (a.astype(np.float64) for a in args)
    hh = x @ w1 + b1
    want = (0.5 * hh * (1 + np.tanh(GELU_C * (hh + 0.044715 * hh ** 3)))) @ w2 + b2
    got = rj.jit(mlp, backend=backend, pipeline=PIPELINES[pipe])(*args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(n=SIZES, k=st.sampled_from([1, 2, 5, 8]), seed=st.integers(0, 2**16),
       backend=st.sampled_from(BACKENDS))
def test_injective_groups_with_layout_ops_and_multiple_outputs(n, k, seed, backend):
    def f(x, y):
        a = rnp.exp(x) * 0.5                  # used inside the group and returned
        t = rnp.transpose(a) + y              # re-indexed read of a group value
        r = rnp.reshape(t, (-1,))
        return a, rnp.tanh(r) - 1.0, rnp.concatenate([x, a], axis=1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)).astype(F32)
    y = rng.standard_normal((k, n)).astype(F32)
    got = rj.jit(f, backend=backend)(x, y)
    a = np.exp(x.astype(np.float64)) * 0.5
    want = (a, np.tanh((a.T + y).reshape(-1)) - 1.0, np.concatenate([x, a], axis=1))
    for g_, w_ in zip(got, want):
        assert g_.shape == w_.shape and g_.dtype == np.float32
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(n=SIZES, seed=st.integers(0, 2**16), backend=st.sampled_from(BACKENDS))
def test_reduction_groups_over_leading_axes_and_integer_sums(n, seed, backend):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, (n, 3, 4)).astype("int32")

    def f(x):
        s = rnp.sum(x * 2 + 1, axis=(0, 2))             # reduces a leading and a trailing axis
        return s, rnp.max(x, axis=0) - rnp.min(x, axis=0)
    got = rj.jit(f, backend=backend)(x)
    x64 = x.astype(np.int64)
    np.testing.assert_array_equal(got[0], (x * 2 + 1).sum(axis=(0, 2)).astype("int32"))
    np.testing.assert_array_equal(got[1], x64.max(0) - x64.min(0))


def test_every_pass_leaves_a_verified_module():
    structs = [S(("n", 32), F32), S((32,), F32), S((32,), F32)]
    lowered = rj.jit(layer_norm_by_hand).lower(*structs)
    m = lowered.module
    for p in [dead_code_elimination, fuse_ops, legalize]:
        m = p(m)
        verify(m)
    assert any(isinstance(f, PrimFunc) and "reduction for" in str(f) for f in m.functions.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_group_whose_arguments_show_dims_only_in_products(backend):
    # the gemm epilogue's operand is (1, b0*b2): b0 and b2 come from the caller's scope
    f = rj.jit(lambda a, b: rnp.einsum("...ij,...jk->...ik", a, b), backend=backend)
    rng = np.random.default_rng(1)
    for shape in [(2, 1, 2), (5, 1, 3), (3, 1, 7)]:
        a, b = rng.standard_normal((1, 1)), rng.standard_normal(shape)
        np.testing.assert_allclose(f(a, b), np.einsum("...ij,...jk->...ik", a, b), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shifted_slices_of_a_stencil_fuse_into_one_loop(backend):
    """The three shifted reads of a 3-point stencil are sibling producers of one count: one
    loop nest computes them and their sum (automatic mode guards n >= 2 for the slices)."""
    f = rj.jit(lambda a: (a[:-2] + a[1:-1] + a[2:]) / 3.0, backend=backend)
    text = f.lower(np.zeros(10)).as_text("optimized")
    assert "f64[a0 - 2]" in text
    if backend == "llvm":
        main = text.split("@tir")[0]
        assert main.count("call_tir(") == 1, text
    for n in (2, 3, 10, 257):
        a = np.random.default_rng(n).standard_normal(n)
        np.testing.assert_allclose(f(a), (a[:-2] + a[1:-1] + a[2:]) / 3.0, rtol=1e-12)


def test_layout_consumers_inline_producers_of_another_count():
    """A stencil read only by its concatenate or pad is inlined into it (each element read
    once, nothing recomputed): one loop writes the whole new array.  A broadcast consumer
    does not inline an expensive producer of fewer elements."""
    cases = [(lambda xp, a: xp.concatenate([a[:1], (a[:-2] + a[1:-1] + a[2:]) / 3.0, a[-1:]])),
             (lambda xp, a: xp.pad(a[1:-1] * 2.0 + a[2:], 1))]
    for fn in cases:
        f = rj.jit(lambda a, fn=fn: fn(rnp, a))
        main = f.lower(np.zeros(10)).as_text("optimized").split("@tir")[0]
        assert main.count("call_tir(") == 1, main
        for n in (2, 3, 11, 300):
            a = np.random.default_rng(n).standard_normal(n)
            np.testing.assert_allclose(f(a), fn(np, a), rtol=1e-12)
    text = optimized(lambda x, b: x + rnp.exp(b), S(("n", 8), F32), S((8,), F32))
    assert calls(text)["call_tir"] == 2


@pytest.mark.parametrize("length", [63, 64, 65, 300, 1500])
def test_long_elementwise_chains_fuse_in_bounded_programs(length):
    """A chain of hundreds of elementwise ops (a generated model, an unrolled recurrence)
    compiles without exhausting Python's recursion limit: fused programs are cut every
    MAX_FUSED_DEPTH bindings, and the numbers are NumPy's."""
    from relaxjax.compile.fuse import MAX_FUSED_DEPTH

    def f(x):
        for i in range(length):
            x = x * 1.0001 + 0.5 if i % 2 else rnp.tanh(x) - 0.1
        return x
    x = np.linspace(-2.0, 2.0, 7)
    want = x
    for i in range(length):
        want = want * 1.0001 + 0.5 if i % 2 else np.tanh(want) - 0.1
    jf = rj.jit(f)
    assert_same(jf(x), want, rtol=1e-12, atol=1e-12)
    programs = jf.lower(x).compile().as_text("optimized").count("call_tir(")
    # 2 bindings per op: one program per MAX_FUSED_DEPTH of them
    assert programs == -(-2 * length // MAX_FUSED_DEPTH), programs


@given(n=SIZES, k=st.integers(0, 8))
@settings(max_examples=10, deadline=None)
def test_gather_with_indices_in_range_by_construction_fuses_into_one_program(n, k):
    """A gather whose indices the same group computes and which are in range by construction
    (``r[clip(k - 1 - i, 0, n - 1)]``, durbin's reversed prefix; ``r[(i + 1) % n]``;
    ``r[i // 2]``) needs no range check: index, gather and consumers are one program."""
    def f(r, k):
        i = rnp.arange(r.shape[0])
        rev = np.clip(k - 1 - i, 0, r.shape[0] - 1)
        return np.where(i < k, r[rev] * 2.0 + 1.0, 0.0) + r[(i + 1) % r.shape[0]] - r[i // 2]
    r = np.linspace(-1.0, 1.0, n)
    i = np.arange(n)
    want = np.where(i < k, r[np.clip(k - 1 - i, 0, n - 1)] * 2.0 + 1.0, 0.0) + r[(i + 1) % n] - r[i // 2]
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(r, np.int64(k)), want)
    text = rj.jit(f).lower(r, np.int64(k)).compile().as_text("optimized")
    calls = [line for line in text.splitlines() if "call_tir(" in line and "r0" in line.split("=")[0]]
    assert len(calls) == 1 and "fused_" in calls[0], text


@given(n=SIZES, k=st.integers(-3, 8))
@settings(max_examples=10, deadline=None)
def test_gather_with_computed_indices_that_may_be_out_of_range_is_checked(n, k):
    """Indices computed in a group that no range proof bounds (``r[i + k]``) are stored and
    checked before the gather, which starts its own group: out of range raises NumPy's
    IndexError on every backend, in range the consumers still fuse with the gather."""
    def f(r, k):
        i = rnp.arange(r.shape[0])
        return r[i + k] * 2.0 + 1.0
    r = np.linspace(-1.0, 1.0, n)
    i = np.arange(n)
    for b in BACKENDS:
        g = rj.jit(f, backend=b)
        if np.all((i + k >= -n) & (i + k < n)):
            assert_same(g(r, np.int64(k)), r[i + k] * 2.0 + 1.0)
        else:
            with pytest.raises(IndexError, match="out of bounds"):
                g(r, np.int64(k))
    text = rj.jit(f).lower(r, np.int64(0)).compile().as_text("optimized")
    gathers = [line for line in text.splitlines() if "take" in line]
    assert len(gathers) == 1 and "fused_" in gathers[0] and "mul" in gathers[0], text


@given(n=SIZES, rows=st.integers(1, 9), mapped=st.booleans(), seed=st.integers(0, 2**16))
@settings(max_examples=10, deadline=None)
def test_gather_read_after_a_product_fuses_into_the_epilogue(n, rows, mapped, seed):
    """``tanh(h @ w + x)`` with ``h`` and ``x`` read through index arrays (as an auto-batched
    cell reads them, ``mapped``: the cell vmapped, where the gather comes before the
    product): the gather of ``x`` is read where the product's elementwise epilogue reads it,
    nothing stored between; the gather feeding the product stays a copy (gemm reads a
    contiguous operand).  Indices out of range raise NumPy's IndexError."""
    def cell(h, x, w):
        return rnp.tanh(h @ w + x)

    def f(h_src, h_idx, x_src, x_idx, w):
        h, x = rnp.take(h_src, h_idx, axis=0), rnp.take(x_src, x_idx, axis=0)
        return rj.vmap(cell, in_axes=(0, 0, None))(h, x, w) if mapped else cell(h, x, w)
    rng = np.random.default_rng(seed)
    h_src, x_src, w = rng.standard_normal((rows, 4)), rng.standard_normal((rows + 2, 3)), rng.standard_normal((4, 3))
    hi, xi = rng.integers(0, rows, n), rng.integers(0, rows + 2, n)
    want = np.tanh(h_src[hi] @ w + x_src[xi])
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(h_src, hi, x_src, xi, w), want)
    with pytest.raises(IndexError, match="out of bounds"):
        rj.jit(f)(h_src, hi, x_src, xi + rows + 2, w)
    main = optimized(f, h_src, hi, x_src, xi, w).split("\n\n")[0]
    kernels = [line.split("=", 1)[1] for line in main.splitlines() if "call_tir(" in line]
    assert len(kernels) == 2 and calls(main)["call_library"] == 1, main
    reading_x = [k for k in kernels if "x_idx" in k]
    assert len(reading_x) == 1 and "fused_" in reading_x[0] and "tanh" in reading_x[0], main


def test_a_value_read_several_times_is_built_once():
    """Each step reads the last value three times: inlined as a tree, 12 steps are 3 ** 12
    nodes.  FuseTIR shares the node and binds the shared ones to locals, so the program
    stays linear in the steps."""
    def f(x):
        for _ in range(12):
            x = rnp.where((x & 1) == 1, (x >> 1) ^ 0x8408, x >> 1)
        return x
    x = np.arange(1000, dtype=np.int64)
    lowered = rj.jit(f).lower(x)
    assert len(lowered.as_text("loops")) < 20_000
    ref = x.copy()
    for _ in range(12):
        ref = np.where((ref & 1) == 1, (ref >> 1) ^ 0x8408, ref >> 1)
    np.testing.assert_array_equal(rj.jit(f)(x), ref)


def test_bind_shared_leaves_nodes_of_lazy_branches_inline():
    """Only nodes computed on every path are bound: a load inside an ``if_then_else``
    branch may be out of range where the branch is not taken."""
    a = tir.Buffer("a", (8,), np.dtype("float32"))
    out = tir.Buffer("out", (8,), np.dtype("float32"))
    i = tir.Var("i")
    inside = tir.Load(a, (i - 4,))              # valid only for i >= 4
    both = tir.Load(a, (i,))
    lazy = tir.op("if_then_else", tir.op("ge", i, 4), tir.op("add", inside, inside), both)
    s = tir.Store(out, (i,), tir.op("mul", lazy, tir.op("add", both, both)))
    bound = bind_shared(s, {"a", "out", "i"}, budget=0)
    locals_ = [x for x in bound.stmts if isinstance(x, tir.Local)]
    assert [tir.expr_str(x.init) for x in locals_] == ["a[i]"]
    assert bind_shared(s, {"a", "out", "i"}) is s           # under the budget: unchanged




@given(n=SIZES, m=SIZES)
@settings(max_examples=10, deadline=None)
def test_unit_axes_get_no_loop_and_the_next_axis_vectorizes(n, m):
    """An elementwise program over (n, m, 1) (keepdims shapes; the halves of packed complex
    values) indexes the unit axis with 0 and vectorizes along m, not along a loop of one."""
    def f(x, y):
        return np.exp(x[:, :, None] * 2.0) + y[:, :, None]
    x = np.linspace(-1.0, 1.0, n * m).reshape(n, m)
    want = np.exp(x[:, :, None] * 2.0) + x[:, :, None]
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, x), want)
    text = rj.jit(f).lower(x, x).compile().as_text("loops")
    assert "range(1)" not in text and re.search(r"vectorized for \w+ in range\(x1\)", text), text


@settings(max_examples=12, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3, 5, 7, 16, 33]), min_size=2, max_size=4),
       seed=st.integers(0, 2**16), reduced=st.booleans(), data=st.data())
def test_a_transposed_output_is_stored_at_the_permuted_index(shape, seed, reduced, data):
    """A group returning a value and its transpose (a cache and its keys laid out for the
    product) stores the transpose at the permuted loop index, in the injective loops and in
    a row-wise group's elementwise pass: no division or remainder per element, NumPy's
    numbers on every backend."""
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    x = np.random.default_rng(seed).standard_normal(shape)

    def f(x):
        y = rnp.sin(x) * 2.0 + 1.0
        out = (y, rnp.transpose(y, perm))
        return out + (y.sum(-1),) if reduced else out
    y = np.sin(x) * 2.0 + 1.0
    want = (y, np.transpose(y, perm)) + ((y.sum(-1),) if reduced else ())
    for b in BACKENDS:
        got = rj.jit(f, backend=b)(x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"backend {b}")
    loops = rj.jit(f).lower(x).as_text("loops")
    assert "//" not in loops and "%" not in loops, loops
