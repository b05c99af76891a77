"""A 20 000-op straight-line program traces, compiles and runs: nothing in tracing, the
passes, the memory planner, code generation, the persistent cache (pickling) or the printer
recurses once per op (a RecursionError at some size), and compile time stays linear enough
to be tested (about 5 s per program here)."""
from __future__ import annotations

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp

OPS = 20_000


def _chain(x, xp, mixed: bool):
    """Steps alternating ``y * 0.9 + 0.1`` (2 ops) and ``tanh(y * 0.5 + 0.25)`` (3 ops): 8000
    steps are 20 000 ops.  ``mixed`` replaces every 100th step by a row sum broadcast back
    (``y - y.sum(-1, keepdims=True) * 0.01``: a reduction between fused runs)."""
    y = x
    for k in range(OPS * 2 // 5):
        if mixed and k % 100 == 99:
            y = y - y.sum(axis=-1, keepdims=True) * 0.01
        elif k % 2:
            y = xp.tanh(y * 0.5 + 0.25)
        else:
            y = y * 0.9 + 0.1
    return y


@pytest.mark.parametrize("mixed", [False, True], ids=["elementwise", "with-reductions"])
def test_20000_op_program(mixed):
    f = rj.jit(lambda x: _chain(x, rnp, mixed))
    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    lowered = f.lower(x)
    n_ops = len(lowered.module.main.bindings)
    assert n_ops >= OPS and (mixed or n_ops == OPS)
    compiled = lowered.compile()
    expected = _chain(x.astype(np.float64), np, mixed)
    np.testing.assert_allclose(compiled(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f(x[:2]), expected[:2], rtol=1e-5, atol=1e-5)   # the same entry
    assert f.cache_info().compiles == 1
    # the printers: the traced program, the optimized graph (fused programs), the loops
    assert str(lowered).count("\n") > OPS
    optimized = compiled.as_text("optimized")
    assert optimized.count("call_tir") > OPS // 64      # (fused programs chain at most 64 ops)
    assert "for " in compiled.as_text("loops")
