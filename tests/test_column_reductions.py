"""Reductions over a leading axis on the LLVM backend (``backends/llvm/column_reductions``):
blocks of columns share one pass over the rows.  Results against NumPy over
hypothesis-drawn shapes around the block width (1, 15, 16, 17, primes), fused with
elementwise outputs and epilogues; the columns of whole blocks sum their rows in order (bit
for bit the sequential float32 sum); the rewrite applies where it should and only there."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends.llvm.column_reductions import WIDTH, block_column_reductions
from relaxjax.tir import PrimFunc

from helpers import BACKENDS

COLS = st.one_of(st.sampled_from([1, 2, 15, 16, 17, 31, 32, 33, 47, 97]), st.integers(1, 300))
ROWS = st.one_of(st.sampled_from([1, 2, 3, 16, 17, 64]), st.integers(1, 200))


@given(n=ROWS, m=COLS, seed=st.integers(0, 99))
@settings(max_examples=30, deadline=None)
def test_column_sum_is_the_sequential_sum(n, m, seed):
    x = np.random.default_rng(seed).standard_normal((n, m)).astype(np.float32)
    acc = np.zeros(m, np.float32)
    for r in range(n):                      # each column's rows in order, rounded every step
        acc += x[r]
    got = rj.jit(lambda x: x.sum(axis=0))(x)
    full = m // WIDTH * WIDTH               # columns of whole blocks: in order, bit for bit
    np.testing.assert_array_equal(got[:full], acc[:full])
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5 * n)


@given(n=ROWS, m=COLS, seed=st.integers(0, 99))
@settings(max_examples=30, deadline=None)
def test_fused_statistics_and_elementwise_outputs(n, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m))
    b = rng.standard_normal(m)

    def f(x, b):
        y = np.tanh(x * 2.0) + b
        return b - 0.1 * np.sum(y * x, axis=0), np.max(y, axis=0), y * 3.0, np.mean(x * x, axis=0)

    def f_np(x, b):
        y = np.tanh(x * 2.0) + b
        return b - 0.1 * np.sum(y * x, axis=0), np.max(y, axis=0), y * 3.0, np.mean(x * x, axis=0)
    for backend in BACKENDS:
        for g, w in zip(rj.jit(f, backend=backend)(x, b), f_np(x, b)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_three_dimensional_and_integer_reductions():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7, 37)).astype(np.float32)
    i = rng.integers(-50, 50, (9, 35)).astype(np.int32)
    f = rj.jit(lambda x, i: (x.sum(axis=1), x.sum(axis=0), i.sum(axis=0), i.min(axis=0)))
    for g, w in zip(f(x, i), (x.sum(axis=1), x.sum(axis=0), i.sum(axis=0), i.min(axis=0))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _programs(fn, *args):
    """The loop-level programs of ``fn``'s lowered module."""
    exe = rj.jit(fn, backend="llvm").lower(*args).compile()._entry.executable
    return [f for f in exe.module.functions.values() if isinstance(f, PrimFunc)]


def test_the_rewrite_applies_to_column_reductions_only():
    x = np.ones((64, 40), np.float32)
    col = [block_column_reductions(p) for p in _programs(lambda x: x.sum(axis=0), x)]
    assert any(f"for i0b in range" in str(p) for p in col), [str(p) for p in col]
    assert any(f"acc_{WIDTH - 1}" in str(p) for p in col)
    for fn in (lambda x: x.sum(axis=1), lambda x: x * 2.0 + 1.0, lambda x: x.sum()):
        for p in _programs(fn, x):
            assert block_column_reductions(p) is p, str(p)
