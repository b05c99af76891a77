"""matmul with NumPy semantics for operands of rank >= 2 (batch dims broadcast)."""
from __future__ import annotations

import numpy as np

from ..core import Primitive
from ..shapes import dim_str
from ..errors import ShapeError
from .util import broadcast_shapes, same_dtype


def _matmul_shape(env, a, b):
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"matmul primitive needs rank >= 2 operands, got {a} and {b}")
    env.require_eq(a.shape[-1], b.shape[-2],
                   f"matmul {a} @ {b}: contraction dims differ ({dim_str(a.shape[-1])} vs {dim_str(b.shape[-2])})")
    batch = broadcast_shapes(env, [a.shape[:-2], b.shape[:-2]], "matmul batch dims")
    return batch + (a.shape[-2], b.shape[-1])


def _matmul_dtype(a, b):
    d = same_dtype(a, b, what="matmul")
    if d == np.dtype(bool):
        raise TypeError("matmul of bool arrays is not supported; cast to an integer dtype first")
    return d


matmul = Primitive("matmul", shape_rule=_matmul_shape, dtype_rule=_matmul_dtype,
                   impl=lambda a, b: np.matmul(a, b), kind="output_fusable")
