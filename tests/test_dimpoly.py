"""Dim polynomials (relaxjax/dimpoly.py), the fast path of shape proofs and index
comparisons, pinned against SymPy's prover and against evaluation at concrete values."""
import itertools

import numpy as np
import pytest
import sympy
from hypothesis import given, settings, strategies as st

from relaxjax import dimpoly, tir
from relaxjax.dimpoly import decide, floordiv, from_sympy
from relaxjax.shapes import INF, ShapeEnv, eval_dim, symbol

N, M, K = symbol("n"), symbol("m"), symbol("k")
BOUNDS = {N: (1, INF), M: (2, 40), K: (0, 5)}
POINTS = [dict(zip("nmk", v)) for v in itertools.product([1, 2, 3, 7, 12, 60], [2, 5, 40], [0, 1, 5])]


def _leaf():
    return st.sampled_from([N, M, K]) | st.integers(-3, 6).map(sympy.Integer)


def _grow(sub):
    c = st.integers(1, 6).map(sympy.Integer)
    return st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] * t[1]),
        st.tuples(sub, c).map(lambda t: sympy.floor(t[0] / t[1])),
        st.tuples(sub, c).map(lambda t: sympy.Mod(t[0], t[1])),
        st.tuples(sub, st.sampled_from([N, M])).map(lambda t: sympy.floor(t[0] / t[1])),
        st.tuples(sub, sub).map(lambda t: sympy.Max(t[0], t[1])),
    )


dims = st.recursive(_leaf(), _grow, max_leaves=6)


def _values(e):
    return [eval_dim(e, p) for p in POINTS]


@settings(max_examples=200, deadline=None)
@given(dims, dims)
def test_equal_forms_mean_equal_values(a, b):
    """Soundness: whenever two dims get one form, they agree at every point."""
    if from_sympy(a) == from_sympy(b):
        assert _values(a) == _values(b)


polys = st.recursive(_leaf(), lambda s: st.one_of(st.tuples(s, s).map(lambda t: t[0] + t[1]),
                                                  st.tuples(s, s).map(lambda t: t[0] * t[1])),
                     max_leaves=5)


@settings(max_examples=200, deadline=None)
@given(dims)
def test_forms_see_through_floor_and_mod_identities(a):
    """``(a // c) * c + a % c`` and ``(a * c + 1) // c`` reduce to what they equal, with no
    SymPy simplification (built on forms: SymPy rewrites ``Mod(n * (n % 2), 3)`` itself)."""
    fa = from_sympy(a)
    for c in (dimpoly.const(2), dimpoly.const(3), dimpoly.var("n")):
        assert floordiv(fa, c) * c + dimpoly.mod(fa, c) == fa
        assert floordiv(fa * c + 1, c) == fa + floordiv(dimpoly.ONE, c)


@settings(max_examples=100, deadline=None)
@given(polys)
def test_nested_floors_of_a_polynomial_merge(a):
    """``a // 2 // 3`` and ``a // 6`` get one form.  (Not for every ``a``: ``(n % 2) // 6``
    is 0, but seeing that takes the bounds of ``n % 2``, which forms do not use.)"""
    assert from_sympy(sympy.floor(sympy.floor(a / 2) / 3)) == from_sympy(sympy.floor(a / 6))


@settings(max_examples=200, deadline=None)
@given(dims, dims, st.sampled_from(["==", ">="]))
def test_decisions_agree_with_sympy_and_with_values(a, b, op):
    """The fast decision holds at every point inside the bounds and never contradicts the
    SymPy prover (the path it replaced); what a trace decides (``prove``: the fast path,
    then SymPy as the last resort) decides at least what SymPy decides."""
    env = ShapeEnv("explicit", BOUNDS)
    fast = env.try_prove(op, a, b)
    slow = env._prove_sympy(op, a, b)
    if slow is not None and fast is not None:
        assert fast == slow
    if slow is not None:
        assert env.prove(op, a, b) == slow
    if fast is not None:
        rel = (lambda x, y: x == y) if op == "==" else (lambda x, y: x >= y)
        for p in POINTS:
            assert rel(eval_dim(a, p), eval_dim(b, p)) == fast, p


def test_remainders_of_one_numerator_keep_their_order():
    """Merging ``n // 2 // 2`` into ``n // 4`` loses the inner floor, which the proof of
    ``n // 2 // 2 * 2 <= n // 2`` needs: mixed-radix digits of the remainders bring it back."""
    env = ShapeEnv("explicit", {N: (1, INF)})
    half = sympy.floor(N / 2)
    assert env.try_prove("<=", sympy.floor(half / 2) * 2, half) is True
    assert env.try_prove("<", sympy.floor(half / 2) * 2, half) is None
    assert env.try_prove(">=", sympy.floor(N / 4), sympy.floor(N / 2)) is None


def test_known_zero_remainder_makes_the_floor_exact():
    env = ShapeEnv("explicit", {N: (1, INF)})
    assert env.try_prove("==", sympy.floor(N / 4) * 4, N) is None
    env.zero_mods.add(sympy.Mod(N, 4))
    env._decided.clear()
    assert env.try_prove("==", sympy.floor(N / 4) * 4, N) is True
    assert env.try_prove("==", sympy.floor(N / 2) * 2, N) is None       # not known from n % 4


def test_products_of_dims_by_shifting_to_lower_bounds():
    assert decide(">=", from_sympy(N * M - N), lambda s: (1, INF)) is True
    assert decide(">=", from_sympy(N * M - 2 * N), lambda s: (1, INF)) is None
    assert decide(">=", from_sympy(-N * M - 1), lambda s: (1, INF)) is False


def test_floor_by_a_polynomial_divides_out_its_multiples():
    q = from_sympy(sympy.floor(N / 4) - 3)
    i, j = dimpoly.var("i"), dimpoly.var("j")
    assert floordiv(i * q + j, q) == i + floordiv(j, q)
    assert dimpoly.mod(i * q + j, q) == dimpoly.mod(j, q)


def test_division_by_zero_is_unsupported():
    with pytest.raises(dimpoly.Unsupported):
        floordiv(dimpoly.var("n"), dimpoly.const(0))


def test_index_forms_of_loop_expressions():
    """``reindex`` writes ``(i * n + j) // n``: equal to ``i`` only given ``j < n``, which a
    form does not know, so it stays different; the identities it does know hold."""
    i, j, n = tir.Var("i"), tir.Var("j"), tir.Var("n")
    flat = i * n + j
    assert tir.index_poly(flat // n * n + flat % n) == tir.index_poly(flat)
    assert tir.index_poly(flat // n) != tir.index_poly(i)
    assert tir.index_poly((i * 4 + j) // 2 // 2) == tir.index_poly(i + j // 4)
    with pytest.raises(dimpoly.Unsupported):
        tir.index_poly(tir.Const(1.5, np.dtype("float64")))
