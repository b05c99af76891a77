"""Automatic mode: every dim starts symbolic (size 0 too), and what a trace needs to know
about one becomes a guard or a bound of the entry."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, assert_same


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cache_growing_from_empty_compiles_once(backend):
    def step(q, K, V, k, v):
        K = rnp.concatenate([K, k[None]], axis=0)
        V = rnp.concatenate([V, v[None]], axis=0)
        s = K @ q
        return K, V, rnp.exp(s - s.max()) @ V
    f = rj.jit(step, backend=backend)
    rng = np.random.default_rng(0)
    K = V = np.zeros((0, 8))
    for t in range(6):
        q, k, v = rng.standard_normal((3, 8))
        K2, V2, o = f(q, K, V, k, v)
        Kn, Vn = np.concatenate([K, k[None]]), np.concatenate([V, v[None]])
        s = Kn @ q
        assert_same((K2, V2, o), (Kn, Vn, np.exp(s - s.max()) @ Vn), rtol=1e-12, atol=1e-12)
        K, V = K2, V2
    assert f.cache_info().compiles == 1


def test_empty_first_call_serves_later_sizes():
    f = rj.jit(lambda x: (x.sum(), x * 2.0, x.mean()))
    for n in (0, 1, 2, 7, 0):
        x = np.arange(float(n))
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if n == 0 else nullcontext():
            want = (x.sum(), x * 2.0, x.mean())
        assert_same(f(x), want)
    assert f.cache_info().compiles == 1
    with pytest.raises(rj.ShapeError, match="zero-size axis"):
        rj.jit(lambda x: x.max(axis=0))(np.zeros((0, 3)))


def test_slice_sizes_are_guarded_plain_expressions():
    """x[1:-1] is n - 2 long for n >= 2 (a bound of the entry), not max(0, n - 2): shapes
    stay plain so fusion can prove them equal; smaller n get entries of their own."""
    f = rj.jit(lambda x: x[1:-1] * 2.0 + x[2:] - x[:-2])
    text = f.lower(np.zeros(5)).as_text()
    assert "x0 in [2, inf]" in text and "f64[x0 - 2]" in text and "max(" not in text
    for n in (5, 2, 1, 0, 9, 3):
        x = np.arange(float(n)) ** 2
        assert_same(f(x), x[1:-1] * 2.0 + x[2:] - x[:-2])
    assert f.cache_info().compiles == 2          # n >= 2, n == 1 (n == 0: empty results, no compile)


def test_a_first_batch_of_one_broadcast_against_a_literal_one_stays_symbolic():
    """``x + y[None, :]`` with x first (1, n): the literal 1 broadcasts against the batch
    dim whatever it is, so no guard pins it to 1 (it compiled again for batch 3 before)."""
    f = rj.jit(lambda x, y: x + y[None, :])
    y = np.arange(4.0)
    for b in (1, 3, 1, 7):
        x = np.ones((b, 4))
        np.testing.assert_array_equal(f(x, y), x + y[None, :])
    assert f.cache_info().compiles == 1
