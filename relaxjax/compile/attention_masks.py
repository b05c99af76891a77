"""Causal and key-length masks as users write them, recognized by what they compute.

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

A key-length mask keeps the first ``L`` keys of every row: ``arange(S) <= pos`` (a decode
step over a preallocated cache), ``arange(S)[None, :] < lengths[:, None]`` (padding).
``key_prefix`` finds it structurally: a comparison of the key index (an index-only value,
checked by evaluating it as above) with a bound that does not vary along the query and key
axes, through reshapes and broadcasts; the bound is any value (a parameter), so that part
is a match, not an evaluation.
"""
from __future__ import annotations

from dataclasses import dataclass

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


def _graph_symbols(defs: dict, v) -> set:
    """Every dim the graph making ``v`` sizes itself by."""
    symbols: set = set()
    seen, stack = set(), [v]
    while stack:
        v = stack.pop()
        if not isinstance(v, Var) or v in seen:
            continue
        seen.add(v)
        symbols |= v.type.free_symbols()
        b = defs.get(v)
        if b is not None:
            stack += [a for a in b.args if isinstance(a, Var)]
    return symbols


def causal_keep(defs: dict, mask, rows, cols, kind: str) -> bool:
    """Whether ``mask`` (a value of the function, broadcast against scores whose last two
    axes are ``rows`` x ``cols`` dims) keeps exactly key ``j <= i`` of query ``i``:
    ``kind`` "keep" (a boolean, true where kept), "drop" (true where masked) or "add" (a
    number added to the scores: 0 where kept, -1e8 or less where masked)."""
    symbols: set = _graph_symbols(defs, mask)
    for d in (rows, cols):
        if is_symbolic(d):
            symbols |= d.free_symbols
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


@dataclass(frozen=True)
class KeyPrefix:
    """A mask keeping key ``j`` where ``j < bound`` (``inclusive``: ``j <= bound``);
    ``shape`` is the bound's layout against the scores (their rank, 1 on the last two
    axes), ``fill`` the masked scores' constant."""
    bound: object
    inclusive: bool
    shape: tuple
    fill: float


# (name, key index first) -> how key j relates to the bound
_RELATION = {("lt", True): "<", ("le", True): "<=", ("gt", True): ">", ("ge", True): ">=",
             ("lt", False): ">", ("le", False): ">=", ("gt", False): "<", ("ge", False): "<="}
# kind -> relation -> inclusive
_KEEPS = {"keep": {"<": False, "<=": True}, "drop": {">": True, ">=": False}}


def is_one(d) -> bool:
    return not is_symbolic(d) and d == 1


def _reshape_axes(src: tuple, dst: tuple) -> dict | None:
    """Where each axis of ``src`` that is not 1 lands in ``dst``, when the reshape only adds
    or drops axes of size 1; else None."""
    s = [i for i, d in enumerate(src) if not is_one(d)]
    t = [i for i, d in enumerate(dst) if not is_one(d)]
    if len(s) != len(t) or any(src[i] != dst[j] for i, j in zip(s, t)):
        return None
    return dict(zip(s, t))


def _key_index(defs: dict, j, axis: int, rank: int) -> bool:
    """Whether ``j`` (integer, index-only), right-aligned to ``rank`` axes, is ``arange``
    along ``axis`` and of size 1 elsewhere, at a few sizes of its dims."""
    if not isinstance(j, Var) or j.type.dtype.kind not in "iu":
        return False
    pad = rank - j.type.ndim
    if pad < 0 or axis < pad:
        return False
    symbols = sorted(_graph_symbols(defs, j), key=lambda s: s.name)
    for size in (1, 3, 8):
        values = {s: size + i for i, s in enumerate(symbols)}
        try:
            got = _evaluate(defs, j, values, {})
        except Exception:
            return False
        want = np.arange(got.shape[axis - pad]).reshape([-1 if i == axis - pad else 1 for i in range(got.ndim)])
        if got.shape != want.shape or not np.array_equal(got, want):
            return False
    return True


def key_prefix(defs: dict, mask, shape: tuple, kind: str, fill: float) -> KeyPrefix | None:
    """``mask`` (a boolean broadcast against scores of ``shape``; ``kind`` "keep" or "drop"
    as for ``causal_keep``) as a key-length mask, or None."""
    n = len(shape)
    chain, m = [], mask
    while isinstance(m, Var):              # reshapes adding or dropping 1s, broadcasts
        b = defs.get(m)
        if b is None or b.kind != "primitive" or b.callee.name not in ("reshape", "broadcast_to"):
            break
        chain.append(b)
        m = b.args[0]
    b = defs.get(m) if isinstance(m, Var) else None
    if b is None or b.kind != "primitive" or b.callee.name not in ("lt", "le", "gt", "ge"):
        return None
    out = tuple(m.type.shape)
    at = {c: c for c, d in enumerate(out) if not is_one(d)}   # the comparison's axes -> the mask's
    for w in reversed(chain):
        src, dst = tuple(w.args[0].type.shape), tuple(w.outvars[0].type.shape)
        if w.callee.name == "reshape":
            moved = _reshape_axes(src, dst)
            if moved is None:
                return None
            at = {c: moved[a] for c, a in at.items()}
        else:
            at = {c: a + len(dst) - len(src) for c, a in at.items()}
    if mask.type.ndim > n:
        return None
    at = {c: a + n - mask.type.ndim for c, a in at.items()}
    keys = [c for c, a in at.items() if a == n - 1]
    if len(keys) != 1:
        return None
    for first, (j, bound) in ((True, b.args), (False, b.args[::-1])):
        inclusive = _KEEPS[kind].get(_RELATION[(b.callee.name, first)])
        if inclusive is None or not _key_index(defs, j, keys[0], len(out)):
            continue
        if bound.type.dtype not in (np.dtype("int32"), np.dtype("int64")) or bound.type.ndim > len(out):
            return None
        layout = [1] * n
        pad = len(out) - bound.type.ndim
        for i, d in enumerate(bound.type.shape):
            if not is_one(d):
                if at.get(i + pad, n - 2) >= n - 2:
                    return None        # the bound varies along the queries or the keys
                layout[at[i + pad]] = d
        return KeyPrefix(bound, inclusive, tuple(layout), fill)
    return None
