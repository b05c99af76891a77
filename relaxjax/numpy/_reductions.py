"""Reductions with NumPy's axis/keepdims/dtype semantics; mean/var/std as composites."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..lax.util import normalize_axes, normalize_axis
from ..shapes import prod as dim_prod, wrap_dim
from ._base import arr, cast, dtype_of, shape
from ._shape_ops import ravel
from ._ufuncs import multiply, sqrt, subtract, true_divide


def _own(a, name: str, axis, keepdims: bool):
    """``a.<name>(axis=, keepdims=)`` for an operand that reduces itself (a ragged array), as
    ``numpy.<name>`` calls the method of a non-ndarray; else None."""
    if hasattr(type(a), "__relaxjax_ufunc__"):
        return getattr(a, name)(axis=axis, keepdims=keepdims)
    return None


def _keepdims(r, a_shape, axes):
    new = tuple(1 if i in axes else d for i, d in enumerate(a_shape))
    return lax.reshape.bind(r, new_sizes=new)


def _reduce(prim, np_name, a, axis, dtype, keepdims, *, cast_to=None):
    a = arr(a)
    axes = normalize_axes(axis, len(shape(a)))
    if dtype is not None:
        target = dt.canonical(dtype)
    elif cast_to is not None:
        target = cast_to
    else:
        target = dt.reduction_dtype(np_name, dtype_of(a))
    x = cast(a, target)
    r = prim.bind(x, axes=axes)
    return _keepdims(r, shape(a), axes) if keepdims else r


def sum(a, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.sum`` (ints accumulate in int64, bools count, like NumPy)."""
    if (own := _own(a, "sum", axis, keepdims)) is not None:
        return own
    return _reduce(lax.reduce_sum, "sum", a, axis, dtype, keepdims)


def prod(a, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.prod``."""
    return _reduce(lax.reduce_prod, "prod", a, axis, dtype, keepdims)


def max(a, axis=None, keepdims: bool = False):
    """``numpy.max`` (NaN propagates; an empty axis is an error, as in NumPy)."""
    if (own := _own(a, "max", axis, keepdims)) is not None:
        return own
    return _reduce(lax.reduce_max, "max", a, axis, None, keepdims, cast_to=dtype_of(arr(a)))


def min(a, axis=None, keepdims: bool = False):
    """``numpy.min``."""
    return _reduce(lax.reduce_min, "min", a, axis, None, keepdims, cast_to=dtype_of(arr(a)))


amax, amin = max, min


def all(a, axis=None, keepdims: bool = False):
    """``numpy.all``."""
    return _reduce(lax.reduce_and, "all", a, axis, None, keepdims, cast_to=np.dtype(bool))


def any(a, axis=None, keepdims: bool = False):
    """``numpy.any``."""
    return _reduce(lax.reduce_or, "any", a, axis, None, keepdims, cast_to=np.dtype(bool))


def _count(a, axes):
    return wrap_dim(dim_prod(shape(a)[i] for i in axes))


def mean(a, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.mean``: sum in the result dtype (float64 for integers), divided by the count."""
    if (own := _own(a, "mean", axis, keepdims)) is not None:
        return own
    a = arr(a)
    axes = normalize_axes(axis, len(shape(a)))
    out_dt = dt.canonical(dtype) if dtype is not None else dt.reduction_dtype("mean", dtype_of(a))
    s = sum(a, axis=axes, dtype=out_dt, keepdims=keepdims)
    return cast(true_divide(s, _count(a, axes)), out_dt)


def var(a, axis=None, dtype=None, ddof: int = 0, keepdims: bool = False):
    """``numpy.var``: mean of squared deviations, divided by ``max(count - ddof, 0)``."""
    if (own := _own(a, "var", axis, keepdims)) is not None:
        return own
    a = arr(a)
    axes = normalize_axes(axis, len(shape(a)))
    out_dt = dt.canonical(dtype) if dtype is not None else dt.reduction_dtype("var", dtype_of(a))
    m = mean(a, axis=axes, dtype=out_dt, keepdims=True)
    d = subtract(cast(a, out_dt), m)
    s = sum(multiply(d, d), axis=axes, dtype=out_dt, keepdims=keepdims)
    count = _count(a, axes) - ddof
    if not isinstance(count, int) and ddof == 0:
        return cast(true_divide(s, count), out_dt)
    if not isinstance(count, int):
        from ._ufuncs import maximum
        count_v = cast(maximum(count, 0), out_dt)
        return cast(true_divide(s, count_v), out_dt)
    return cast(true_divide(s, cast(float(count if count > 0 else 0), out_dt)), out_dt)


def std(a, axis=None, dtype=None, ddof: int = 0, keepdims: bool = False):
    """``numpy.std``."""
    return sqrt(var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims))


def _arg(prim, a, axis, keepdims):
    a = arr(a)
    if axis is None:
        r = prim.bind(ravel(a), axis=0)
        return lax.reshape.bind(r, new_sizes=(1,) * len(shape(a))) if keepdims else r
    ax = normalize_axis(axis, len(shape(a)))
    r = prim.bind(a, axis=ax)
    return _keepdims(r, shape(a), (ax,)) if keepdims else r


def argmax(a, axis=None, keepdims: bool = False):
    """``numpy.argmax`` (first occurrence; int64 indices)."""
    return _arg(lax.argmax, a, axis, keepdims)


def argmin(a, axis=None, keepdims: bool = False):
    """``numpy.argmin``."""
    return _arg(lax.argmin, a, axis, keepdims)


def _cumulative(prim, np_name, a, axis, dtype, *, same_dtype: bool = False):
    """``same_dtype``: the running max/min keep the input's dtype (no sum-like widening)."""
    a = arr(a)
    if axis is None:                  # over the flattened array, as NumPy does
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, len(shape(a)))
    target = dt.canonical(dtype) if dtype is not None else \
        dtype_of(a) if same_dtype else dt.reduction_dtype(np_name, dtype_of(a))
    return prim.bind(cast(a, target), axis=ax)


def cumsum(a, axis=None, dtype=None):
    """``numpy.cumsum`` (ints accumulate in int64, bools count, like NumPy)."""
    return _cumulative(lax.cumsum, "cumsum", a, axis, dtype)


def cumprod(a, axis=None, dtype=None):
    """``numpy.cumprod``."""
    return _cumulative(lax.cumprod, "cumprod", a, axis, dtype)


def ptp(a, axis=None, keepdims: bool = False):
    """``numpy.ptp``: max - min (peak to peak)."""
    return subtract(max(a, axis=axis, keepdims=keepdims), min(a, axis=axis, keepdims=keepdims))


def cummax(a, axis=None, dtype=None):
    """``numpy.maximum.accumulate`` along ``axis`` (None: flattened); NaN propagates."""
    return _cumulative(lax.cummax, "maximum", a, axis, dtype, same_dtype=True)


def cummin(a, axis=None, dtype=None):
    """``numpy.minimum.accumulate`` along ``axis``."""
    return _cumulative(lax.cummin, "minimum", a, axis, dtype, same_dtype=True)
