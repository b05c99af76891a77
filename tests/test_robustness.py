"""Issue 16, the front end: nothing wrong, nothing lost, nothing crashes.

Results never alias what the caller or the cache holds, static arguments are keyed by type
and bits, captured arrays are snapshots, generated code cannot collide with user dim names,
integer powers check their exponents, and bad arguments get precise errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, SMALL_SIZES, assert_same

W_GLOBAL = np.arange(3.0)


# -- 1. results are new arrays --------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_front_constant_result_is_not_shared(backend):
    f = rj.jit(lambda x: (x + 1.0, rnp.zeros(3)), backend=backend)
    x = np.arange(3.0)
    f(x)[1][:] = 7.0
    assert_same(f(x)[1], np.zeros(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_front_results_never_alias_inputs_or_globals(backend):
    x = np.arange(6.0)
    ident = rj.jit(lambda x: x, backend=backend)
    y = ident(x)
    assert y is not x and not np.shares_memory(y, x)
    g = rj.jit(lambda x: (x + 1, W_GLOBAL), backend=backend)
    out = g(x)[1]
    assert not np.shares_memory(out, W_GLOBAL)
    out[:] = -1
    assert_same(W_GLOBAL, np.arange(3.0))
    v = rj.jit(lambda x: x.reshape(2, 3), backend=backend)(x)     # a view of the input
    assert not np.shares_memory(v, x)
    z = rj.lax.fori_loop(0, 0, lambda i, c: c * 2.0, x)          # zero trips: the init
    zz = rj.jit(lambda x, n: rj.lax.fori_loop(0, n, lambda i, c: c * 2.0, x), backend=backend)(x, 0)
    assert_same(zz, z) and not np.shares_memory(zz, x)


# -- 2. static arguments keyed by type and bits -----------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_front_static_args_keyed_by_type_and_bits(backend):
    x = np.arange(3.0)
    div = rj.jit(lambda x, s: x / s, static_argnums=1, backend=backend)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_same(div(x, 0.0), x / 0.0)
        assert_same(div(x, -0.0), x / -0.0)
    mul = rj.jit(lambda x, s: x * s, static_argnums=1, backend=backend)
    xi = np.arange(3)
    for s in (2, 2.0, np.float64(2), np.int32(2), (2,), (2.0,)):
        want = xi * (s[0] if isinstance(s, tuple) else s)
        assert_same(mul(xi, s[0] if isinstance(s, tuple) else s), want)
    nan = rj.jit(lambda x, s: x + s, static_argnums=1, backend=backend)
    for _ in range(3):
        assert_same(nan(x, float("nan")), x + np.nan)
    assert nan.cache_info().compiles == 1


# -- 3. captured arrays are constants of the trace ---------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_front_captured_arrays_are_snapshots(backend):
    w = np.zeros(3)
    f = rj.jit(lambda x: (x + w, x + w * 2.0, w), backend=backend)
    x = np.arange(3.0)
    first = f(x)
    w[:] = 100.0
    assert_same(f(x), first)
    assert_same(first, (x, x, np.zeros(3)))
