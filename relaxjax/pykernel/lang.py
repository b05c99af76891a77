"""The kernel language's vocabulary: buffer annotations, ``grid`` and the scalar math names.

These are what a kernel's source refers to; the parser (``parser.py``) recognises them by
identity.  Called from plain Python they behave like their NumPy counterparts, so a kernel's
helpers stay usable outside kernels.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..shapes import SymbolicDim


@dataclass(frozen=True)
class BufferSpec:
    """A kernel parameter's declared shape (dim names or ints) and dtype."""
    shape: tuple
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{dt.short_name(self.dtype)}[{', '.join(str(d) for d in self.shape)}]"


class Buffer:
    """``rj.Buffer[(dims...), dtype]``: the annotation of a kernel parameter.  Dims are names
    (``"n"``: every buffer axis named ``n`` has the same size, bound from the arguments) or
    ints; ``rj.Buffer["n", "float32"]`` is one-dimensional, ``rj.Buffer[(), ...]`` a scalar."""

    def __class_getitem__(cls, item) -> BufferSpec:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("use rj.Buffer[(dims...), dtype], e.g. rj.Buffer[('n', 'm'), 'float32']")
        shape, dtype = item
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)
        dims = []
        for d in shape:
            if isinstance(d, SymbolicDim) and d.expr.is_Symbol:
                d = d.expr.name
            if isinstance(d, (np.integer, int)) and not isinstance(d, bool) and int(d) >= 0:
                dims.append(int(d))
            elif isinstance(d, str) and d.isidentifier():
                dims.append(d)
            else:
                raise TypeError(f"rj.Buffer dims are names or non-negative ints, got {d!r}")
        return BufferSpec(tuple(dims), dt.canonical(dtype))


def grid(*extents):
    """``for i, j in rj.grid(n, m)``: the nested loops ``for i in range(n): for j in range(m)``."""
    return itertools.product(*(range(int(e)) for e in extents))


# dtype casts usable in kernels: rj.float32(v) (they are NumPy's scalar types)
CASTS = {np.dtype(t): t for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                  np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64)}
