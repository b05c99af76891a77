"""``ShapeDtypeStruct``: an abstract array (plain data), what ``jit``'s ``shapes=``,
``lower()``, ``call_tir``'s and ``call_library``'s ``out=`` take."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import dtypes as dt
from .shapes import INF, SymbolicDim, as_dim, symbol


class ShapeDtypeStruct:
    """An abstract array: a shape of ints, symbolic dims or dim names, and a dtype."""

    def __init__(self, shape: Sequence, dtype: Any):
        self.shape = tuple(shape)
        self.dtype = dt.canonical(dtype)
        for ax, d in enumerate(self.shape):
            if not isinstance(d, (int, np.integer, SymbolicDim, str)) or isinstance(d, bool):
                raise TypeError(f"ShapeDtypeStruct dims must be ints, dims or names, got {d!r}")
            if isinstance(d, (int, np.integer)) and d < 0:
                raise ValueError(f"ShapeDtypeStruct axis {ax}: a size must be >= 0, got {d}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dims(self) -> tuple:
        """Internal dims; string entries name dims with default bounds."""
        return tuple(symbol(d) if isinstance(d, str) else as_dim(d) for d in self.shape)

    def bounds(self) -> dict:
        out: dict = {}
        for d in self.shape:
            if isinstance(d, SymbolicDim):
                out.update(d.bounds)
            elif isinstance(d, str):
                out.setdefault(symbol(d), (1, INF))
        return out

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape=({', '.join(str(d) for d in self.shape)}), dtype={self.dtype})"

    def __eq__(self, other):
        return isinstance(other, ShapeDtypeStruct) and self.dtype == other.dtype and \
            self.dims() == other.dims()

    def __hash__(self):
        return hash((self.dims(), self.dtype))
