"""Diagonals, traces, rolls and covariances: NumPy functions built from gathers, slices,
reductions and products (no primitives of their own)."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..lax.util import normalize_axis
from ..shapes import dmax, dmin, wrap_dim
from ._base import arr, cast, dtype_of, shape
from ._indexing import take
from ._linalg import matmul
from ._reductions import mean, sum as rsum
from ._shape_ops import atleast_2d, concatenate, moveaxis, reshape, squeeze, swapaxes
from ._ufuncs import (add, clip, equal, multiply, remainder, sqrt, subtract, true_divide,
                      where_values)


def _iota(n, dtype=np.int64):
    return lax.iota.bind(shape=(n,), dimension=0, dtype=np.dtype(dtype))


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1):
    """``numpy.diagonal``: the diagonal's elements on a new last axis (a gather from the two
    axes flattened: element ``i`` at ``i * (cols + 1) + offset``)."""
    a = arr(a)
    nd = len(shape(a))
    if nd < 2:
        raise ValueError("diagonal requires an array of at least two dimensions")
    ax1, ax2 = normalize_axis(axis1, nd), normalize_axis(axis2, nd)
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    *lead, rows, cols = shape(a)
    k = int(offset)
    length = dmax(dmin(rows, cols - k) if k >= 0 else dmin(rows + k, cols), 0)
    start = k if k >= 0 else -k * cols
    flat = reshape(a, (*lead, wrap_dim(rows * cols)))
    idx = add(multiply(_iota(length), wrap_dim(cols + 1)), wrap_dim(start))
    return take(flat, idx, axis=-1)


def trace(a, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None):
    """``numpy.trace`` (ints sum in int64, like NumPy)."""
    return rsum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diag(v, k: int = 0):
    """``numpy.diag``: the ``k``-th diagonal of a 2-D array, or a 2-D array with a 1-D one
    on its ``k``-th diagonal."""
    v = arr(v)
    nd = len(shape(v))
    if nd == 2:
        return diagonal(v, k)
    if nd != 1:
        raise ValueError("diag: input must be 1- or 2-d")
    n = shape(v)[0]
    size = n + abs(int(k))
    i = reshape(_iota(size), (wrap_dim(size), 1))
    j = reshape(_iota(size), (1, wrap_dim(size)))
    on = equal(subtract(j, i), int(k))
    # the element of v on row i (rows off the diagonal read a clamped index, then masked)
    src = clip(subtract(i, max(-int(k), 0)), 0, wrap_dim(dmax(n - 1, 0)))
    vals = take(v, reshape(src, (wrap_dim(size),)), axis=0)
    return where_values(on, reshape(vals, (size, 1)), cast(0, dtype_of(v)))


def roll(a, shift, axis=None):
    """``numpy.roll`` with int shifts: ``out[(i + shift) % n] = a[i]`` along each axis (a
    gather, so symbolic sizes need no proof about the shift)."""
    a = arr(a)
    if axis is None:
        return reshape(roll(reshape(a, (-1,)), shift, 0), shape(a))
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = tuple(shifts) * len(axes)
    if len(shifts) != len(axes):
        raise ValueError("roll: shift and axis must have the same length")
    for s, ax in zip(shifts, axes):
        ax = normalize_axis(ax, len(shape(a)))
        n = shape(a)[ax]
        if isinstance(n, int) and n == 0:
            continue
        src = remainder(subtract(_iota(n), int(s)), wrap_dim(n))    # NumPy's mod: in [0, n)
        a = take(a, src, axis=ax)
    return a


def cov(m, y=None, rowvar: bool = True, bias: bool = False, ddof=None):
    """``numpy.cov``: rows are variables (``rowvar``), columns observations; float64 unless
    the input is float64 already (as NumPy: ``result_type(m, float64)``)."""
    x = atleast_2d(arr(m))
    if len(shape(arr(m))) > 2:
        raise ValueError("m has more than 2 dimensions")
    out_dt = dt.result_type(dtype_of(x), np.dtype("float64"))
    if not rowvar and len(shape(arr(m))) != 1:
        x = swapaxes(x, 0, 1)
    if y is not None:
        yy = atleast_2d(arr(y))
        if not rowvar and len(shape(arr(y))) != 1:
            yy = swapaxes(yy, 0, 1)
        x = concatenate([cast(x, out_dt), cast(yy, out_dt)], axis=0)
    x = cast(x, out_dt)
    if ddof is None:
        ddof = 0 if bias else 1
    n_obs = shape(x)[1]
    centered = subtract(x, mean(x, axis=1, keepdims=True))
    c = matmul(centered, swapaxes(centered, 0, 1))
    denom = cast(wrap_dim(dmax(n_obs - int(ddof), 0)), out_dt)
    c = true_divide(c, denom)
    return squeeze(c)              # as NumPy: one variable gives a 0-d result


def corrcoef(x, y=None, rowvar: bool = True):
    """``numpy.corrcoef``: the covariance normalised by the standard deviations, clipped to
    [-1, 1] as NumPy does."""
    c = cov(x, y, rowvar)
    if len(shape(c)) == 0:
        return true_divide(c, c)
    d = sqrt(diagonal(c))
    c = true_divide(true_divide(c, reshape(d, (-1, 1))), reshape(d, (1, -1)))
    return clip(c, -1, 1)
