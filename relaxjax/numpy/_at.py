"""Indexed updates: JAX's ``x.at[idx].set(v)`` (and add, multiply, min, ...) and NumPy's
``x[idx] = v`` / ``x[idx] += v`` on traced arrays.

Both are functional: the result is a new value and the caller's arrays are never written.
``x[idx] = v`` rebinds the tracer ``x`` to the updated value (the name sees the update, as
in NumPy; another name for the same tracer, ``y = x``, too).  An index is parsed like
``x[idx]`` (``_indexing.parse_index``): a window of ints, slices, None and ``...`` becomes
one ``update_slice`` (a compute rule that fuses with the value's producer); an integer
array becomes a ``scatter`` into the window; a boolean mask a ``where`` (a value that
broadcasts over the masked rows) or a scatter at ``nonzero(mask)``.

The two spellings keep their library's semantics where they differ:

* ``x.at[i].add(v)`` with repeated indices accumulates (``np.add.at``), ``x[i] += v``
  applies once per distinct index (NumPy reads, adds, then assigns; the last write wins);
* out-of-range entries of an index array are dropped by ``.at`` (JAX's default
  ``mode="drop"``; ``mode="clip"`` clamps them) and an IndexError for ``x[i] = v`` (NumPy);
  a static int index out of range is an IndexError in both (JAX would drop it);
* ``.at[idx].get()`` is ``x[idx]`` (an index array out of range is an IndexError, as NumPy);
* the value is cast to ``x``'s dtype before it is combined (JAX; NumPy's assignment casts
  the same way), and ``divide``/``power`` at repeated indices divide by / raise to the
  product of their values, as JAX does.
"""
from __future__ import annotations

import numpy as np

from .. import lax
from ..core import Tracer, current_trace
from ..errors import ShapeError
from ..shapes import dim_str, prod as dim_prod, wrap_dim
from ._base import arr, cast, dtype_of, live_bases, shape, user_shape
from ._indexing import (getitem, is_mask_index, merged_index, nonzero, parse_index, scalar_first,
                        scalar_window, several_array_indices, take)
from ._shape_ops import broadcast_to, moveaxis, reshape, transpose
from ._ufuncs import clip, where_values

# .at method -> (elementwise combine on the window, scatter mode at an index array)
_COMBINE = {
    "set": (None, "set"),
    "add": ("add", "add"),
    "subtract": ("subtract", "add"),       # scatter-adds the negated values
    "multiply": ("multiply", "mul"),
    "divide": ("true_divide", "mul"),      # x / (product of the values at each index)
    "power": ("power", "mul"),             # x ** (product of the values at each index)
    "min": ("minimum", "min"),
    "max": ("maximum", "max"),
}
_MODES = {None: "drop", "drop": "drop", "fill": "drop", "promise_in_bounds": "drop",
          "clip": "clip"}


def _fmt(s) -> str:
    return "(" + ", ".join(dim_str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def _value(x, v, target: tuple, what: str):
    """``v`` cast to ``x``'s dtype and broadcast to ``target`` (the indexed shape)."""
    xd = dtype_of(x)
    if isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic):
        v = cast(v, xd)                 # a Python int out of range: OverflowError, as NumPy
    else:
        v = arr(v)
        if dtype_of(v) != xd:
            v = cast(v, xd)
    try:
        return broadcast_to(v, target)
    except (ShapeError, ValueError) as e:
        raise ShapeError(f"{what}: the value of shape {_fmt(shape(v))} cannot be broadcast to the "
                         f"indexed shape {_fmt(target)} ({e})") from None


def _elementwise(name: str, a, b):
    from . import _ufuncs
    return getattr(_ufuncs, name)(a, b)


def update(x, idx, v, method: str, *, mode=None, numpy_semantics: bool = False):
    """``x`` with ``x[idx]`` combined with ``v`` by ``method`` (a key of ``_COMBINE``); a new
    value, ``x`` untouched."""
    x = arr(x)
    what = "x[...] = value" if numpy_semantics else f"x.at[...].{method}"
    if method not in _COMBINE:
        raise AttributeError(f"x.at[...] has no method {method!r}")
    if mode not in _MODES:
        raise ValueError(f"{what}: mode must be one of {[m for m in _MODES if m]}, got {mode!r}")
    oob = "error" if numpy_semantics else _MODES[mode]
    xd = dtype_of(x)
    elementwise, scatter_mode = _COMBINE[method]
    win = scalar_window(x, idx) if isinstance(x, Tracer) else None
    if win is not None:                 # x[i, j] = v with traced scalars: a dynamic window
        window, rest, starts = win
        return lax.dynamic_update_slice(x, update(window, rest, v, method, mode=mode,
                                                  numpy_semantics=numpy_semantics), starts)
    first = scalar_first(x, idx)
    if first is not None:               # x[i, 1:-1] = v with a traced i: update the row only
        ax, i, rest = first
        d = shape(x)[ax]
        i = _index_array(i, d, oob, what)
        # the row is read where the scatter will write it (out of range: clipped for
        # mode="clip", dropped by the scatter otherwise, an IndexError under NumPy's rules)
        at = i if oob == "error" else clip(where_values(i < 0, i + wrap_dim(d), i), 0, wrap_dim(d) - 1)
        row = update(take(x, at, axis=ax), rest, v, method, mode=mode, numpy_semantics=numpy_semantics)
        return lax.scatter.bind(x, i, row, axis=ax, mode="set", oob=oob)
    if is_mask_index(x, idx):
        return _mask_update(x, idx[0] if isinstance(idx, tuple) else idx, v, method, what)
    several = several_array_indices(x, idx)
    if several is not None:             # x[rows, cols] = v: one scatter on the merged axes
        idx, adv = several
        if any(j not in adv and not (isinstance(e, slice) and e == slice(None)) for j, e in enumerate(idx)):
            raise IndexError(f"{what}: several integer-array indices beside slices or None are "
                             f"not supported in an update; update x[...] in two steps (a slice "
                             f"of x, then x with it set)")
        merged, index, perm = merged_index(x, idx, adv, clip=oob == "clip", check=oob == "error")
        at = adv[0] if perm is None else 0
        new = update(merged, (slice(None),) * at + (index,), v, method, mode=mode,
                     numpy_semantics=numpy_semantics)
        if perm is None:
            return reshape(new, user_shape(shape(x)))
        new = reshape(new, user_shape(tuple(shape(x)[p] for p in perm)))
        return transpose(new, [perm.index(j) for j in range(len(perm))])
    w = parse_index(x, idx)
    if w.gather is None:
        new = _value(x, v, w.shape, what)
        if elementwise is not None:
            new = cast(_elementwise(elementwise, w.read(x), new), xd)
    else:
        pos, ind = w.gather
        new = _value(x, v, w.result_shape(), what)
        if w.moved:                                     # back to the window's axis order
            k = len(shape(ind))
            new = moveaxis(new, list(range(k)), list(range(pos, pos + k)))
        ind = _index_array(ind, w.shape[pos], oob, what)
        sub = w.read(x)
        if method == "subtract":
            new = cast(_elementwise("subtract", cast(0, xd), new), xd)
        if method in ("divide", "power"):
            ones = broadcast_to(cast(1, xd), shape(sub))
            factor = lax.scatter.bind(ones, ind, new, axis=pos, mode="mul", oob=oob)
            new = cast(_elementwise(elementwise, sub, factor), xd)
        else:
            new = lax.scatter.bind(sub, ind, new, axis=pos, mode=scatter_mode, oob=oob)
    if w.whole:
        return reshape(new, user_shape(shape(x))) if tuple(shape(new)) != tuple(shape(x)) else \
            _copy(new, x)
    if tuple(shape(new)) != w.sizes:
        new = lax.reshape.bind(new, new_sizes=w.sizes)
    return lax.update_slice.bind(x, new, start=w.starts, size=w.sizes, step=w.steps)


def _copy(new, x):
    """A result that is ``x`` itself (``x.at[...].set(x)``) as a new tracer."""
    return Tracer(x.ctx, x.atom) if new is x and isinstance(x, Tracer) else new


def _index_array(ind, d, oob: str, what: str):
    """Integer indices as int64; constant ones out of range are an IndexError now under
    NumPy's semantics (traced ones are checked when the program runs)."""
    if isinstance(ind, np.ndarray) and oob == "error" and ind.size and isinstance(d, int):
        lo, hi = int(ind.min()), int(ind.max())
        if lo < -d or hi >= d:
            raise IndexError(f"{what}: index {lo if lo < -d else hi} is out of bounds for an axis "
                             f"of size {d}")
    return cast(ind, np.int64)


def _mask_update(x, mask, v, method: str, what: str):
    """``x[mask] op= v``: a value that broadcasts over the masked rows (a scalar, or one row)
    selects elementwise; one with a leading axis of the mask's count scatters into the
    positions ``nonzero(mask)`` gives (their number is checked when the program runs)."""
    m = arr(mask)
    xd = dtype_of(x)
    s = shape(x)
    k = len(shape(m))
    if k > len(s):
        raise IndexError(f"{what}: a boolean mask of rank {k} for an array of rank {len(s)}")
    rest = tuple(s[k:])
    elementwise, scatter_mode = _COMBINE[method]
    vs = shape(arr(v)) if not isinstance(v, (bool, int, float, complex)) else ()
    if len(vs) <= len(rest) or (len(vs) == len(rest) + 1 and isinstance(vs[0], int) and vs[0] == 1):
        if len(vs) == len(rest) + 1:
            v = reshape(arr(v), user_shape(vs[1:]))
        row = _value(x, v, rest, what)
        new = row if elementwise is None else cast(_elementwise(elementwise, x, row), xd)
        sel = reshape(m, user_shape(tuple(shape(m)) + (1,) * len(rest)))
        return lax.select.bind(broadcast_to(sel, user_shape(s)), broadcast_to(new, user_shape(s)), x)
    # one value per True element: scatter at the flat positions of the mask
    nz = nonzero(m)
    flat = None
    for axis, i in enumerate(nz):
        stride = dim_prod(shape(m)[axis + 1:])
        term = i if isinstance(stride, int) and stride == 1 else _elementwise("multiply", i, stride)
        flat = term if flat is None else _elementwise("add", flat, term)
    count = shape(nz[0])[0]
    vals = arr(v)
    if dtype_of(vals) != xd:
        vals = cast(vals, xd)
    if len(vs) != len(rest) + 1:
        raise ShapeError(f"{what}: the value of shape {_fmt(vs)} does not fit the masked shape "
                         f"(count, {', '.join(dim_str(d) for d in rest)})")
    vals = broadcast_to(vals, user_shape((vs[0],) + rest))
    vals = lax.match_cast.bind(vals, shape=(count,) + rest)
    flat_x = reshape(x, user_shape((dim_prod(shape(m)),) + rest))
    if method == "subtract":
        vals = cast(_elementwise("subtract", cast(0, xd), vals), xd)
    if method in ("divide", "power"):
        factor = lax.scatter.bind(broadcast_to(cast(1, xd), shape(flat_x)), flat, vals, axis=0,
                                  mode="mul", oob="drop")
        out = cast(_elementwise(elementwise, flat_x, factor), xd)
    else:
        out = lax.scatter.bind(flat_x, flat, vals, axis=0, mode=scatter_mode, oob="drop")
    return reshape(out, user_shape(s))


class _IndexUpdateRef:
    """``x.at[idx]``: the methods return updated copies of ``x``."""
    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array, self.index = array, index

    def __repr__(self) -> str:
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, mode=None, indices_are_sorted=False, unique_indices=False, fill_value=None):
        """``x[idx]``."""
        if mode not in (None, "promise_in_bounds"):
            raise NotImplementedError(f"x.at[...].get(mode={mode!r}): only NumPy's indexing "
                                      f"(an out-of-range index is an IndexError) is supported")
        return getitem(self.array, self.index)

    def _update(self, method, values, mode):
        return update(self.array, self.index, values, method, mode=mode)

    def set(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[idx] = values``, as a new array."""
        return self._update("set", values, mode)

    def add(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[idx] += values``; repeated indices accumulate (``np.add.at``)."""
        return self._update("add", values, mode)

    def subtract(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update("subtract", values, mode)

    def multiply(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update("multiply", values, mode)

    mul = multiply

    def divide(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update("divide", values, mode)

    def power(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update("power", values, mode)

    def min(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[idx] = minimum(x[idx], values)``, repeated indices included."""
        return self._update("min", values, mode)

    def max(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update("max", values, mode)


class IndexUpdateHelper:
    """``x.at``: ``x.at[idx]`` names the elements an update method applies to."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index) -> _IndexUpdateRef:
        return _IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"IndexUpdateHelper({self.array!r})"


def _check_writable(x: Tracer, what: str) -> None:
    bases = live_bases(x)
    if bases:
        raise ValueError(
            f"{what}: writing into a view ({x.type}, from basic indexing, reshape, transpose, "
            f"... of an array {bases[0].type} that is still alive): NumPy would change that "
            f"array too, which a traced value cannot do. Write into the array itself "
            f"(x[i, j] = v rather than row = x[i]; row[j] = v), or take a copy first "
            f"(row = x[i].copy())")


def _check_local(x: Tracer, what: str) -> None:
    """Inside a loop body or a branch, an array of the enclosing function cannot be written:
    NumPy would change it for the later iterations and after the loop."""
    cur = current_trace()
    if cur is not None and x.ctx is not cur:
        raise ValueError(
            f"{what}: writing into an array of the enclosing function ({x.type}) inside a loop "
            f"body or a branch (relaxjax.lax.fori_loop, while_loop, scan, cond): NumPy would "
            f"change it for later iterations and after the loop, which a traced value cannot "
            f"do. Pass it through the loop's carry, or write into a copy (y = x.copy())")


def setitem(x: Tracer, idx, v) -> None:
    """``x[idx] = v`` on a traced array: ``x`` is rebound to the updated value."""
    if x.stale is not None and x.stale[0] is v:
        x.stale = None              # x[i] += v: the view's new value is stored back
    _check_local(x, "x[...] = value")
    _check_writable(x, "x[...] = value")
    new = update(x, idx, v, "set", numpy_semantics=True)
    if new.weak_type != x.weak_type:
        new = lax.convert.bind(new, dtype=x.dtype, weak=x.weak_type)
    x.atom = new.atom


def inplace(name: str):
    """``x op= v`` (``__iadd__`` ...): NumPy computes into ``x`` (same-kind casting) and every
    name for ``x`` sees it, so the tracer is rebound.  On a view of a live array (``x[i] +=
    v`` reads ``x[i]`` first) the result is a new value that the following assignment
    stores."""
    def op(self, other):
        from . import _ufuncs
        _check_local(self, f"x.__i{name}__(value)")
        r = getattr(_ufuncs, name)(self, other)
        if dtype_of(r) != self.dtype:
            if not np.can_cast(dtype_of(r), self.dtype, "same_kind"):
                raise TypeError(f"Cannot cast ufunc '{name}' output from {dtype_of(r)} to "
                                f"{self.dtype} with casting rule 'same_kind'")
            r = cast(r, self.dtype)
        if tuple(shape(r)) != tuple(shape(self)):
            raise ShapeError(f"non-broadcastable output operand with shape {_fmt(shape(self))} "
                             f"doesn't match the broadcast shape {_fmt(shape(r))}")
        bases = live_bases(self)
        if bases:
            new = r if r is not self else Tracer(self.ctx, self.atom)
            for base in bases:      # until new is stored back into it (x[i] += v does)
                base.stale = (new, (
                    f"an array {base.type} is used after an in-place {name} wrote into a view of it "
                    f"({self.type}, from basic indexing, reshape, transpose, ...; e.g. row = "
                    f"x[i]; row += v): NumPy changed that array too, which a traced value cannot "
                    f"do. Write into the array itself (x[i] += v), or take a copy first "
                    f"(row = x[i].copy())"))
            return new
        if r.weak_type != self.weak_type:
            r = lax.convert.bind(r, dtype=self.dtype, weak=self.weak_type)
        self.atom = r.atom
        return self
    op.__name__ = f"__i{name}__"
    return op


# NumPy's ufunc.at: unbuffered, so repeated indices accumulate; an index out of range is an
# IndexError.  The x.at[] method each ufunc combines with.
UFUNC_AT = {"add": "add", "subtract": "subtract", "multiply": "multiply", "true_divide": "divide",
            "divide": "divide", "maximum": "max", "minimum": "min", "power": "power"}


def ufunc_at(name: str):
    """``np.<name>.at(a, indices, b)``: on a traced ``a`` the tracer is rebound to the
    updated value (every name for ``a`` sees it, as NumPy's in-place update); on a NumPy
    array NumPy's own."""
    def at(a, indices, b=None):
        what = f"numpy.{name}.at"
        if not isinstance(a, Tracer):
            if any(isinstance(x, Tracer) for x in (indices, b)) or current_trace() is not None:
                raise TypeError(
                    f"{what}: the array updated is a NumPy array ({np.asarray(a).dtype}"
                    f"{list(np.shape(a))}) and the indices or values are traced: a NumPy array "
                    f"cannot hold traced values. Create it with relaxjax.numpy (rnp.zeros(...)) "
                    f"or rnp.asarray(a) so that it is traced")
            getattr(np, name).at(a, indices, b)
            return None
        if b is None:
            raise TypeError(f"{what}: relaxjax needs the second operand b")
        _check_local(a, what)
        _check_writable(a, what)
        new = update(a, indices, b, UFUNC_AT[name], numpy_semantics=True)
        if new.weak_type != a.weak_type:
            new = lax.convert.bind(new, dtype=a.dtype, weak=a.weak_type)
        a.atom = new.atom
        return None
    at.__name__ = "at"
    return at
