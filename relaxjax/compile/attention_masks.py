"""Causal masks as users write them, recognized by what they compute.

A causal mask is spelled many ways -- ``tri(n, dtype=bool)``, ``tril(ones((n, n))) == 0``,
``arange(n)[:, None] >= arange(n)[None, :]``, ``triu(full((n, n), -inf), k=1)`` added to the
scores -- and each traces to a different small graph of ``iota``, comparisons and selects.
Rather than match every spelling, ``causal_keep`` evaluates the mask's graph with NumPy at a
few sizes and compares it with the causal pattern (key ``j <= i`` for query ``i``).

That is a proof, not a guess, because of what the graph may hold: only index arrays
(``iota``), layout ops, comparisons, logic, selects and arithmetic with numeric constants --
no parameter of the function and no dim used as a value.  Every such mask is a boolean
combination of half-planes ``a*i + b*j + c >= 0`` with constant ``a, b, c``, which sizes 1..9
in both axes pin down.
"""
from __future__ import annotations

import numpy as np
import sympy

from ..ir import Literal, Var
from ..shapes import is_symbolic

# the ops a mask's graph may use (all elementwise on index arrays, or layout)
_SHAPE_ONLY = frozenset({"iota", "broadcast_to", "reshape", "transpose", "convert", "eq", "ne", "lt", "le",
                         "gt", "ge", "and", "or", "not", "xor", "select", "add", "sub", "mul", "neg"})
_SIZES = [(1, 1), (2, 2), (3, 3), (5, 5), (8, 8), (9, 9), (1, 4), (4, 1), (3, 7), (7, 3), (2, 9), (9, 2)]


class _NotShapeOnly(Exception):
    pass


def _concrete(p, values: dict):
    if isinstance(p, (tuple, list)):
        return type(p)(_concrete(x, values) for x in p)
    if isinstance(p, sympy.Basic):
        return int(p.xreplace(values))
    return p


def _evaluate(defs: dict, v, values: dict, memo: dict) -> np.ndarray:
    if isinstance(v, Literal):
        if is_symbolic(v.value):
            raise _NotShapeOnly
        return np.asarray(v.value, v.type.dtype)
    if v in memo:
        return memo[v]
    b = defs.get(v)
    if b is None or b.kind != "primitive" or b.callee.name not in _SHAPE_ONLY:
        raise _NotShapeOnly
    args = [_evaluate(defs, a, values, memo) for a in b.args]
    out = b.callee.impl(*args, **{k: _concrete(p, values) for k, p in b.params.items()})
    memo[v] = out = np.asarray(out)
    return out


def causal_keep(defs: dict, mask, rows, cols, kind: str) -> bool:
    """Whether ``mask`` (a value of the function, broadcast against scores whose last two
    axes are ``rows`` x ``cols`` dims) keeps exactly key ``j <= i`` of query ``i``:
    ``kind`` "keep" (a boolean, true where kept), "drop" (true where masked) or "add" (a
    number added to the scores: 0 where kept, -1e8 or less where masked)."""
    symbols: set = set()
    for d in (rows, cols):
        if is_symbolic(d):
            symbols |= d.free_symbols
    seen, stack = set(), [mask]
    while stack:                      # every dim the mask's graph sizes itself by
        v = stack.pop()
        if not isinstance(v, Var) or v in seen:
            continue
        seen.add(v)
        symbols |= v.type.free_symbols()
        b = defs.get(v)
        if b is not None:
            stack += [a for a in b.args if isinstance(a, Var)]
    symbols = sorted(symbols, key=lambda s: s.name)
    rng = np.random.default_rng(0)
    for r, c in _SIZES:
        # the rows' and columns' dims at these sizes where they are plain dims; any other
        # dim at a size of its own
        values = {s: int(rng.integers(1, 10)) for s in symbols}
        if isinstance(rows, sympy.Symbol):
            values[rows] = r
        if isinstance(cols, sympy.Symbol) and cols is not rows:
            values[cols] = c
        try:
            m = _evaluate(defs, mask, values, {})
        except Exception:             # not shape-only, or an op refusing these sizes: not recognized
            return False
        n_rows, n_cols = _concrete(rows, values), _concrete(cols, values)
        if m.ndim > 2:                # broadcast over batch and heads: one mask for all
            m = m.reshape((-1,) + m.shape[-2:])
            if not (m == m[:1]).all():
                return False
            m = m[0]
        try:
            m = np.broadcast_to(m.reshape(m.shape if m.ndim == 2 else (1, -1)), (n_rows, n_cols))
        except ValueError:
            return False
        keep = np.tri(n_rows, n_cols, dtype=bool)
        if kind == "keep":
            ok = m.dtype == bool and np.array_equal(m, keep)
        elif kind == "drop":
            ok = m.dtype == bool and np.array_equal(m, ~keep)
        else:
            ok = m.dtype.kind == "f" and (m[keep] == 0).all() and (m[~keep] <= -1e8).all()
        if not ok:
            return False
    return True

