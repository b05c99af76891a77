"""Array creation with (possibly symbolic) sizes."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..shapes import as_dim, floordiv, normalize
from ._base import arr, bind_in_trace, cast, dtype_of, env, fresh, shape, is_weak
from ._shape_ops import _as_shape, broadcast_to


def _default_dtype(value) -> np.dtype:
    if isinstance(value, bool):
        return np.dtype(bool)
    if isinstance(value, int):
        return np.dtype("int64")
    if isinstance(value, float):
        return np.dtype("float64")
    if isinstance(value, complex):
        return np.dtype("complex128")
    return dtype_of(arr(value))


def full(shape_, fill_value, dtype=None):
    """``numpy.full``; ``shape_`` may hold symbolic dims."""
    d = dt.canonical(dtype) if dtype is not None else _default_dtype(fill_value)
    v = cast(fill_value if isinstance(fill_value, (bool, int, float, complex)) else arr(fill_value), d)
    target = _as_shape(shape_)
    if isinstance(v, np.ndarray):          # traced inside @jit
        return bind_in_trace(lax.broadcast_to, v, shape=target)
    return broadcast_to(v, target)


def zeros(shape_, dtype=float):
    """``numpy.zeros`` (float64 by default)."""
    return full(shape_, 0, dt.canonical(dtype))


def ones(shape_, dtype=float):
    """``numpy.ones``."""
    return full(shape_, 1, dt.canonical(dtype))


def empty(shape_, dtype=float):
    return zeros(shape_, dtype)


def full_like(a, fill_value, dtype=None):
    a = arr(a)
    return full(shape(a), fill_value, dtype if dtype is not None else dtype_of(a))


def zeros_like(a, dtype=None):
    return full_like(a, 0, dtype)


def ones_like(a, dtype=None):
    return full_like(a, 1, dtype)


def empty_like(a, dtype=None):
    return zeros_like(a, dtype)


def arange(start, stop=None, step=1, dtype=None):
    """``numpy.arange``; integer bounds may be symbolic dims (``arange(n)``, ``arange(1, n - 1)``)."""
    if stop is None:
        start, stop = 0, start
    vals = (start, stop, step)
    if dtype is None:
        is_float = any(isinstance(v, float) or (hasattr(v, "dtype") and dt.is_float(np.dtype(v.dtype)))
                       for v in vals)
        dtype = np.float64 if is_float else np.int64
    dtype = dt.canonical(dtype)
    if all(isinstance(v, (int, np.integer)) or not isinstance(v, (float, np.floating)) and _is_dim(v)
           for v in vals):
        b, e, s = (as_dim(v) for v in vals)
        if not isinstance(s, int) or s == 0:
            raise ValueError("arange: step must be a non-zero static int")
        span = normalize(e - b)
        size = floordiv(span + s - 1, s) if s > 0 else floordiv(-span - s - 1, -s)
        if not env().try_prove(">=", size, 0):
            from ..shapes import dmax
            size = dmax(size, 0)
        idx = bind_in_trace(lax.iota, shape=(size,), dimension=0, dtype=np.dtype("int64"))
        from ._ufuncs import add, multiply
        r = idx if s == 1 else multiply(idx, s)
        r = r if isinstance(b, int) and b == 0 else add(r, _dim_value(b))
        return cast(r, dtype)
    # float bounds: static only
    n = int(np.ceil((float(stop) - float(start)) / float(step)))
    idx = bind_in_trace(lax.iota, shape=(max(n, 0),), dimension=0, dtype=np.dtype("float64"))
    from ._ufuncs import add, multiply
    return cast(add(multiply(idx, float(step)), float(start)), dtype)


def _is_dim(v) -> bool:
    from ..shapes import SymbolicDim
    return isinstance(v, SymbolicDim)


def _dim_value(d):
    from ..shapes import wrap_dim
    return wrap_dim(d)


def eye(N, M=None, k: int = 0, dtype=float):
    """``numpy.eye``."""
    n = as_dim(N)
    m = n if M is None else as_dim(M)
    i = bind_in_trace(lax.iota, shape=(n, m), dimension=0, dtype=np.dtype("int64"))
    j = bind_in_trace(lax.iota, shape=(n, m), dimension=1, dtype=np.dtype("int64"))
    from ._ufuncs import add, equal
    return cast(equal(j, add(i, k) if k else i), dt.canonical(dtype))


def identity(n, dtype=float):
    return eye(n, dtype=dtype)


def array(obj, dtype=None, copy: bool = True):
    """``numpy.array``: a new array (a traced one is a new tracer), cast if ``dtype`` is given."""
    a = arr(obj)
    out = a if dtype is None else cast(a, dt.canonical(dtype))
    return fresh(out, a) if copy else out


def asarray(obj, dtype=None):
    """``numpy.asarray``: traced arrays pass through (cast if ``dtype`` is given)."""
    return array(obj, dtype, copy=False)
