"""Shape manipulation: reshape, transpose, broadcasting, joining, tiling, padding, tri."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dtypes as dt
from .. import lax
from ..errors import ShapeError
from ..lax.util import normalize_axis
from ..shapes import as_dim, dim_str, floordiv, prod as dim_prod
from ._base import arr, cast, dtype_of, env, promote, shape, view
from ._ufuncs import add, less_equal, where_values


def _as_shape(s, what="shape") -> tuple:
    if isinstance(s, (tuple, list)):
        return tuple(as_dim(d, what) for d in s)
    return (as_dim(s, what),)


def reshape(a, shape_=None, order: str = "C", *, newshape=None, shape=None):
    """``numpy.reshape`` with one ``-1`` allowed and symbolic sizes (``(n * 4,)``)."""
    new = shape if shape is not None else (shape_ if shape_ is not None else newshape)
    if order != "C":
        raise ValueError("only order='C' reshapes are supported")
    a = arr(a)
    old = _shape(a)
    sizes = list(_as_shape(new, "reshape size"))
    total = dim_prod(old)
    holes = [i for i, d in enumerate(sizes) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ValueError("can only specify one unknown dimension (-1)")
    for d in sizes:
        if isinstance(d, int) and d < -1:
            raise ValueError(f"negative size {d} in reshape")
    if holes:
        known = dim_prod(d for i, d in enumerate(sizes) if i != holes[0])
        e = env()
        if e.try_prove("==", known, 0):
            raise ValueError(f"cannot reshape {_fmt(old)} into {_fmt(sizes)}: -1 with a zero-size dim")
        if not e.divides(total, known, f"reshape {_fmt(old)} -> {_fmt(sizes)}"):
            raise ShapeError(f"cannot reshape array of shape {_fmt(old)} into {_fmt(sizes)}: "
                             f"{dim_str(total)} is not a multiple of {dim_str(known)}")
        sizes[holes[0]] = floordiv(total, known)
    sizes = tuple(sizes)
    if sizes == tuple(old):
        return a
    return view(lax.reshape.bind(a, new_sizes=sizes), a)


def _shape(a):
    return shape(a)


def _fmt(s) -> str:
    return "(" + ", ".join(dim_str(d) for d in s) + ")"


def ravel(a, order: str = "C"):
    """``numpy.ravel``."""
    return reshape(a, (-1,), order)


def transpose(a, axes=None):
    """``numpy.transpose`` (``.T`` reverses the axes)."""
    a = arr(a)
    nd = len(shape(a))
    perm = tuple(range(nd))[::-1] if axes is None else tuple(normalize_axis(x, nd) for x in axes)
    if perm == tuple(range(nd)):
        return a
    return view(lax.transpose.bind(a, perm=perm), a)


def permute_dims(a, axes=None):
    return transpose(a, axes)


def swapaxes(a, axis1: int, axis2: int):
    """``numpy.swapaxes``."""
    a = arr(a)
    nd = len(shape(a))
    perm = list(range(nd))
    i, j = normalize_axis(axis1, nd), normalize_axis(axis2, nd)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    """``numpy.moveaxis``."""
    a = arr(a)
    nd = len(shape(a))
    src = [normalize_axis(s, nd) for s in (source if isinstance(source, (tuple, list)) else [source])]
    dst = [normalize_axis(s, nd) for s in (destination if isinstance(destination, (tuple, list)) else [destination])]
    if len(src) != len(dst):
        raise ValueError("source and destination must have the same number of elements")
    order = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def broadcast_to(a, shape_):
    """``numpy.broadcast_to`` (materialised: the result is a new array)."""
    a = arr(a)
    target = _as_shape(shape_)
    if tuple(shape(a)) == target:
        return a
    return view(lax.broadcast_to.bind(a, shape=target), a)    # NumPy's is a read-only view


def broadcast_arrays(*args):
    from ..lax.util import broadcast_shapes
    xs = [arr(a) for a in args]
    s = broadcast_shapes(env(), [shape(x) for x in xs], "broadcast_arrays")
    return [broadcast_to(x, s) for x in xs]


def expand_dims(a, axis):
    """``numpy.expand_dims`` (int or tuple of axes)."""
    a = arr(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = len(shape(a)) + len(axes)
    axes = sorted(normalize_axis(x, nd) for x in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis in expand_dims")
    it = iter(shape(a))
    new = tuple(1 if i in axes else next(it) for i in range(nd))
    return view(lax.reshape.bind(a, new_sizes=new), a)


def squeeze(a, axis=None):
    """``numpy.squeeze``.  Without ``axis``: dims known to be 1, and in automatic mode the
    symbolic dims that are 1 in this trace (behind a guard)."""
    a = arr(a)
    s = shape(a)
    if axis is None:
        e = env()
        # automatic mode: a symbolic dim that is 1 in this trace goes too (guarded n == 1),
        # as NumPy would; explicit signatures keep their symbolic dims (as in JAX)
        axes = [i for i, d in enumerate(s) if isinstance(d, int) and d == 1 or
                not isinstance(d, int) and e.can_guard(d, 1) and
                e.decide("==", d, 1, f"squeeze axis {i}")]
    else:
        axes = [normalize_axis(x, len(s)) for x in (axis if isinstance(axis, (tuple, list)) else (axis,))]
        for i in axes:
            if not env().decide("==", s[i], 1, f"squeeze axis {i}"):
                raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one "
                                 f"(axis {i} has size {dim_str(s[i])})")
    if not axes:
        return a
    return view(lax.reshape.bind(a, new_sizes=tuple(d for i, d in enumerate(s) if i not in axes)), a)


def atleast_1d(a):
    a = arr(a)
    return reshape(a, (1,)) if len(shape(a)) == 0 else a


def atleast_2d(a):
    a = arr(a)
    nd = len(shape(a))
    return reshape(a, (1, 1)) if nd == 0 else expand_dims(a, 0) if nd == 1 else a


def concatenate(arrays: Sequence, axis: int | None = 0, dtype=None):
    """``numpy.concatenate``; the joined axis becomes the sum of the inputs' (``n + m``)."""
    xs = [arr(x) for x in arrays]
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs, axis = [ravel(x) for x in xs], 0
    if any(len(shape(x)) == 0 for x in xs):
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    xs = promote(*xs) if dtype is None else [cast(x, dt.canonical(dtype)) for x in xs]
    if len(xs) == 1:
        return xs[0]
    return lax.concatenate.bind(*xs, axis=normalize_axis(axis, len(shape(xs[0]))))


concat = concatenate


def stack(arrays: Sequence, axis: int = 0):
    """``numpy.stack``."""
    xs = [arr(x) for x in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    nd = len(shape(xs[0])) + 1
    ax = normalize_axis(axis, nd)
    return concatenate([expand_dims(x, ax) for x in xs], axis=ax)


def hstack(arrays: Sequence):
    xs = [atleast_1d(x) for x in arrays]
    return concatenate(xs, axis=0 if len(shape(xs[0])) == 1 else 1)


def vstack(arrays: Sequence):
    return concatenate([atleast_2d(x) for x in arrays], axis=0)


def tile(a, reps):
    """``numpy.tile`` with static repetition counts (broadcast then reshape)."""
    a = arr(a)
    reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
    for r in reps:
        if not isinstance(r, (int, np.integer)) or r < 0:
            raise TypeError(f"tile: repetition counts must be non-negative ints, got {reps}")
    nd = max(len(shape(a)), len(reps))
    a = reshape(a, (1,) * (nd - len(shape(a))) + tuple(shape(a)))
    reps = (1,) * (nd - len(reps)) + reps
    s = shape(a)
    b = reshape(a, tuple(x for d in s for x in (1, d)))
    b = broadcast_to(b, tuple(x for r, d in zip(reps, s) for x in (int(r), d)))
    return reshape(b, tuple(int(r) * d for r, d in zip(reps, s)))


def repeat(a, repeats, axis=None):
    """``numpy.repeat`` with a static repetition count."""
    if not isinstance(repeats, (int, np.integer)) or repeats < 0:
        raise TypeError("repeat: only a static non-negative int count is supported "
                        f"(got {type(repeats).__name__})")
    a = arr(a)
    if axis is None:
        a, axis = ravel(a), 0
    ax = normalize_axis(axis, len(shape(a)))
    s = shape(a)
    b = expand_dims(a, ax + 1)
    b = broadcast_to(b, s[:ax + 1] + (int(repeats),) + s[ax + 1:])
    return reshape(b, s[:ax] + (s[ax] * int(repeats),) + s[ax + 1:])


def pad(array, pad_width, mode: str = "constant", constant_values=0):
    """``numpy.pad`` in constant mode; widths may be symbolic."""
    if mode != "constant":
        raise ValueError(f"pad mode {mode!r} is not supported (only 'constant')")
    a = arr(array)
    nd = len(shape(a))
    pw = np.broadcast_to(np.asarray(pad_width, dtype=object), (nd, 2)) if nd else np.zeros((0, 2))
    low = tuple(as_dim(p, "pad width") for p in pw[:, 0])
    high = tuple(as_dim(p, "pad width") for p in pw[:, 1])
    for w in low + high:
        if env().try_prove("<", w, 0):
            raise ValueError("pad widths must be non-negative")
    value = cast(constant_values, dtype_of(a))
    return lax.pad.bind(a, value, low=low, high=high)


def _iota(n_shape, dimension):
    return lax.iota.bind(shape=n_shape, dimension=dimension, dtype=np.dtype("int64"))


def tri(N, M=None, k: int = 0, dtype=float):
    """``numpy.tri``: ones at and below the k-th diagonal."""
    n = as_dim(N)
    m = n if M is None else as_dim(M)
    i, j = _iota((n, m), 0), _iota((n, m), 1)
    mask = less_equal(j, add(i, k)) if k else less_equal(j, i)
    return cast(mask, dt.canonical(dtype))


def _tri_mask(a, k):
    s = shape(a)
    if len(s) < 2:
        raise ValueError("tril/triu need an array of rank >= 2")
    return tri(s[-2], s[-1], k, dtype=bool)


def tril(m, k: int = 0):
    """``numpy.tril``."""
    m = arr(m)
    return where_values(_tri_mask(m, k), m, cast(0, dtype_of(m)))


def triu(m, k: int = 0):
    """``numpy.triu``."""
    m = arr(m)
    return where_values(_tri_mask(m, k - 1), cast(0, dtype_of(m)), m)
