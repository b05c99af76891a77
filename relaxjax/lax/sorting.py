"""Sorting along the last axis (``relaxjax.numpy`` moves the axis there).  Legalize lowers
both to the library functions ``sort`` and ``argsort`` (``relaxjax.library``'s built-ins:
NumPy's stable sort on the CPU, CuPy's on the GPU)."""
from __future__ import annotations

import numpy as np

from ..core import Primitive
from ..errors import ShapeError
from ..shapes import prod
from . import ad_util as au
from . import batching


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


def _sort_vjp(ct, x, *, out):
    """Each sorted element's cotangent goes back to where it came from: the stable
    argsort (the order ``sort`` took) says where, and one scatter over the flattened rows
    puts it there (row ``r``'s position ``p`` is ``r * n + p``)."""
    shape = tuple(x.type.shape)
    n, rows = shape[-1], prod(shape[:-1])
    perm = au.bind("reshape", argsort.bind(x), new_sizes=(rows, n))
    base = au.bind("iota", shape=(rows, n), dimension=0, dtype=np.dtype("int64"))
    where = au.bind("add", perm, au.bind("mul", base, au.dim_scalar(n, np.int64)))
    flat = (rows * n,)
    g = au.bind("scatter", au.zeros_like(au.bind("reshape", x, new_sizes=flat)),
                au.bind("reshape", where, new_sizes=flat), au.bind("reshape", ct, new_sizes=flat),
                axis=0, mode="add", oob="error")
    return (au.bind("reshape", g, new_sizes=shape),)


sort.vjp = _sort_vjp

sort.batch = batching.trailing(sort)          # along the last axis: the batch leads
argsort.batch = batching.trailing(argsort)
