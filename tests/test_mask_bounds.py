"""Loop bounds from masks (``compile.mask_bounds``), generators recomputed inside regions
(``core.TraceContext.generators``) and gathers whose computed indices are in range by
construction (``compile.value_ranges``): the masked prefix reductions of triangular solves
and recurrences.  NumPy is the oracle on every backend; the printed programs show the
narrowed loops."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.lax import fori_loop

from helpers import BACKENDS, SIZES, assert_same

PREDICATES = {
    "lt": (lambda i, k: i < k), "le": (lambda i, k: i <= k), "gt": (lambda i, k: i > k),
    "ge": (lambda i, k: i >= k), "eq": (lambda i, k: i == k),
    "mirror_lt": (lambda i, k: k > i), "mirror_ge": (lambda i, k: k <= i),
    "band": (lambda i, k: (i >= k - 3) & (i < k)),
}
REDUCERS = {"sum": (np.sum, 0.0), "prod": (np.prod, 1.0), "max": (np.max, -np.inf),
            "min": (np.min, np.inf)}


def _program_text(f, *args, stage: str = "loops") -> str:
    """The loop programs ("loops"), or the graph with its regions and their programs
    ("optimized")."""
    return rj.jit(f).lower(*args).compile().as_text(stage)


@given(n=SIZES, k=st.integers(-5, 310), pred=st.sampled_from(sorted(PREDICATES)),
       red=st.sampled_from(sorted(REDUCERS)))
@settings(max_examples=40, deadline=None)
def test_masked_reduction_runs_only_the_kept_iterations(n, k, pred, red):
    """``reduce(where(p(arange(n), k), x, identity))`` with the mask a comparison (or a
    conjunction of comparisons) of the reduced index with a traced integer: same result as
    NumPy for every k (negative, past the end), and the reduction loop is narrowed (no
    select left in it)."""
    p, (fn, ident) = PREDICATES[pred], REDUCERS[red]

    def f(x, k):
        i = rnp.arange(x.shape[0])
        return fn(np.where(p(i, k), x, ident))
    x = np.linspace(0.5, 1.5, n)
    want = fn(np.where(p(np.arange(n), k), x, ident))
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, np.int64(k)), want)
    text = _program_text(f, x, np.int64(k))
    loop = next(line for line in text.splitlines() if "reduction for" in line)
    assert "min(" in loop or "max(" in loop, text
    assert "select" not in text.split("reduction for", 1)[1].split("\n")[1], text


@given(n=SIZES, k=st.integers(0, 8))
@settings(max_examples=15, deadline=None)
def test_mask_on_another_axis_or_a_float_bound_is_kept(n, k):
    """Only comparisons of the loop's own index with an integer move into its bounds: a
    float bound (``i < k + 0.5``) and a mask on data keep their select, and still agree."""
    def f(x, k):
        i = rnp.arange(x.shape[0])
        return np.sum(np.where(i < k + 0.5, x, 0.0)) + np.sum(np.where(x > 1.0, x, 0.0))
    x = np.linspace(0.5, 1.5, n)
    i = np.arange(n)
    want = np.sum(np.where(i < k + 0.5, x, 0.0)) + np.sum(np.where(x > 1.0, x, 0.0))
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x, np.int64(k)), want)
    text = _program_text(f, x, np.int64(k))
    assert text.count("select") >= 2, text


@given(n=SIZES)
@settings(max_examples=10, deadline=None)
def test_triangular_solve_in_a_loop_sums_only_the_prefix(n):
    """Forward substitution written the JAX way (a masked row product per fori_loop step,
    ``np.arange`` from outside the loop): the arange is recomputed in the body, so the
    row's reduction loop runs ``range(min(max(k, 0), n))``; agrees with NumPy."""
    rng = np.random.default_rng(n)
    L = np.tril(rng.uniform(0.5, 1.0, (n, n))) + n * np.eye(n)
    bvec = rng.uniform(-1, 1, n)

    def f(L, b):
        i = rnp.arange(L.shape[0])

        def row(k, x):
            xk = (b[k] - np.sum(np.where(i < k, L[k, :] * x, 0.0))) / L[k, k]
            return np.where(i == k, xk, x)
        return fori_loop(0, L.shape[0], row, 0.0 * b)
    want = np.zeros(n)
    for k in range(n):
        want[k] = (bvec[k] - L[k, :k] @ want[:k]) / L[k, k]
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(L, bvec), want, rtol=1e-10, atol=1e-12)
    text = _program_text(f, L, bvec, stage="optimized")
    body = text.split("def fori_body", 1)[1]
    assert "i64[L0]" not in body.split(")")[0], "the arange was passed in, not recomputed:\n" + text
    assert "reduction for r0 in range(min(max(" in body, text


def test_generators_are_recomputed_in_every_region_that_uses_them():
    """An arange and a zeros array made outside a loop and used in its body are computed in
    the body (scalar constants alone feed them), not passed in; a traced value still is."""
    def f(x):
        i = rnp.arange(x.shape[0])
        z = rnp.zeros(x.shape[0])

        def body(k, acc):            # (reversed: not pointwise, so it stays a loop body)
            return acc[::-1] + np.where(i == k, x, z)
        return fori_loop(0, 3, body, 0.0 * x)
    x = np.arange(6.0)
    want = 0.0 * x
    for k in range(3):
        want = want[::-1] + np.where(np.arange(6) == k, x, 0.0)
    for b in BACKENDS:
        assert_same(rj.jit(f, backend=b)(x), want)
    text = _program_text(f, x, stage="optimized")
    head = text.split("def fori_body(", 1)[1].split(")")[0]
    assert head.count("c") == 1 and "c0: f64[x0]" in head, text


def test_update_region_narrows_an_update_to_its_slice():
    """``update_region`` of a fused dynamic_update_slice: loops narrowed to the slice's rows
    and columns (bounds from the condition's conjuncts), the update stored unconditionally."""
    from relaxjax.compile.mask_bounds import update_region
    f = rj.jit(lambda x, u, i: rj.lax.dynamic_update_slice(x, u * 2.0, (i, 1)))
    fn = f.lower(np.ones((6, 5)), np.ones((2, 3)), np.int64(1)).module
    from relaxjax.compile import run_pipeline
    from relaxjax.compile.pipeline import default_pipeline
    lowered = run_pipeline(fn, default_pipeline()).main
    prog = next(b.callee for b in lowered.bindings if b.kind == "tir")
    from relaxjax.tir.analysis import inplace_input
    src, dst = prog.inputs[inplace_input(prog)], prog.outputs[0]
    text = str(update_region(prog, src, dst))
    assert "if_then_else" not in text and "for i0 in range(" in text and "max(" in text, text
    assert update_region(prog, dst, src) is None
