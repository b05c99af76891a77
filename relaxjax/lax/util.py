"""Helpers shared by shape rules: NumPy broadcasting with proofs, axis normalisation."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..shapes import Dim, ShapeEnv, dim_str


def broadcast_shapes(env: ShapeEnv, shapes: Sequence[tuple], what: str) -> tuple:
    """NumPy broadcasting: a dim broadcasts only against 1 or an expression proved equal."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for ax in range(ndim):
        dims = [s[len(s) - ndim + ax] for s in shapes if len(s) - ndim + ax >= 0]
        res: Dim = 1
        for d in dims:
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(res, int) and res == 1:
                res = d
            else:
                res = env.require_eq(res, d, f"{what}: operands cannot be broadcast together on axis "
                                               f"{ax - ndim} ({', '.join(_fmt(s) for s in shapes)})")
        out.append(res)
    return tuple(out)


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
