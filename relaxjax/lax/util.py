"""Helpers shared by shape rules: NumPy broadcasting with proofs, axis normalisation."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core import PRIMITIVES
from ..errors import ShapeError
from ..shapes import Dim, ShapeEnv, dim_str, free_symbols


def bind(name: str, *args, **params):
    """Primitive ``name`` bound by name (the rules of one module reach another's so)."""
    return PRIMITIVES[name].bind(*args, **params)


def broadcast_shapes(env: ShapeEnv, shapes: Sequence[tuple], what: str) -> tuple:
    """NumPy broadcasting: a dim broadcasts only against 1 or an expression proved equal.  In
    automatic mode two dims equal in this trace get a guard (``n == m``); a symbolic dim
    that is 1 here broadcasts, with a guard ``n == 1``."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for ax in range(ndim):
        dims = [s[len(s) - ndim + ax] for s in shapes if len(s) - ndim + ax >= 0]
        res: Dim | None = None
        for d in dims:
            if res is None:
                res = d
                continue
            # a literal 1 broadcasts against anything, the other dim unchanged: no guard (a
            # batch first seen as 1, (b, n) + (1, n), stays symbolic)
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(res, int) and res == 1:
                res = d
                continue
            if not (isinstance(d, int) and isinstance(res, int)) and \
                    env.try_prove("==", res, d) is not True and not _equal_here(env, res, d):
                d, res = one_if_guarded(env, d), one_if_guarded(env, res)
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(res, int) and res == 1:
                res = d
            else:
                res = env.require_eq(res, d, f"{what}: operands cannot be broadcast together on axis "
                                               f"{ax - ndim} ({', '.join(_fmt(s) for s in shapes)})")
        out.append(1 if res is None else res)
    return tuple(out)


def _equal_here(env: ShapeEnv, a: Dim, b: Dim) -> bool:
    """Both symbolic and equal in this (automatic) trace: ``require_eq`` guards them equal,
    keeping them symbolic, rather than specializing both to 1."""
    return (not isinstance(a, int) and not isinstance(b, int) and env.can_guard(a, b) and
            env.evaluate(a) == env.evaluate(b))


def one_if_guarded(env: ShapeEnv, d: Dim) -> Dim:
    """In automatic mode a symbolic dim (``n``, ``n - 1``, ``(n + 1) // 2``) that is 1 in this
    trace broadcasts as NumPy would.  Its symbols are specialized to their values (guards
    ``n == 1``, ``n == 2``), so that every type and later proof sees the 1.  Otherwise ``d``
    unchanged."""
    if isinstance(d, int) or env.mode != "auto":
        return d
    if env.try_prove("==", d, 1) is None and env.can_guard(d, 1) and env.evaluate(d) == 1:
        for s in sorted(free_symbols(d), key=lambda s: s.name):
            env.concrete(s, "broadcasting a derived dim of size 1")
        return env.canon(d)
    return d


def _fmt(shape) -> str:
    return "(" + ", ".join(dim_str(d) for d in shape) + ")"


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{what} must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"{what} {axis} is out of bounds for an array of dimension {ndim}")
    return int(axis) % ndim if ndim else 0


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"duplicate value in 'axis': {axis}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim),)


def same_dtype(*types, what: str):
    d = types[0].dtype
    for t in types[1:]:
        if t.dtype != d:
            raise TypeError(f"{what} requires operands of one dtype, got {', '.join(str(t.dtype) for t in types)}")
    return d


def check_rank(t, ndim, what):
    if t.ndim != ndim:
        raise ShapeError(f"{what}: expected rank {ndim}, got rank {t.ndim} ({t})")
