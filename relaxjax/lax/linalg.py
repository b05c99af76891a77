"""matmul with NumPy semantics for operands of rank >= 2 (batch dims broadcast)."""
from __future__ import annotations

import numpy as np

from ..core import Primitive
from ..shapes import dim_str
from ..errors import ShapeError
from .complex_parts import Parts
from .elementwise import add, sub
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


def _matmul_complex(a, b):
    """Four real matmuls (a real operand, as after promotion of a real matrix, is Parts
    too)."""
    def mm(x, y):
        return matmul.bind(x, y)
    re = sub.bind(mm(a.re, b.re), mm(a.im, b.im))
    im = add.bind(mm(a.re, b.im), mm(a.im, b.re))
    return Parts(re, im)


matmul = Primitive("matmul", shape_rule=_matmul_shape, dtype_rule=_matmul_dtype,
                   impl=lambda a, b: np.matmul(a, b), kind="output_fusable",
                   complex_rule=_matmul_complex)
