"""Symbolic dims: printing, arithmetic, proofs, bounds, guards."""
import math

import numpy as np
import pytest
import sympy
from hypothesis import given, strategies as st

import relaxjax as rj
from relaxjax.shapes import as_dim, ShapeEnv, compile_dims, dim_str, floordiv, symbol, INF

n, k, m = rj.dims("n k m")


@pytest.mark.parametrize("expr, text", [
    (lambda: n * 4, "n * 4"),
    (lambda: n // 2, "n // 2"),
    (lambda: (n + 7) // 8 * 8, "(n + 7) // 8 * 8"),
    (lambda: n * k, "k * n"),
    (lambda: n + m, "m + n"),
    (lambda: n - 1, "n - 1"),
    (lambda: 2 - n, "2 - n"),
    (lambda: n % 3, "n % 3"),
    (lambda: (n * 4) // 4, "n"),
    (lambda: k * (n + 1) - n * k, "k"),
])
def test_printing_is_simplified(expr, text):
    assert str(expr()) == text


def test_dim_arithmetic_with_ints_gives_ints_when_constant():
    assert (n - n) == 0 and isinstance(n - n, int)
    assert isinstance(n * 0, int)


@given(st.integers(1, 10_000), st.integers(1, 50), st.integers(1, 50))
def test_compiled_expressions_match_python_semantics(nv, kv, c):
    exprs = [as_dim(e) for e in (n * 4, n // c, (n + 7) // 8 * 8, n % c, n * k + 3)]
    f = compile_dims(exprs, ["n", "k"])
    assert f(nv, kv) == (nv * 4, nv // c, (nv + 7) // 8 * 8, nv % c, nv * kv + 3)


def test_proofs_from_algebra_and_bounds():
    e = ShapeEnv()
    N, K, M = symbol("n"), symbol("k"), symbol("m")
    assert e.try_prove("==", N * 4 // 4, N) is True
    assert e.try_prove(">=", N * K, N) is True          # needs k >= 1
    assert e.try_prove(">", N + 1, N) is True
    assert e.try_prove("==", N, N + 1) is False
    assert e.try_prove("==", N, M) is None               # undecidable
    e.declare(M, 5, 10)
    assert e.try_prove(">=", M, 5) is True and e.try_prove(">", M, 10) is False
    assert e.try_prove("<", M, 3) is False


def test_bounds_of_floors_decide_comparisons():
    # found by the fuzzer: x[..., :n // 2][..., 0] with n >= 2 needs 0 < n // 2
    e = ShapeEnv()
    N = symbol("n")
    e.declare(N, 2, 16)
    assert e.try_prove("<", 0, floordiv(N, 2)) is True
    assert e.try_prove("<=", floordiv(N, 2), 8) is True and e.try_prove(">", floordiv(N, 2), 8) is False
    assert e.try_prove(">=", floordiv(N, 3), 1) is None   # n = 2 gives 0
    assert e.try_prove("==", floordiv(N, 2) * 2, N) is None


def test_explicit_mode_raises_inconclusive_with_a_fix():
    e = ShapeEnv("explicit")
    with pytest.raises(rj.InconclusiveDimensionError, match=r"matmul.*n == m.*Fix"):
        e.require_eq(symbol("n"), symbol("m"), "matmul")


def test_automatic_mode_records_guards_and_unifies():
    e = ShapeEnv("auto")
    a, b = symbol("a0"), symbol("b0")
    e.declare(a, 2, INF, value=6)
    e.declare(b, 2, INF, value=6)
    assert e.require_eq(a, b, "add") == a
    assert e.canon(b) == a                   # b is replaced by a from now on
    assert e.decide(">", a, 5) is True
    assert [str(g) for g in e.final_guards()] == ["a0 > 5"]


def test_automatic_mode_unequal_values_are_shape_errors():
    e = ShapeEnv("auto")
    a, b = symbol("a0"), symbol("b0")
    e.declare(a, 2, INF, value=6)
    e.declare(b, 2, INF, value=7)
    with pytest.raises(rj.ShapeError, match="a0=6"):
        e.require_eq(a, b, "add")


def test_dim_bounds_and_names_are_validated():
    with pytest.raises(ValueError):
        rj.dim("not a name")
    with pytest.raises(ValueError):
        rj.dim("q", min=5, max=2)
    b = rj.dim("b", min=1, max=4096)
    assert b.bounds[b.expr] == (1, 4096)


def test_comparisons_outside_a_trace():
    assert (n == n) and not (n == m)
    assert n + 1 > n
    with pytest.raises(rj.InconclusiveDimensionError):
        bool(n > 5)
    with pytest.raises(rj.InconclusiveDimensionError):
        int(n)


@given(st.sampled_from([1, 2, 3, 7, 31, 257]), st.sampled_from([1, 2, 5, 13, 64, 1009]),
       st.integers(1, 4))
def test_floordiv_by_a_polynomial_factor_is_the_exact_quotient(a, b, c):
    """(c * (n0 + 1) * (n1 + 1)) // (n0 + 1) is c * (n1 + 1) itself, so reshaping
    (n0 + 1, c, n1 + 1) into (n0 + 1, -1) is provable in explicit mode (the fuzzer found
    it raising InconclusiveDimensionError)."""
    n0, n1 = rj.dims("n0 n1")
    q = floordiv(c * (n0.expr + 1) * (n1.expr + 1), n0.expr + 1)
    assert sympy.expand(q - c * (n1.expr + 1)) == 0
    assert floordiv(n0.expr * 3 + 1, 3) == n0.expr          # not exact: still a floor
    assert floordiv(n0.expr, 2) == sympy.floor(n0.expr / 2)
    sig = (rj.ShapeDtypeStruct((n0 + 1, c, n1 + 1), "float64"),)
    f = rj.jit(lambda x: x.reshape(x.shape[0], -1), shapes=sig)
    x = np.arange((a + 1) * c * (b + 1), dtype=np.float64).reshape(a + 1, c, b + 1)
    np.testing.assert_array_equal(f(x), x.reshape(a + 1, -1))
    assert f.cache_info().compiles == 1
