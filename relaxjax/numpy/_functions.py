"""NumPy functions scientists' programs reach for, composed from the rest of relaxjax.numpy
(no primitives of their own): grids (linspace, meshgrid, indices), elementwise helpers
(isclose, hypot, copysign, sinc, nan_to_num), combining and rotating arrays (kron, cross,
column_stack, rot90), polynomials (vander, polyval).  Sizes may be symbolic dims; on NumPy
arrays outside a trace every function runs eagerly and returns NumPy arrays.  The counting,
binning and order statistics are in ``_stats``; ``_extras`` exports both.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..core import Tracer
from ..lax.util import normalize_axis
from ..shapes import SymbolicDim, as_dim, wrap_dim
from ._base import arr, cast, dtype_of, is_python_scalar, promote, shape, spec
from ._creation import ones, zeros
from ._indexing import flip, nonzero
from ._reductions import all as rall, any as rany, cumprod, sum as rsum
from ._shape_ops import (broadcast_arrays, broadcast_to, concatenate, moveaxis, ravel, reshape,
                         stack, transpose)
from ._ufuncs import (_promote_ufunc, _strong, abs as rabs, add, arctan2, equal, greater,
                      isfinite, isinf, isnan, less, less_equal, logical_and, logical_or,
                      maximum, minimum, multiply, negative, not_equal, sin, sqrt, subtract,
                      true_divide, where_values)

__all__ = ["linspace", "logspace", "meshgrid", "indices", "isclose", "allclose", "hypot",
           "copysign", "signbit", "heaviside", "sinc", "nan_to_num", "real", "imag", "angle",
           "iscomplexobj", "isrealobj", "iscomplex", "isreal",
           "count_nonzero", "flatnonzero", "select", "kron", "cross", "append", "column_stack",
           "atleast_3d", "dstack", "rot90", "vander", "polyval"]


def _traced(*xs) -> bool:
    return any(isinstance(x, (Tracer, SymbolicDim)) for x in xs)


def _dim_value(d):
    """An internal dim as a value: an int, or a weak int64 inside a trace."""
    return wrap_dim(d)


def _iota(n, dtype=np.int64):
    return lax.iota.bind(shape=(as_dim(n, "size"),), dimension=0, dtype=np.dtype(dtype))


# -- grids ------------------------------------------------------------------------------------

def linspace(start, stop, num=50, endpoint: bool = True, retstep: bool = False, dtype=None,
             axis: int = 0):
    """``numpy.linspace``; ``num`` may be a symbolic dim (``linspace(0, 1, x.shape[0])``).
    Computed as NumPy does: ``start + i * step`` (``i / div * delta`` when a step underflows
    to 0), the last sample set to ``stop`` when ``endpoint``."""
    n = as_dim(num, "linspace: num")
    if isinstance(n, int) and n < 0:
        raise ValueError(f"linspace: number of samples, {n}, must be non-negative")
    div = n - 1 if endpoint else n
    ops = [s if is_python_scalar(s) else arr(s) for s in (start, stop)]
    rt = dt.result_type(*(spec(s) for s in ops), float)        # ensure_inexact, NEP 50
    out_dt = rt if dtype is None else dt.canonical(dtype)
    start_, stop_ = (cast(s, rt) for s in ops)
    delta = subtract(stop_, start_)
    nd = len(shape(delta))
    i = reshape(cast(_iota(n), rt), (wrap_dim(n),) + (1,) * nd)
    if isinstance(div, int) and div <= 0:
        step = cast(np.nan, rt)
        y = multiply(i, delta)
    else:
        divv = _dim_value(div)
        # a symbolic num may be 1 at run time: divide by max(div, 1) so that y = start
        step = true_divide(delta, divv if isinstance(div, int) else maximum(divv, 1))
        tiny = rany(equal(step, 0))
        y = where_values(tiny, multiply(true_divide(i, divv), delta), multiply(i, step))
        if not isinstance(div, int):          # a symbolic num may still be 1: step is nan
            step = where_values(greater(divv, 0), step, np.nan)
    y = add(y, start_)
    if endpoint and not (isinstance(n, int) and n <= 1):
        k = _iota(n)
        last = logical_and(equal(k, _dim_value(n - 1)), greater(k, 0))
        y = where_values(reshape(last, (wrap_dim(n),) + (1,) * nd), stop_, y)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if dt.is_int(out_dt) or dt.is_bool(out_dt):
        from ._ufuncs import floor
        y = floor(y)
    y = cast(y, out_dt)
    return (y, step) if retstep else y


def logspace(start, stop, num=50, endpoint: bool = True, base=10.0, dtype=None, axis: int = 0):
    """``numpy.logspace``: ``base ** linspace(start, stop, num)`` (a Python ``base`` is weak:
    float32 bounds give float32)."""
    from ._shape_ops import expand_dims
    from ._ufuncs import power
    if not is_python_scalar(base) and len(shape(arr(base))):
        b = arr(base)
        nd = max(len(shape(arr(v))) for v in (start, stop, b))
        start, stop, b = (reshape(arr(v), (1,) * (nd - len(shape(arr(v)))) +
                                  tuple(wrap_dim(d) for d in shape(arr(v))))
                          for v in (start, stop, b))
        base = expand_dims(b, axis)
    r = power(base, linspace(start, stop, num, endpoint=endpoint, axis=axis))
    return r if dtype is None else cast(r, dt.canonical(dtype))


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy"):
    """``numpy.meshgrid`` (a tuple of arrays; ``sparse`` leaves them unbroadcast)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("meshgrid: valid values for `indexing` are 'xy' and 'ij'")
    nd = len(xi)
    out = []
    for k, x in enumerate(xi):
        s = [1] * nd
        s[k] = -1
        if indexing == "xy" and nd > 1 and k < 2:
            s[0], s[1] = (1, -1) if k == 0 else (-1, 1)
        out.append(reshape(arr(x), tuple(s)))
    if not sparse:
        out = list(broadcast_arrays(*out))
    return tuple(out)


def indices(dimensions, dtype=int, sparse: bool = False):
    """``numpy.indices``; the dimensions may be symbolic."""
    dims = tuple(as_dim(d, "indices: dimension") for d in dimensions)
    d = dt.canonical(dtype)
    nd = len(dims)
    if sparse:
        return tuple(reshape(_iota(n, d), tuple(wrap_dim(n) if j == k else 1 for j in range(nd)))
                     for k, n in enumerate(dims))
    if nd == 0:
        return zeros((0,), d)
    return stack([lax.iota.bind(shape=dims, dimension=k, dtype=d) for k in range(nd)])


# -- elementwise --------------------------------------------------------------------------

def _float_operand(v):
    """isclose's ``y`` (and tolerances): arrays become inexact (``result_type(y, 1.0)``),
    a Python int becomes a float, a Python float stays weak."""
    if is_python_scalar(v):
        return float(v)
    v = arr(v)
    return cast(v, dt.result_type(dtype_of(v), float))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """``numpy.isclose``: ``|a - b| <= atol + rtol * |b|`` for finite ``b``, or ``a == b``."""
    x = a if is_python_scalar(a) else arr(a)
    y = _float_operand(b)
    rtol, atol = (t if is_python_scalar(t) else arr(t) for t in (rtol, atol))
    close = logical_and(less_equal(rabs(subtract(x, y)), add(atol, multiply(rtol, rabs(y)))),
                        isfinite(y))
    r = logical_or(close, equal(x, y))
    if equal_nan:
        r = logical_or(r, logical_and(isnan(x), isnan(y)))
    return _strong(arr(r))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """``numpy.allclose``: a Python bool on NumPy arrays, a 0-d bool array when traced."""
    r = rall(isclose(a, b, rtol, atol, equal_nan))
    return r if _traced(r) else bool(r)


def hypot(x1, x2):
    """Elementwise ``numpy.hypot``, scaled (``m * sqrt(1 + (s / m)**2)``) so that large
    operands do not overflow; an infinite operand gives inf even against NaN."""
    x, y = _promote_ufunc("hypot", (x1, x2))
    ax, ay = rabs(x), rabs(y)
    big, small = maximum(ax, ay), minimum(ax, ay)
    ratio = where_values(equal(big, 0), 0, true_divide(small, where_values(equal(big, 0), 1, big)))
    r = multiply(big, sqrt(add(multiply(ratio, ratio), 1)))
    return _strong(where_values(logical_or(isinf(ax), isinf(ay)), np.inf, r))


def signbit(x):
    """Elementwise ``numpy.signbit`` (``-0.0`` included: ``atan2(-0.0, -1) < 0``)."""
    (x,) = _promote_ufunc("signbit", (x,))
    if dt.is_float(dtype_of(x)):
        return _strong(less(arctan2(x, -1), 0))
    if dt.is_bool(dtype_of(x)) or dtype_of(x).kind == "u":
        return _strong(not_equal(x, x))
    return _strong(less(x, 0))


def copysign(x1, x2):
    """Elementwise ``numpy.copysign`` (floats; integers promote as NumPy's loops do)."""
    x, y = _promote_ufunc("copysign", (x1, x2))
    m = rabs(x)
    return _strong(where_values(signbit(y), negative(m), m))


def heaviside(x1, x2):
    """Elementwise ``numpy.heaviside``: 0 below zero, ``x2`` at zero, 1 above, NaN for NaN."""
    x, h0 = _promote_ufunc("heaviside", (x1, x2))
    r = where_values(less(x, 0), 0, where_values(greater(x, 0), 1, x))
    return _strong(where_values(equal(x, 0), h0, r))


def sinc(x):
    """``numpy.sinc``: ``sin(pi x) / (pi x)``, computed as NumPy does (x = 0 -> 1e-20)."""
    x = arr(x)
    y = multiply(np.pi, where_values(equal(x, 0), 1.0e-20, x))
    return _strong(true_divide(sin(y), y))


def nan_to_num(x, copy: bool = True, nan=0.0, posinf=None, neginf=None):
    """``numpy.nan_to_num``: NaN -> ``nan``, +-inf -> ``posinf``/``neginf`` (the dtype's
    largest finite values by default); integers and bools pass through."""
    x = arr(x)
    d = dtype_of(x)
    if not dt.is_float(d):
        return _strong(x)
    info = np.finfo(d)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    r = where_values(isnan(x), cast(nan, d), x)
    r = where_values(logical_and(isinf(r), greater(r, 0)), cast(big, d), r)
    return where_values(logical_and(isinf(r), less(r, 0)), cast(small, d), r)


def real(val):
    """``numpy.real``: the real part of a complex array (float32 of complex64, float64 of
    complex128), a real array itself."""
    v = arr(val)
    if dt.is_complex(dtype_of(v)):
        return lax.real.bind(v)
    return _strong(v)


def imag(val):
    """``numpy.imag``: the imaginary part of a complex array; zeros of a real one's dtype."""
    v = arr(val)
    if dt.is_complex(dtype_of(v)):
        return lax.imag.bind(v)
    return zeros(tuple(wrap_dim(d) for d in shape(v)), dtype_of(v))


def angle(z, deg: bool = False):
    """``numpy.angle``: the argument of each element, ``arctan2(imag, real)`` (floats of a
    real array too: 0 or pi); in degrees for ``deg=True``."""
    z = arr(z)
    if dt.is_complex(dtype_of(z)):
        a = arctan2(lax.imag.bind(z), lax.real.bind(z))
    else:
        a = arctan2(0.0, z) if dt.is_float(dtype_of(z)) else arctan2(0.0, cast(z, np.float64))
    return multiply(a, 180.0 / np.pi) if deg else a


def iscomplexobj(x) -> bool:
    """``numpy.iscomplexobj``: whether the array's dtype is complex (known when traced)."""
    return dt.is_complex(dtype_of(arr(x)))


def isrealobj(x) -> bool:
    """``numpy.isrealobj``."""
    return not iscomplexobj(x)


def iscomplex(x):
    """``numpy.iscomplex``: elementwise, a nonzero imaginary part (all False for a real
    array)."""
    x = arr(x)
    if not dt.is_complex(dtype_of(x)):
        return not_equal(zeros(tuple(wrap_dim(d) for d in shape(x)), bool), False)
    return not_equal(lax.imag.bind(x), 0)


def isreal(x):
    """``numpy.isreal``: elementwise, a zero imaginary part (all True for a real array)."""
    x = arr(x)
    if not dt.is_complex(dtype_of(x)):
        return equal(zeros(tuple(wrap_dim(d) for d in shape(x)), bool), False)
    return equal(lax.imag.bind(x), 0)


def count_nonzero(a, axis=None, *, keepdims: bool = False):
    """``numpy.count_nonzero``: int64 counts (a Python int for ``axis=None`` on NumPy arrays,
    as NumPy; a 0-d array when traced)."""
    a = arr(a)
    r = rsum(not_equal(a, 0) if not dt.is_bool(dtype_of(a)) else a, axis=axis,
             dtype=np.int64, keepdims=keepdims)
    return int(r) if axis is None and not keepdims and not _traced(r) else r


def flatnonzero(a):
    """``numpy.flatnonzero``: the indices of the flattened array's non-zeros (a run-time length)."""
    return nonzero(ravel(arr(a)))[0]


def select(condlist, choicelist, default=0):
    """``numpy.select``: the first choice whose condition holds, else ``default`` (Python
    scalars stay weak, as in NumPy 2)."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    choices = [c if type(c) in (int, float) else arr(c) for c in (*choicelist, default)]
    conds = [arr(c) for c in condlist]
    for k, c in enumerate(conds):
        if not dt.is_bool(dtype_of(c)):
            raise TypeError(f"select: invalid entry {k} in condlist: should be boolean ndarray")
    choices = promote(*choices)
    result = choices[-1]
    for c, v in zip(reversed(conds), reversed(choices[:-1])):
        result = where_values(c, v, result)
    shapes = [shape(x) for x in (*conds, *choices)]
    if shape(result) != _bshape(shapes):
        result = broadcast_to(result, tuple(wrap_dim(d) for d in _bshape(shapes)))
    return _strong(arr(result))


def _bshape(shapes):
    from ._shape_ops import broadcast_arrays as _b
    return shape(_b(*[zeros(tuple(wrap_dim(d) for d in s), bool) for s in shapes])[0])


# -- combining and rotating -----------------------------------------------------------------

def kron(a, b):
    """``numpy.kron``: the block product, as an interleaved broadcast product reshaped."""
    a, b = arr(a), arr(b)
    nd = max(len(shape(a)), len(shape(b)))
    if nd == 0:
        return multiply(a, b)
    sa = (1,) * (nd - len(shape(a))) + tuple(shape(a))
    sb = (1,) * (nd - len(shape(b))) + tuple(shape(b))
    a2 = reshape(a, tuple(x for d in sa for x in (wrap_dim(d), 1)))
    b2 = reshape(b, tuple(x for d in sb for x in (1, wrap_dim(d))))
    return reshape(multiply(a2, b2), tuple(wrap_dim(p * q) for p, q in zip(sa, sb)))


def _static_size(d, what: str) -> int:
    """A size that must be known (a cross product's vector length): an int, guarded in
    automatic mode; in explicit mode a symbolic one is an error naming ``what``."""
    from ..errors import InconclusiveDimensionError
    try:
        return int(wrap_dim(d))
    except InconclusiveDimensionError as e:
        raise InconclusiveDimensionError(f"{what} must be a known size (2 or 3), got the "
                                         f"symbolic dim {wrap_dim(d)}: {e}") from None


def cross(a, b, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis=None):
    """``numpy.cross`` of 2- or 3-vectors (two 2-vectors give the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = promote(arr(a), arr(b))
    a = moveaxis(a, normalize_axis(axisa, len(shape(a))), -1)
    b = moveaxis(b, normalize_axis(axisb, len(shape(b))), -1)
    na = _static_size(shape(a)[-1], "cross: the vector length of a")
    nb = _static_size(shape(b)[-1], "cross: the vector length of b")
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("cross: incompatible dimensions for cross product "
                         "(dimension must be 2 or 3)")
    ca = [a[..., k] for k in range(na)] + [None] * (3 - na)
    cb = [b[..., k] for k in range(nb)] + [None] * (3 - nb)

    def prod(u, v):
        return None if u is None or v is None else multiply(u, v)

    def minus(u, v):
        if v is None:
            return u
        return negative(v) if u is None else subtract(u, v)

    z = minus(prod(ca[0], cb[1]), prod(ca[1], cb[0]))
    if na == 2 and nb == 2:
        return _strong(z)
    x = minus(prod(ca[1], cb[2]), prod(ca[2], cb[1]))
    y = minus(prod(ca[2], cb[0]), prod(ca[0], cb[2]))
    out = stack(broadcast_arrays(x, y, z), axis=-1)
    return moveaxis(out, -1, normalize_axis(axisc, len(shape(out))))


def append(arr_, values, axis=None):
    """``numpy.append``: flattened without ``axis``; Python scalars are strong arrays here,
    as in NumPy (``append(x_f32, 1.0)`` is float64)."""
    a, v = arr(arr_), arr(values)
    if axis is None:
        return concatenate([ravel(a), ravel(v)])
    return concatenate([a, v], axis=axis)


def column_stack(tup):
    """``numpy.column_stack``: 1-D arrays become columns, then joined on axis 1."""
    cols = []
    for v in tup:
        v = arr(v)
        if len(shape(v)) < 2:
            v = reshape(v, (-1, 1))
        cols.append(v)
    return concatenate(cols, axis=1)


def atleast_3d(*arys):
    """``numpy.atleast_3d``: (N,) -> (1, N, 1), (M, N) -> (M, N, 1)."""
    res = []
    for a in arys:
        a = arr(a)
        s = tuple(wrap_dim(d) for d in shape(a))
        if len(s) == 0:
            a = reshape(a, (1, 1, 1))
        elif len(s) == 1:
            a = reshape(a, (1, s[0], 1))
        elif len(s) == 2:
            a = reshape(a, (*s, 1))
        res.append(a)
    return res[0] if len(res) == 1 else tuple(res)


def dstack(tup):
    """``numpy.dstack``: joined along the third axis."""
    return concatenate([atleast_3d(v) for v in tup], axis=2)


def rot90(m, k: int = 1, axes=(0, 1)):
    """``numpy.rot90``: flips and a transpose, as NumPy."""
    m = arr(m)
    axes = tuple(axes)
    nd = len(shape(m))
    if len(axes) != 2:
        raise ValueError("rot90: len(axes) must be 2")
    if nd < 2:
        raise ValueError("rot90: the array must have at least two dimensions")
    a0, a1 = (normalize_axis(x, nd) for x in axes)
    if a0 == a1:
        raise ValueError("rot90: axes must be different")
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(m, a1), perm)
    return flip(transpose(m, perm), a1)


# -- polynomials ----------------------------------------------------------------------------

def vander(x, N=None, increasing: bool = False):
    """``numpy.vander``: powers by a running product, as NumPy (dtype ``promote_types(x,
    int64)``, so float32 gives float64)."""
    x = arr(x)
    if len(shape(x)) != 1:
        raise ValueError("vander: x must be a one-dimensional array or sequence")
    n = shape(x)[0]
    cols = shape(x)[0] if N is None else as_dim(N, "vander: N")
    d = np.promote_types(dtype_of(x), np.int64)
    if isinstance(cols, int) and cols == 0:
        return zeros((wrap_dim(n), 0), d)
    xs = broadcast_to(reshape(cast(x, d), (wrap_dim(n), 1)), (wrap_dim(n), wrap_dim(cols - 1)))
    v = cumprod(concatenate([ones((wrap_dim(n), 1), d), xs], axis=1), axis=1)
    return v if increasing else flip(v, 1)


def polyval(p, x):
    """``numpy.polyval``: Horner's rule over the coefficients (highest power first), a scan
    along ``p`` so its length may be symbolic; dtype ``result_type(p, x)``."""
    p, x = arr(p), arr(x)
    if len(shape(p)) != 1:
        raise ValueError("polyval: p must be a one-dimensional array of coefficients")
    d = dt.result_type(dtype_of(p), dtype_of(x))
    xd, pd = cast(x, d), cast(p, d)
    y0 = zeros(tuple(wrap_dim(s) for s in shape(x)), d)
    y, _ = lax.scan(lambda y, c: (add(multiply(y, xd), c), None), y0, pd)
    return y
