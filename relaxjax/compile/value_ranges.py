"""Integer value ranges of a graph function's values, for gathers whose indices it computes.

A gather reads ``x[j]`` with indices ``j`` from data, which NumPy range-checks; a fused
program cannot report a failed check of an index it computes itself, so FuseOps keeps such
a gather apart and the caller checks its index buffer (``host_checks``).  Most computed
indices are in range by construction, though: ``np.clip(k - 1 - np.arange(n), 0, n - 1)``
(the reversed prefix of Levinson-Durbin), ``np.arange(n) // 2``, ``(i + 1) % n``.  This
analysis bounds every integer value from its producers -- ``iota`` and scalar constants,
through add, sub, mul by a constant, neg, max, min, clip, rem, select, convert and the layout
ops that only move elements -- as symbolic ``[lo, hi]`` over the dims; a gather whose
indices provably lie in ``[-n, n)`` needs no check and fuses with their computation.
"""
from __future__ import annotations

import numpy as np
import sympy

from ..ir import Literal
from ..shapes import ShapeEnv, is_symbolic

# ops whose output elements are input elements (ranges pass through unchanged)
_MOVES = frozenset({"reshape", "transpose", "broadcast_to", "slice", "squeeze", "expand_dims",
                    "take", "take_along_axis", "dynamic_slice"})


def _num(v):
    return sympy.Integer(int(v)) if not is_symbolic(v) else v


def _const_range(a: Literal):
    """The range of a literal's values (scalars, dims used as values, small arrays)."""
    v = a.value
    if a.type.dtype.kind not in "iub":
        return None
    if is_symbolic(v) or isinstance(v, int):
        return _num(v), _num(v)
    try:
        arr = np.asarray(v)
        if arr.size == 0:
            return None
        return sympy.Integer(int(arr.min())), sympy.Integer(int(arr.max()))
    except (TypeError, ValueError):
        return None


class ValueRanges:
    """``ranges[var] = (lo, hi)`` (sympy expressions over dims; either may be None: unbounded)
    for the integer values computed by ``bindings`` (in program order) that this analysis
    can bound; ``env`` proves relations between dims."""

    def __init__(self, bindings: list, env: ShapeEnv):
        self.env = env
        self._bindings = bindings
        # computed at the first question: FuseOps and FuseTIR make one per function and per
        # group, and most never gather at indices they compute
        self.ranges: dict | None = None

    def _analyse(self) -> None:
        self.ranges = {}
        for b in self._bindings:
            if b.kind != "primitive" or len(b.outvars) != 1:
                continue
            out = b.outvars[0]
            if out.type.dtype.kind not in "iu":
                continue
            r = self._rule(b.callee.name, b.args, b.params)
            if r is not None and (r[0] is not None or r[1] is not None):
                self.ranges[out] = r

    def of(self, a):
        if isinstance(a, Literal):
            return _const_range(a)
        return self.ranges.get(a)

    def _rule(self, name: str, args: list, params: dict):
        rs = [self.of(a) for a in args]
        if name == "iota":
            return sympy.Integer(0), _num(params["shape"][params["dimension"]]) - 1
        if name == "concatenate" and all(r is not None for r in rs):
            lo = None if any(r[0] is None for r in rs) else sympy.Min(*(r[0] for r in rs))
            hi = None if any(r[1] is None for r in rs) else sympy.Max(*(r[1] for r in rs))
            return lo, hi
        if name in _MOVES or name == "convert":
            return rs[0] if name != "convert" or args[0].type.dtype.kind in "iu" else None
        if name in ("add", "sub", "max", "min") and len(rs) == 2:
            (a_lo, a_hi), (b_lo, b_hi) = (r or (None, None) for r in rs)
            if name == "add":
                return _opt(lambda x, y: x + y, a_lo, b_lo), _opt(lambda x, y: x + y, a_hi, b_hi)
            if name == "sub":
                return _opt(lambda x, y: x - y, a_lo, b_hi), _opt(lambda x, y: x - y, a_hi, b_lo)
            if name == "max":      # at least either operand's lower bound
                lo = _opt(sympy.Max, a_lo, b_lo) if a_lo is not None and b_lo is not None else \
                    (a_lo if a_lo is not None else b_lo)
                return lo, _opt(sympy.Max, a_hi, b_hi)
            hi = _opt(sympy.Min, a_hi, b_hi) if a_hi is not None and b_hi is not None else \
                (a_hi if a_hi is not None else b_hi)
            return _opt(sympy.Min, a_lo, b_lo), hi
        if name == "neg" and rs[0] is not None:
            lo, hi = rs[0]
            return (None if hi is None else -hi), (None if lo is None else -lo)
        if name == "mul" and len(rs) == 2:
            for x, c in ((rs[0], args[1]), (rs[1], args[0])):
                k = _scalar_int(c)
                if x is not None and k is not None:
                    lo, hi = x
                    lo, hi = (None if lo is None else lo * k), (None if hi is None else hi * k)
                    return (lo, hi) if k >= 0 else (hi, lo)
            return None
        if name in ("rem", "floor_div") and len(rs) == 2:
            k = _scalar_dim(args[1])
            if k is None or self.env.try_prove(">", k, 0) is not True:
                return None
            if name == "rem":                   # NumPy's mod takes the divisor's sign
                return sympy.Integer(0), k - 1
            if rs[0] is None:
                return None
            lo, hi = rs[0]
            return (None if lo is None else sympy.floor(lo / k)), (None if hi is None else sympy.floor(hi / k))
        if name == "select" and len(rs) == 3 and rs[1] is not None and rs[2] is not None:
            return _opt(sympy.Min, rs[1][0], rs[2][0]), _opt(sympy.Max, rs[1][1], rs[2][1])
        return None

    def within(self, a, n) -> bool:
        """Whether every value of ``a`` provably lies in ``[-n, n)`` (a valid NumPy index
        into an axis of size ``n``)."""
        if self.ranges is None:
            self._analyse()
        r = self.of(a)
        if r is None or r[0] is None or r[1] is None:
            return False
        lo, hi = r
        return self.env.try_prove(">=", lo, -_num(n)) is True and \
            self.env.try_prove("<", hi, _num(n)) is True


def _opt(f, x, y):
    return None if x is None or y is None else f(x, y)


def _scalar_dim(a):
    """A scalar integer literal (a number or a dim) as a sympy expression, else None."""
    if isinstance(a, Literal) and a.type.ndim == 0 and a.type.dtype.kind in "iu":
        return _num(a.value if is_symbolic(a.value) else int(a.value))
    return None


def _scalar_int(a):
    if isinstance(a, Literal) and a.type.ndim == 0 and a.type.dtype.kind in "iu" and \
            not is_symbolic(a.value):
        return int(a.value)
    return None
