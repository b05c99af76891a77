"""Indexing: basic slicing with symbolic bounds, integer-array gathers, boolean masks, nonzero."""
from __future__ import annotations

import numpy as np
import sympy

from .. import dtypes as dt
from .. import lax
from ..core import Tracer
from ..errors import InconclusiveDimensionError
from ..lax.util import broadcast_shapes, normalize_axis
from ..shapes import (SymbolicDim, as_dim, dim_str, dmax, dmin, floordiv, is_symbolic, normalize,
                      prod, wrap_dim)
from ._base import arr, cast, dtype_of, env, shape, view
from ._shape_ops import moveaxis, ravel, reshape, stack, transpose
from ._ufuncs import clip as clip_values, not_equal, subtract, where_values


def _index_bound(v, d, step_positive: bool, what: str):
    """Normalise a start/stop against a dim of size ``d`` the way Python slices do."""
    e = env()
    v = as_dim(v, what)
    lo, hi = (0, d) if step_positive else (-1, d - 1)
    try:
        nonneg = e.decide(">=", v, 0, f"sign of the slice {what} {dim_str(v)}")
    except InconclusiveDimensionError:
        raise InconclusiveDimensionError(
            f"slice {what} {dim_str(v)} may be negative or not; NumPy would count a negative bound "
            f"from the end. Fix: write the bound so that its sign is known (e.g. n - 1 with n >= 1)."
        ) from None
    # a bound given by other dims (``in_field[1:I + 3]`` with I from another argument):
    # automatic mode guards which side of the clamp it is on (``I + 3 <= n`` holds at every
    # call such a kernel is meant for), so shapes stay plain expressions -- SymPy's Min/Max
    # of two dims cost milliseconds apiece and block the proofs fusion needs.  A number
    # (``x[:100]``, ``x[-3:]``) stays clamped: one trace serves every size.
    guard = is_symbolic(v)
    if nonneg:
        return _clamp(v, hi, True, guard, what)
    return _clamp(normalize(d + v), lo, False, guard, what)


def _clamp(v, bound, upper: bool, guard: bool, what: str):
    """``v`` clamped to at most (``upper``) or at least ``bound``: by proof, else (``guard``,
    automatic mode) by a guard on the side it is on, else as a Min/Max."""
    e = env()
    inside, outside = ("<=", ">=") if upper else (">=", "<=")
    if e.try_prove(inside, v, bound):
        return v
    if e.try_prove(outside, v, bound):
        return bound
    if guard and e.can_guard(v, bound):
        return v if e.decide(inside, v, bound, f"slice {what}") else bound
    return dmin(v, bound) if upper else dmax(v, bound)


def _sub(a, b):
    """``a - b`` with ``a - max(x, y)`` written ``min(a - x, a - y)`` (and likewise for min), so
    that clamped slice bounds give sizes like ``min(3, n)`` rather than ``n - max(0, n - 3)``."""
    if isinstance(b, sympy.Max):
        return normalize(sympy.Min(*(sympy.expand(a - x) for x in b.args)))
    if isinstance(b, sympy.Min):
        return normalize(sympy.Max(*(sympy.expand(a - x) for x in b.args)))
    return normalize(sympy.expand(sympy.sympify(a) - b))


def _is_nonneg_number(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0


def _normalize_slice(sl: slice, d):
    """slice -> (start, size, step) with internal dims."""
    step = 1 if sl.step is None else sl.step
    if isinstance(step, SymbolicDim) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"slice steps must be static ints, got {step!r}")
    step = int(step)
    if step == 0:
        raise ValueError("slice step cannot be zero")
    e = env()
    if step > 0:
        stop = d if sl.stop is None else _index_bound(sl.stop, d, True, "stop")
        if _is_nonneg_number(sl.start) and not isinstance(stop, sympy.Min):
            # stop <= d is known: a start past d makes the slice empty whether clamped or
            # not, so it needs no Min(start, d) (x[2:n + 2] with n + 2 <= m has size n)
            start = int(sl.start)
        else:
            start = 0 if sl.start is None else _index_bound(sl.start, d, True, "start")
        span = _sub(stop, start)
        size = floordiv(span + step - 1, step) if step != 1 else span
    else:
        start = normalize(d - 1) if sl.start is None else _index_bound(sl.start, d, False, "start")
        stop = -1 if sl.stop is None else _index_bound(sl.stop, d, False, "stop")
        span = _sub(start, stop)
        size = floordiv(span - step - 1, -step) if step != -1 else span
    if not e.try_prove(">=", size, 0):
        # automatic mode: guard the sign of the size (a[1:-1] is n - 2 long for n >= 2, and
        # empty below), so shapes stay plain expressions that fusion can prove equal
        if e.can_guard(size, 0):
            size = size if e.decide(">=", size, 0, "slice size") else 0
        else:
            size = dmax(size, 0)
    return start, normalize(size), step


def slice_axis(a, axis: int, start, stop):
    """``a`` restricted to ``start:stop`` on one axis (stop None = the end)."""
    nd = len(shape(a))
    idx = tuple(slice(start, stop) if i == axis else slice(None) for i in range(nd))
    return getitem(a, idx)


def _is_int_index(v) -> bool:
    return isinstance(v, (int, np.integer, SymbolicDim)) and not isinstance(v, bool)


def _is_array_index(v) -> bool:
    return isinstance(v, (Tracer, np.ndarray, list)) or (isinstance(v, bool))


class Window:
    """A parsed basic index (ints, slices, None, ``...``) with at most one integer array:
    the strided window ``slice(x, starts, sizes, steps)``, reshaped to ``shape`` (None axes
    inserted, int axes dropped, the array's axis whole), then gathered at ``gather = (axis
    in shape, index array)``; ``moved``: NumPy puts the gathered dims first (``x[0, :, i]``)."""

    def __init__(self, starts, sizes, steps, shape_, gather, moved, whole):
        self.starts, self.sizes, self.steps = tuple(starts), tuple(sizes), tuple(steps)
        self.shape, self.gather, self.moved, self.whole = tuple(shape_), gather, moved, whole

    def read(self, a):
        """``a``'s window, reshaped to ``shape`` (before the gather)."""
        out = a
        if not self.whole:
            out = lax.slice.bind(out, start=self.starts, size=self.sizes, step=self.steps)
        if self.shape != tuple(shape(out)):
            out = lax.reshape.bind(out, new_sizes=self.shape)
        return out

    def result_shape(self) -> tuple:
        """The shape of ``a[idx]``."""
        if self.gather is None:
            return self.shape
        pos, ind = self.gather
        k = tuple(shape(ind))
        if self.moved:
            return k + self.shape[:pos] + self.shape[pos + 1:]
        return self.shape[:pos] + k + self.shape[pos + 1:]


def is_mask_index(a, idx) -> bool:
    """A boolean-array index (``x[mask]``), which must be the only index."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    arrays = [v for v in idx if _is_array_index(v)]
    if arrays and any(dt.is_bool(dtype_of(arr(v))) for v in arrays):
        if len(idx) != 1:
            raise IndexError("a boolean mask index must be the only index (x[mask]); "
                             "index the result in a second step")
        return True
    return False


def _expanded(idx: tuple, nd: int) -> tuple:
    """``idx`` with ``...`` expanded and whole slices padded to index ``nd`` axes; NumPy's
    IndexError for two ellipses or too many indices."""
    if sum(1 for v in idx if v is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for v in idx if v is not None and v is not Ellipsis)
    if consumed > nd:
        raise IndexError(f"too many indices for array: array is {nd}-dimensional, "
                         f"but {consumed} were indexed")
    if any(v is Ellipsis for v in idx):
        pos = next(i for i, v in enumerate(idx) if v is Ellipsis)
        return idx[:pos] + (slice(None),) * (nd - consumed) + idx[pos + 1:]
    return idx + (slice(None),) * (nd - consumed)


def parse_index(a, idx) -> Window:
    """``idx`` (not a boolean mask) against ``a``'s shape."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    arrays = [i for i, v in enumerate(idx) if _is_array_index(v)]
    idx = _expanded(idx, len(shape(a)))
    if len(arrays) > 1:
        raise IndexError("only one integer-array index is supported here (several are, in x[...] "
                         "and in updates whose other axes are whole); index in several steps")

    s = shape(a)
    starts, sizes, steps, out_shape = [], [], [], []
    gather = None     # (position in out_shape, index array)
    ax = 0
    for v in idx:
        if v is None:
            out_shape.append(1)
            continue
        d = s[ax]
        if _is_int_index(v):
            i = as_dim(v, "index")
            e = env()
            # decided by proof, or (automatic shapes) by a guard on the dim's value
            if e.decide("<", i, 0, f"sign of the index {dim_str(i)}"):
                i = normalize(d + i)
            if not (e.decide(">=", i, 0, f"index {dim_str(as_dim(v))} on axis {ax} of size {dim_str(d)}")
                    and e.decide("<", i, d, f"index {dim_str(as_dim(v))} on axis {ax} of size {dim_str(d)}")):
                raise IndexError(f"index {dim_str(as_dim(v))} is out of bounds for axis {ax} with "
                                 f"size {dim_str(d)}")
            starts.append(i), sizes.append(1), steps.append(1)
        elif isinstance(v, slice):
            b, n, st = _normalize_slice(v, d)
            starts.append(b), sizes.append(n), steps.append(st)
            out_shape.append(n)
        elif _is_array_index(v):
            ind = arr(v)
            if not dt.is_int(dtype_of(ind)):
                raise IndexError(f"arrays used as indices must be of integer (or boolean) type, "
                                 f"got {dtype_of(ind)}")
            starts.append(0), sizes.append(d), steps.append(1)
            gather = (len(out_shape), ind)
            out_shape.append(d)
        else:
            raise IndexError(f"unsupported index {v!r} of type {type(v).__name__}")
        ax += 1
    whole = all(isinstance(b, int) and b == 0 for b in starts) and all(st == 1 for st in steps) \
        and tuple(sizes) == tuple(s)
    moved = False
    if gather is not None:
        # NumPy: ints count as advanced indices next to an index array; when the advanced
        # indices are not adjacent (x[0, :, idx]), their result dims go first
        adv = [i for i, v in enumerate(idx) if _is_int_index(v) or _is_array_index(v)]
        moved = adv[-1] - adv[0] + 1 != len(adv) and gather[0] != 0
    return Window(starts, sizes, steps, out_shape, gather, moved, whole)


def scalar_window(a, idx):
    """``a[i, j, ...]`` with two or more traced integer scalars among ints and slices (a loop's
    indices): ``(window, rest, starts)`` where ``window`` is the dynamic slice of size 1 at
    those axes (JAX's semantics: a start out of range is clamped; negative ones count from
    the end first, as NumPy's) and ``rest`` the index to apply to it; None for any other
    index."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    scalars = [v for v in idx if isinstance(v, Tracer) and not shape(v)]
    if len(scalars) < 2 or any(v is None or v is Ellipsis or (_is_array_index(v) and shape(v))
                               for v in idx):
        return None
    if any(not dt.is_int(dtype_of(v)) for v in scalars):
        return None                     # the usual error for non-integer indices
    s = shape(a)
    if len(idx) > len(s):
        return None
    idx = idx + (slice(None),) * (len(s) - len(idx))
    starts, sizes, rest = [], [], []
    for v, d in zip(idx, s):
        if isinstance(v, Tracer) and not shape(v):
            starts.append(where_values(v < 0, v + wrap_dim(d), v))
            sizes.append(1)
            rest.append(0)
        else:
            starts.append(0)
            sizes.append(d)
            rest.append(v)
    return lax.dynamic_slice(a, starts, sizes), tuple(rest), starts


def scalar_first(a, idx):
    """For an index with exactly one traced integer scalar (a loop's index) among ints,
    slices, None and ``...``: ``(axis, scalar, rest)`` with ``a[idx] == take(a, scalar,
    axis)[rest]`` (NumPy treats a 0-d integer array as an int); None for any other index.
    Taking the row first reads one row, where slicing first would copy every row of the
    window to keep one (``A[i - 1, :-2]`` in a stencil's row loop)."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    scalars = [k for k, v in enumerate(idx) if isinstance(v, Tracer) and not shape(v)]
    if len(scalars) != 1 or not dt.is_int(dtype_of(idx[scalars[0]])):
        return None
    k = scalars[0]
    if any(j != k and not (v is None or v is Ellipsis or isinstance(v, slice) or _is_int_index(v))
           for j, v in enumerate(idx)):
        return None                      # another array (or bool) index: the general path
    nd = len(shape(a))
    consumed = sum(1 for v in idx if v is not None and v is not Ellipsis)
    if consumed > nd or sum(1 for v in idx if v is Ellipsis) > 1:
        return None                      # the general path raises NumPy's error
    ax = 0
    for v in idx[:k]:
        ax += nd - consumed if v is Ellipsis else 0 if v is None else 1
    return ax, idx[k], idx[:k] + idx[k + 1:]


def getitem(a, idx):
    """``a[idx]``: ints, slices (static or symbolic bounds, negative steps), None, Ellipsis,
    integer-array indices (several: ``merged_index``; or any number of traced integer
    scalars, see ``scalar_window``), or one leading boolean mask.  Without an array index the result is a view of ``a``
    (writing into it while ``a`` lives is an error)."""
    a = arr(a)
    win = scalar_window(a, idx) if isinstance(a, Tracer) else None
    if win is not None:
        return getitem(win[0], win[1])
    first = scalar_first(a, idx)
    if first is not None:
        ax, i, rest = first
        return getitem(take(a, i, axis=ax), rest)
    if is_mask_index(a, idx):
        return boolean_mask(a, idx if not isinstance(idx, tuple) else idx[0])
    several = several_array_indices(a, idx)
    if several is not None:             # the basic part first, then one gather
        idx, adv = several
        sliced = getitem(a, tuple(slice(None) if j in adv else v for j, v in enumerate(idx)))
        merged, index, perm = merged_index(sliced, idx, adv)
        return getitem(merged, (slice(None),) * (adv[0] if perm is None else 0) + (index,))
    w = parse_index(a, idx)
    out = w.read(a)
    if w.gather is None:
        return view(out, a)
    pos, ind = w.gather
    out = take(out, ind, axis=pos)
    if w.moved:
        k = len(shape(ind))
        out = moveaxis(out, list(range(pos, pos + k)), list(range(k)))
    return out


def several_array_indices(a, idx):
    """``(idx, adv)`` for an index with several integer arrays (``x[rows, cols]``,
    ``logits[arange(n), labels]``): ``idx`` with ``...`` expanded and padded to one entry
    per axis of ``a[basic part]`` (None a new axis, an indexed axis whole), ``adv`` the
    positions of the arrays and of the ints beside them (NumPy counts those as 0-d arrays);
    None for any other index."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if sum(1 for v in idx if _is_array_index(v)) < 2 or any(isinstance(v, SymbolicDim) for v in idx):
        return None
    idx = _expanded(idx, len(shape(a)))
    return idx, [j for j, v in enumerate(idx) if _is_array_index(v) or _is_int_index(v)]


def merged_index(a, idx, adv, clip: bool = False, check: bool = True):
    """``(merged, index, perm)`` with ``a[idx] == merged[(slice(None),) * at + (index,)]``
    where ``a`` has one axis per entry of ``idx`` and ``adv`` (``several_array_indices``)
    are its indexed axes, ``at`` their first position when adjacent, else 0 (NumPy puts
    their result dims first): ``merged`` is ``a`` with those axes moved together
    (``transpose(a, perm)``, ``perm`` None where they already are) and merged into one,
    ``index`` the row-major position of each indexed element in it.  A component out of
    its axis's range makes the position out of the merged axis's range, which the gather
    or scatter reports or drops (no component wraps into another); ``clip``: each
    component clipped to its axis instead.  ``check``: a constant component out of range is
    NumPy's IndexError now, naming its axis."""
    inds = []
    for j in adv:
        d, v = shape(a)[j], idx[j]
        if check and isinstance(v, (np.ndarray, list, int, np.integer)) and np.size(v):
            # decided as parse_index decides an int's range (a guard on a symbolic size)
            lo, hi = int(np.min(v)), int(np.max(v))
            axis = sum(1 for e in idx[:j] if e is not None)
            what = f"index on axis {axis} of size {dim_str(d)}"
            for i, ok in ((hi, env().decide("<", hi, d, what)), (lo, env().decide(">=", lo + d, 0, what))):
                if not ok:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim_str(d)}")
        ind = arr(np.int64(idx[j]) if _is_int_index(idx[j]) else idx[j])
        if not dt.is_int(dtype_of(ind)):
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, "
                             f"got {dtype_of(ind)}")
        inds.append(cast(ind, np.int64))
    try:
        broadcast_shapes(env(), [tuple(shape(i)) for i in inds], "indexing arrays")
    except ValueError:                  # (ShapeError too): NumPy's IndexError
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with shapes " +
                         " ".join("(" + ", ".join(dim_str(d) for d in shape(i)) + ")" for i in inds)) from None
    dims = [shape(a)[j] for j in adv]
    position, bad = None, None
    for ind, d in zip(inds, dims):
        n = wrap_dim(d)
        c = where_values(ind < 0, ind + n, ind)
        if clip:
            c = clip_values(c, 0, n - 1)
        out = (c < 0) | (c >= n)
        position = c if position is None else position * n + c
        bad = out if bad is None else bad | out
    total = prod(dims)
    if not clip:
        position = where_values(bad, wrap_dim(total), position)
    k = len(adv)
    perm = None
    if adv != list(range(adv[0], adv[0] + k)):
        perm = adv + [j for j in range(len(idx)) if j not in adv]
        a = transpose(a, perm)
    at = adv[0] if perm is None else 0
    s = shape(a)
    return reshape(a, tuple(s[:at]) + (wrap_dim(total),) + tuple(s[at + k:])), position, perm


def take(a, indices, axis=None):
    """``numpy.take`` (negative indices count from the end; out-of-range is an error)."""
    a = arr(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, len(shape(a)))
    ind = arr(indices)
    if not dt.is_int(dtype_of(ind)):
        raise IndexError(f"arrays used as indices must be of integer type, got {dtype_of(ind)}")
    return lax.take.bind(a, cast(ind, np.int64), axis=ax)


def take_along_axis(arr_, indices, axis):
    """``numpy.take_along_axis``."""
    a, ind = arr(arr_), arr(indices)
    if axis is None:
        a, ind, axis = ravel(a), ravel(ind), 0
    ax = normalize_axis(axis, len(shape(a)))
    return lax.take_along_axis.bind(a, cast(ind, np.int64), axis=ax)


def _count_dim(mask, *others):
    """The number of non-zeros of ``mask``: a fresh run-time dim when any operand is traced,
    else the actual count (eager mode)."""
    for v in (mask, *others):
        if isinstance(v, Tracer):
            return v.ctx.env.fresh("nz")
    return int(np.count_nonzero(mask))


def nonzero(a):
    """``numpy.nonzero``: a tuple of int64 index arrays whose length is a run-time dim."""
    a = arr(a)
    if len(shape(a)) == 0:
        raise ValueError("nonzero of a 0-d array is not supported; use atleast_1d first")
    return tuple(lax.nonzero.bind(a, count=_count_dim(a)))


def argwhere(a):
    return stack(nonzero(a), axis=-1)


def boolean_mask(a, mask):
    """``a[mask]`` for a bool mask covering the leading axes; the length is a run-time dim."""
    a, m = arr(a), arr(mask)
    return lax.boolean_mask.bind(a, m, count=_count_dim(m, a))


def where(condition, x=None, y=None):
    """``numpy.where``: select elementwise; with one argument, the indices of non-zeros."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    return where_values(condition, x, y)


def split(a, indices_or_sections, axis: int = 0):
    """``numpy.split``: equal sections (divisibility is proved or guarded) or split points."""
    a = arr(a)
    ax = normalize_axis(axis, len(shape(a)))
    d = shape(a)[ax]
    if isinstance(indices_or_sections, (list, tuple)):
        points = [0] + [as_dim(p) for p in indices_or_sections] + [None]
        return [slice_axis(a, ax, points[i], points[i + 1]) for i in range(len(points) - 1)]
    k = as_dim(indices_or_sections, "sections")
    if not isinstance(k, int) or k <= 0:
        raise ValueError(f"number of sections must be a positive int, got {indices_or_sections}")
    if not env().divides(d, k, f"split of axis {ax} ({dim_str(d)}) into {k} sections"):
        raise ValueError(f"array split does not result in an equal division: axis {ax} has size "
                         f"{dim_str(d)}, not a multiple of {k}")
    size = floordiv(d, k)
    return [slice_axis(a, ax, size * i, size * (i + 1)) for i in range(k)]


def array_split(a, indices_or_sections, axis: int = 0):
    """``numpy.array_split``: like ``split``, but ``k`` sections need not divide the axis (the
    first ``size % k`` sections get one element more)."""
    if isinstance(indices_or_sections, (list, tuple)):
        return split(a, indices_or_sections, axis)
    a = arr(a)
    ax = normalize_axis(axis, len(shape(a)))
    d = shape(a)[ax]
    k = as_dim(indices_or_sections, "sections")
    if not isinstance(k, int) or k <= 0:
        raise ValueError(f"number of sections must be a positive int, got {indices_or_sections}")
    # section i has ceil((d - i) / k) elements: no min/max, one trace for every size
    sizes = [floordiv(d - i + k - 1, k) for i in range(k)]
    out, start = [], 0
    nd = len(shape(a))
    for size in sizes:
        out.append(lax.slice.bind(a, start=tuple(start if i == ax else 0 for i in range(nd)),
                                  size=tuple(size if i == ax else shape(a)[i] for i in range(nd)),
                                  step=(1,) * nd))
        start = start + size if not (isinstance(start, int) and start == 0) else size
    return out


def flip(a, axis=None):
    """``numpy.flip`` (a slice with step -1 on each axis)."""
    a = arr(a)
    nd = len(shape(a))
    axes = range(nd) if axis is None else [normalize_axis(x, nd) for x in
                                           (axis if isinstance(axis, (tuple, list)) else (axis,))]
    idx = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(nd))
    return getitem(a, idx)


def fliplr(a):
    return flip(a, 1)


def flipud(a):
    return flip(a, 0)


def diff(a, n: int = 1, axis: int = -1):
    """``numpy.diff``: ``n`` times the differences of neighbours along ``axis`` (``!=`` on
    bools, as NumPy)."""
    a = arr(a)
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"diff: order must be a non-negative int, got {n!r}")
    nd = len(shape(a))
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    ax = normalize_axis(axis, nd)
    for _ in range(int(n)):
        hi, lo = slice_axis(a, ax, 1, None), slice_axis(a, ax, 0, -1)
        a = not_equal(hi, lo) if dt.is_bool(dtype_of(a)) else subtract(hi, lo)
    return a
