"""Sorting along the last axis (``relaxjax.numpy`` moves the axis there).  Legalize lowers
both to the library functions ``sort`` and ``argsort`` (``relaxjax.library``'s built-ins:
NumPy's stable sort on the CPU, CuPy's on the GPU)."""
from __future__ import annotations

import numpy as np

from ..core import Primitive
from ..errors import ShapeError


def _last_axis(name):
    def shape_rule(env, x):
        if x.ndim == 0:
            raise ShapeError(f"{name}: needs at least one axis, got a 0-d array")
        return x.shape
    return shape_rule


sort = Primitive("sort", shape_rule=_last_axis("sort"), dtype_rule=lambda x: x.dtype,
                 impl=lambda x: np.sort(x, axis=-1, kind="stable"), kind="opaque")
argsort = Primitive("argsort", shape_rule=_last_axis("argsort"),
                    dtype_rule=lambda x: np.dtype("int64"),
                    impl=lambda x: np.argsort(x, axis=-1, kind="stable").astype(np.int64),
                    kind="opaque")
