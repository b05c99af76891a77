"""Statistics, counting and binning as compositions: NaN-skipping reductions, weighted
averages, ``searchsorted``/``digitize``/``bincount``/``histogram`` as broadcast comparisons
and sums (O(n * m), no data-dependent shapes), ``median``/``percentile``/``quantile`` as a
sort and gathers at computed positions, ``convolve`` as a gather of sliding windows times the
kernel, ``interp`` as a search and a gather.  On NumPy arrays they run eagerly.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..core import Tracer
from ..lax.util import normalize_axes
from ..shapes import SymbolicDim, as_dim, dmax, prod as dim_prod, wrap_dim
from ._functions import linspace
from ._base import arr, cast, dtype_of, is_python_scalar, shape
from ._indexing import flip, take
from ._reductions import all as rall, max as rmax, mean, min as rmin, sum as rsum
from ._shape_ops import broadcast_to, concatenate, moveaxis, ravel, reshape
from ._sorting import sort
from ._ufuncs import (_strong, add, clip, equal, floor, greater, greater_equal, isnan, less,
                      less_equal, logical_and, logical_not, logical_or, multiply, subtract,
                      true_divide, where_values)

__all__ = ["nansum", "nanmean", "average", "searchsorted", "digitize", "bincount", "histogram",
           "convolve", "median", "percentile", "quantile", "interp"]


def _traced(*xs) -> bool:
    return any(isinstance(x, (Tracer, SymbolicDim)) for x in xs)


def _iota(n, dtype=np.int64):
    return lax.iota.bind(shape=(as_dim(n, "size"),), dimension=0, dtype=np.dtype(dtype))


def _ushape(a) -> tuple:
    return tuple(wrap_dim(d) for d in shape(a))


# -- NaN-skipping reductions and averages ---------------------------------------------------

def nansum(a, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.nansum``: NaNs count as zero."""
    a = arr(a)
    if dt.is_float(dtype_of(a)):
        a = where_values(isnan(a), cast(0, dtype_of(a)), a)
    return rsum(a, axis=axis, dtype=dtype, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, keepdims: bool = False):
    """``numpy.nanmean``: the mean of the non-NaN values (NaN where there are none)."""
    a = arr(a)
    if not dt.is_float(dtype_of(a)):
        return mean(a, axis=axis, dtype=dtype, keepdims=keepdims)
    ok = logical_not(isnan(a))
    tot = rsum(where_values(ok, a, cast(0, dtype_of(a))), axis=axis, dtype=dtype, keepdims=keepdims)
    cnt = rsum(ok, axis=axis, dtype=np.int64, keepdims=keepdims)
    return true_divide(tot, cast(cnt, dtype_of(tot)))


def average(a, axis=None, weights=None, returned: bool = False, *, keepdims: bool = False):
    """``numpy.average``: the mean, or ``sum(a * w) / sum(w)`` with weights of ``a``'s shape
    or 1-D along one ``axis`` (a zero sum of weights gives inf/NaN: it cannot raise when traced)."""
    a = arr(a)
    if weights is None:
        avg = mean(a, axis=axis, keepdims=keepdims)
        count = dim_prod(shape(a)) if axis is None else \
            dim_prod(shape(a)[i] for i in normalize_axes(axis, len(shape(a))))
        scl = cast(wrap_dim(count), dtype_of(avg))
    else:
        w = arr(weights)
        if dt.is_int(dtype_of(a)) or dt.is_bool(dtype_of(a)):
            rt = dt.result_type(dtype_of(a), dtype_of(w), np.dtype("float64"))
        else:
            rt = dt.result_type(dtype_of(a), dtype_of(w))
        if shape(w) != shape(a):
            if axis is None:
                raise TypeError("average: axis must be specified when shapes of a and weights "
                                "differ")
            axes = normalize_axes(axis, len(shape(a)))
            if len(shape(w)) != len(axes) or any(not _same(shape(w)[k], shape(a)[ax])
                                                 for k, ax in enumerate(axes)):
                raise ValueError("average: shape of weights must be consistent with shape of a "
                                 "along specified axis")
            nd = len(shape(a))
            full = [1] * nd
            for k, ax in enumerate(axes):
                full[ax] = wrap_dim(shape(w)[k])
            from ._shape_ops import transpose
            w = reshape(transpose(w, [int(i) for i in np.argsort(axes)]), tuple(full))
        scl = rsum(broadcast_to(cast(w, rt), _ushape(a)), axis=axis, dtype=rt, keepdims=keepdims)
        total = rsum(multiply(cast(a, rt), cast(w, rt)), axis=axis, keepdims=keepdims)
        avg = true_divide(total, scl)
    if returned:
        if shape(scl) != shape(avg):
            scl = broadcast_to(scl, _ushape(avg))
        return avg, scl
    return avg


def _same(d1, d2) -> bool:
    from ._base import env
    return env().try_prove("==", d1, d2) or wrap_dim(d1) == wrap_dim(d2)


# -- searching and counting -----------------------------------------------------------------

def _before(a, v, inclusive: bool):
    """``a < v`` (``a <= v`` when ``inclusive``) in NumPy's sort order: NaN after everything."""
    r = less_equal(a, v) if inclusive else less(a, v)
    if dt.is_float(dtype_of(arr(a))) or dt.is_float(dtype_of(arr(v))):
        nan_v = isnan(v)
        r = logical_or(r, nan_v if inclusive else logical_and(nan_v, logical_not(isnan(a))))
    return r


def searchsorted(a, v, side: str = "left", sorter=None):
    """``numpy.searchsorted`` as counts: ``side="left"`` counts ``a < v``, ``"right"``
    ``a <= v`` (NaN sorts last, as in NumPy); int64, of ``v``'s shape."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right' (got {side!r})")
    a = arr(a)
    if len(shape(a)) != 1:
        raise ValueError("searchsorted: a must be one-dimensional")
    if sorter is not None:
        a = take(a, sorter)
    vv = v if is_python_scalar(v) else arr(v)
    vs = shape(vv) if not is_python_scalar(vv) else ()
    ve = reshape(vv, (*(wrap_dim(d) for d in vs), 1)) if not is_python_scalar(vv) else vv
    return rsum(_before(a, ve, side == "right"), axis=-1, dtype=np.int64)


def digitize(x, bins, right: bool = False):
    """``numpy.digitize``: the bin of each ``x`` for increasing or decreasing ``bins``
    (which way is read from the data when traced; non-monotonic bins raise only eagerly)."""
    x, bins = arr(x), arr(bins)
    if len(shape(bins)) != 1:
        raise ValueError("digitize: bins must be one-dimensional")
    side = "left" if right else "right"
    nb = shape(bins)[0]
    if isinstance(nb, int) and nb <= 1:
        return searchsorted(bins, x, side)
    d = subtract(bins[1:], bins[:-1]) if _traced(bins) else np.diff(bins)
    inc = rall(greater_equal(d, 0))
    if not _traced(bins, x):
        if not inc and not np.all(d <= 0):
            raise ValueError("digitize: bins must be monotonically increasing or decreasing")
    up = searchsorted(bins, x, side)
    down = subtract(wrap_dim(nb), searchsorted(flip(bins, 0), x, side))
    return _strong(where_values(inc, up, cast(down, np.int64)))


def bincount(x, weights=None, minlength=None, *, length=None):
    """``numpy.bincount`` of non-negative ints.  NumPy's result length is ``max(x) + 1``,
    known only from the data: when traced a static length must be given (``minlength`` or
    JAX's ``length``, an int or a dim), and values at or above it are not counted.  Eagerly
    the length is NumPy's."""
    x = arr(x)
    if len(shape(x)) != 1:
        raise ValueError("bincount: x must be one-dimensional")
    if not (dt.is_int(dtype_of(x)) or dt.is_bool(dtype_of(x))) or dtype_of(x) == np.uint64:
        raise TypeError(f"bincount: cannot cast array data from {dtype_of(x)} to int64 "
                        f"according to the rule 'safe'")
    n = length if length is not None else minlength
    if not _traced(x, weights, n):
        xs = np.asarray(x)
        if xs.size and xs.min() < 0:
            raise ValueError("bincount: x must have no negative elements")
        n = max(int(xs.max()) + 1 if xs.size else 0, int(n or 0)) if length is None else n
    elif n is None:
        raise ValueError("bincount: the result's length (max(x) + 1 in NumPy) depends on the "
                         "data; inside jit pass a static minlength= or length= (an int or a "
                         "dim), values at or above it are not counted")
    hot = equal(reshape(cast(x, np.int64), (-1, 1)), reshape(_iota(n), (1, -1)))
    if weights is None:
        return rsum(hot, axis=0, dtype=np.int64)
    w = reshape(cast(arr(weights), np.float64), (-1, 1))
    return rsum(where_values(hot, w, 0.0), axis=0)


def histogram(a, bins=10, range=None, density=None, weights=None):
    """``numpy.histogram`` with a number of equal bins (over ``range`` or the data's min and
    max) or an array of edges: ``(hist, bin_edges)``.  Bins are found by comparing with the
    edges (the last bin includes its right edge), as NumPy's corrected index computation."""
    a = ravel(arr(a))
    w = None if weights is None else ravel(arr(weights))
    if isinstance(bins, str):
        raise NotImplementedError(f"histogram: bins={bins!r} (an estimator's bin count depends "
                                  f"on the data) is not supported; pass a number of bins or edges")
    if np.ndim(bins) == 0 and not isinstance(bins, Tracer):
        nb = int(bins)
        if nb < 1:
            raise ValueError("histogram: `bins` must be positive, when an integer")
        if range is not None:
            first, last = range
            if is_python_scalar(first) and is_python_scalar(last):
                if first > last:
                    raise ValueError("histogram: max must be larger than min in range parameter")
                if not (np.isfinite(first) and np.isfinite(last)):
                    raise ValueError(f"histogram: supplied range of [{first}, {last}] is not "
                                     f"finite")
        else:
            first, last = rmin(a), rmax(a)
        fa, la = (f if is_python_scalar(f) else arr(f) for f in (first, last))
        bin_type = dt.result_type(*(type(f) if is_python_scalar(f) else dtype_of(f)
                                    for f in (fa, la)), dtype_of(a))
        if dt.is_int(bin_type) or dt.is_bool(bin_type):
            bin_type = dt.result_type(bin_type, float)
        if is_python_scalar(fa) and is_python_scalar(la):      # stay weak, as in NumPy
            lo, hi = (fa - 0.5, la + 0.5) if fa == la else (fa, la)
        else:                                                   # an empty range widens by 1/2
            same = equal(fa, la)
            lo = where_values(same, subtract(fa, 0.5), fa)
            hi = where_values(same, add(la, 0.5), la)
        edges = linspace(lo, hi, nb + 1, dtype=bin_type)
        keep = logical_and(greater_equal(a, lo), less_equal(a, hi))
        ac = reshape(cast(a, bin_type), (-1, 1))
        idx = rsum(greater_equal(ac, reshape(edges[1:nb], (1, -1))), axis=1, dtype=np.int64)
        hot = logical_and(equal(reshape(idx, (-1, 1)), reshape(_iota(nb), (1, -1))),
                          reshape(keep, (-1, 1)))
        if w is None:
            n = rsum(hot, axis=0, dtype=np.int64)
        else:
            n = cast(rsum(where_values(hot, reshape(cast(w, np.float64), (-1, 1)), 0.0), axis=0),
                     dtype_of(w))
    else:
        edges = arr(bins)
        if len(shape(edges)) != 1:
            raise ValueError("histogram: `bins` must be 1d, when an array")
        if not _traced(edges) and np.any(edges[:-1] > edges[1:]):
            raise ValueError("histogram: `bins` must increase monotonically, when an array")
        m = shape(edges)[0]
        ec = reshape(edges, (1, -1))
        ac = reshape(a, (-1, 1))
        last = equal(reshape(_iota(m), (1, -1)), wrap_dim(m - 1))
        below = where_values(last, less_equal(ac, ec), less(ac, ec))
        if w is None:
            cum = rsum(below, axis=0, dtype=np.int64)
        else:
            cum = rsum(where_values(below, reshape(w, (-1, 1)), cast(0, dtype_of(w))), axis=0)
        n = subtract(cum[1:], cum[:-1])
    if density:
        widths = cast(subtract(edges[1:], edges[:-1]), np.float64)
        n = true_divide(true_divide(cast(n, np.float64), widths), rsum(n))
    return n, edges


# -- convolution ----------------------------------------------------------------------------

def convolve(a, v, mode: str = "full"):
    """``numpy.convolve`` of two 1-D arrays (modes full, same, valid): each output is a
    window of the zero-padded longer array (a gather from ``arange``) times the reversed
    shorter one, summed.  Which one is longer is decided by proof or guard."""
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"convolve: mode must be one of 'full', 'same', 'valid' (got {mode!r})")
    a, v = arr(a), arr(v)
    a = reshape(a, (1,)) if len(shape(a)) == 0 else a
    v = reshape(v, (1,)) if len(shape(v)) == 0 else v
    if len(shape(a)) != 1 or len(shape(v)) != 1:
        raise ValueError("convolve: object too deep for desired array (a and v must be 1-D)")
    if wrap_dim(shape(v)[0]) > wrap_dim(shape(a)[0]):
        a, v = v, a
    n, m = shape(a)[0], shape(v)[0]
    if isinstance(m, int) and m == 0:
        raise ValueError("convolve: v cannot be empty")
    rt = dt.result_type(dtype_of(a), dtype_of(v))
    a, k = cast(a, rt), flip(cast(v, rt), 0)
    if mode == "full":
        size, start = n + m - 1, 0
    elif mode == "same":
        size, start = n, (m - 1) - (m // 2 if isinstance(m, int) else _floordiv2(m))
    else:
        size, start = n - m + 1, m - 1
    padded = concatenate([_zeros(m - 1, rt), a, _zeros(m - 1, rt)])
    rows = add(reshape(_iota(size), (-1, 1)), wrap_dim(start))
    idx = add(rows, reshape(_iota(m), (1, -1)))
    win = take(padded, idx)
    if dt.is_bool(rt):
        from ._reductions import any as rany
        return rany(logical_and(win, reshape(k, (1, -1))), axis=1)
    return rsum(multiply(win, reshape(k, (1, -1))), axis=1, dtype=rt)


def _floordiv2(m):
    from ..shapes import floordiv
    return floordiv(m, 2)


def _zeros(n, d):
    from ._creation import zeros
    return zeros((wrap_dim(n),), d)


# -- order statistics -----------------------------------------------------------------------

def _to_front(a, axis):
    """The reduced axes flattened onto the front: ``(values, rest shape, keepdims shape)``."""
    a = arr(a)
    nd = len(shape(a))
    if axis is None:
        flat = ravel(a)
        return flat, (), (1,) * nd
    axes = normalize_axes(axis, nd)
    rest = [i for i in range(nd) if i not in axes]
    front = list(range(len(axes)))
    moved = moveaxis(a, list(axes), front) if list(axes) != front else a
    s = shape(moved)
    k = len(axes)
    flat = reshape(moved, (wrap_dim(dim_prod(s[:k])), *(wrap_dim(d) for d in s[k:])))
    keep = tuple(1 if i in axes else wrap_dim(shape(a)[i]) for i in range(nd))
    return flat, tuple(wrap_dim(shape(a)[i]) for i in rest), keep


def _nan_fill(s, result, qnd: int):
    """Slices holding a NaN give NaN (it sorts last), as NumPy."""
    if not dt.is_float(dtype_of(s)):
        return result
    last = s[-1]
    mask = isnan(last)
    return where_values(mask, cast(last, dtype_of(result)), result)


def median(a, axis=None, out=None, overwrite_input: bool = False, keepdims: bool = False):
    """``numpy.median``: the mean of the middle one or two sorted values (NaN if any)."""
    if out is not None:
        raise TypeError("median: out= is not supported; use the returned array")
    a = arr(a)
    flat, rest, keep = _to_front(a, axis)
    s = sort(flat, axis=0)
    n = shape(s)[0]
    lo = (n - 1) // 2 if isinstance(n, int) else _floordiv2(n - 1)
    hi = n // 2 if isinstance(n, int) else _floordiv2(n)
    idx = concatenate([_fill1(lo), _fill1(hi)])
    r = mean(take(s, idx, axis=0), axis=0)
    r = _nan_fill(s, r, 0)
    return reshape(r, keep) if keepdims else r


def _fill1(d):
    from ._creation import full
    return full((1,), wrap_dim(d), np.int64) if not isinstance(d, int) else np.asarray([d])


def quantile(a, q, axis=None, out=None, overwrite_input: bool = False, method: str = "linear",
             keepdims: bool = False, *, weights=None, interpolation=None):
    """``numpy.quantile`` with linear interpolation (NumPy's default method): sorted values
    at ``(n - 1) * q``, blended as NumPy's ``_lerp``.  A Python ``q`` is weak (float32 data
    gives float32), an array ``q`` strong."""
    return _quantile(a, q, axis, out, method, keepdims, weights, interpolation, "quantile",
                     percent=False)


def percentile(a, q, axis=None, out=None, overwrite_input: bool = False, method: str = "linear",
               keepdims: bool = False, *, weights=None, interpolation=None):
    """``numpy.percentile``: ``quantile`` of ``q / 100``."""
    return _quantile(a, q, axis, out, method, keepdims, weights, interpolation, "percentile",
                     percent=True)


def _quantile(a, q, axis, out, method, keepdims, weights, interpolation, name, percent):
    if out is not None:
        raise TypeError(f"{name}: out= is not supported; use the returned array")
    if interpolation is not None:
        method = interpolation
    if method != "linear":
        raise NotImplementedError(f"{name}: method={method!r} is not supported (only 'linear')")
    if weights is not None:
        raise NotImplementedError(f"{name}: weights= (method 'inverted_cdf') is not supported")
    weak_q = type(q) in (int, float)
    qa = arr(q)
    if percent:
        qa = true_divide(qa, 100)
    if not _traced(qa) and not np.all((qa >= 0) & (qa <= 1)):
        raise ValueError(f"{name}: {'Percentiles' if percent else 'Quantiles'} must be in the "
                         f"range [{0}, {100 if percent else 1}]")
    if len(shape(qa)) > 1:
        raise ValueError(f"{name}: q must be a scalar or 1d")
    a = arr(a)
    flat, rest, keep = _to_front(a, axis)
    s = sort(flat, axis=0)
    n = shape(s)[0]
    virtual = multiply(wrap_dim(n - 1), qa)
    qshape = _ushape(qa)
    rnd = len(rest)
    if dt.is_int(dtype_of(virtual)):
        r = take(s, clip(virtual, 0, wrap_dim(n - 1)), axis=0)
    else:
        prev = floor(virtual)
        above = greater_equal(virtual, wrap_dim(n - 1))
        below = less(virtual, 0)
        bad = logical_or(above, isnan(virtual))
        pi = where_values(bad, wrap_dim(n - 1), where_values(below, 0, cast(prev, np.int64)))
        nxt = add(cast(prev, np.int64), 1)
        ni = where_values(bad, wrap_dim(n - 1), where_values(below, 0, nxt))
        gamma = subtract(virtual, prev)
        if weak_q:
            gamma = _weak(gamma)
        else:
            gamma = reshape(gamma, (*qshape, *(1,) * rnd))
        lo, hi = take(s, pi, axis=0), take(s, ni, axis=0)
        diff = subtract(hi, lo)
        rest_w = 1 - gamma if isinstance(gamma, float) else subtract.as_operator(1, gamma)  # stays weak
        r = where_values(greater_equal(gamma, 0.5), subtract(hi, multiply(diff, rest_w)),
                         add(lo, multiply(diff, gamma)))
    r = _nan_fill(s, r, len(qshape))
    if keepdims:
        r = reshape(r, (*qshape, *keep))
    return r


def _weak(x):
    """A traced 0-d float as a weak one (NumPy's ``float(gamma)`` for a Python ``q``)."""
    if isinstance(x, Tracer):
        return lax.convert.bind(x, dtype=x.dtype, weak=True)
    return float(x)


# -- interpolation --------------------------------------------------------------------------

def interp(x, xp, fp, left=None, right=None, period=None):
    """``numpy.interp`` (float64, as NumPy for real data): the segment of each ``x`` found by
    ``searchsorted``, ``fp[j] + slope * (x - xp[j])``; exact hits return ``fp[j]``."""
    if period is not None:
        raise NotImplementedError("interp: period= is not supported")
    f64 = np.dtype("float64")
    x, xp, fp = (cast(arr(v), f64) for v in (x, xp, fp))
    if len(shape(xp)) != 1 or len(shape(fp)) != 1:
        raise ValueError("interp: xp and fp must be one-dimensional")
    m = shape(xp)[0]
    if isinstance(m, int) and m == 0:
        raise ValueError("interp: array of sample points is empty")
    last = wrap_dim(m - 1)
    j = subtract(searchsorted(xp, x, "right"), 1)
    j0 = clip(j, 0, wrap_dim(dmax(m - 2, 0)))
    j1 = clip(add(j0, 1), 0, last)
    x0, x1, y0, y1 = take(xp, j0), take(xp, j1), take(fp, j0), take(fp, j1)
    slope = true_divide(subtract(y1, y0), subtract(x1, x0))
    r = add(multiply(slope, subtract(x, x0)), y0)
    r = where_values(isnan(r), add(multiply(slope, subtract(x, x1)), y1), r)
    r = where_values(logical_and(isnan(r), equal(y0, y1)), y0, r)
    r = where_values(equal(x0, x), y0, r)
    r = where_values(equal(j, last), fp[-1], r)
    lv = fp[0] if left is None else cast(left if is_python_scalar(left) else arr(left), f64)
    rv = fp[-1] if right is None else cast(right if is_python_scalar(right) else arr(right), f64)
    r = where_values(less(x, xp[0]), lv, r)
    return _strong(where_values(greater(x, xp[-1]), rv, r))
