"""Shape and layout primitives: reshape, transpose, broadcast_to, concatenate, slice, pad, iota.

Their params may hold symbolic dims; a backend evaluates them with the bound dim values.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..core import Primitive
from . import ad_util as au
from . import batching
from .complex_parts import by_parts, packable
from ..errors import ShapeError
from ..shapes import dim_str, prod
from .util import one_if_guarded, same_dtype


def _shape_str(s) -> str:
    return "(" + ", ".join(dim_str(d) for d in s) + ")"


def _same(x, **p):
    return x.dtype


# reshape: the element count must be provably preserved
def _reshape_shape(env, x, *, new_sizes):
    env.require_eq(prod(x.shape), prod(new_sizes),
                   f"reshape {_shape_str(x.shape)} -> {_shape_str(new_sizes)}: element counts differ")
    return new_sizes


reshape = Primitive("reshape", shape_rule=_reshape_shape, dtype_rule=_same,
                    impl=lambda x, *, new_sizes: x.reshape(new_sizes), kind="injective",
                    weak_rule=lambda x, **p: x.weak, complex_rule=packable("reshape", lambda new_sizes: dict(new_sizes=tuple(new_sizes) + (2,))))


def _transpose_shape(env, x, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {perm} are not a permutation of {x.ndim} axes")
    return tuple(x.shape[p] for p in perm)


transpose = Primitive("transpose", shape_rule=_transpose_shape, dtype_rule=_same,
                      impl=lambda x, *, perm: np.transpose(x, perm), kind="injective",
                      complex_rule=packable("transpose", lambda perm: dict(perm=tuple(perm) + (len(perm),))))


def _broadcast_to_shape(env, x, *, shape):
    if x.ndim > len(shape):
        raise ShapeError(f"broadcast_to: cannot broadcast {_shape_str(x.shape)} to the smaller "
                         f"rank {_shape_str(shape)}")
    lead = len(shape) - x.ndim
    for i, d in enumerate(x.shape):
        if env.try_prove("==", d, shape[lead + i]) is not True:
            d = one_if_guarded(env, d)          # automatic mode: a symbolic 1 broadcasts
        if isinstance(d, int) and d == 1:
            continue
        env.require_eq(d, shape[lead + i], f"broadcast_to {_shape_str(x.shape)} -> {_shape_str(shape)}, "
                                           f"axis {lead + i}")
    return shape


broadcast_to = Primitive("broadcast_to", shape_rule=_broadcast_to_shape, dtype_rule=_same,
                         impl=lambda x, *, shape: np.broadcast_to(x, shape).copy(), kind="broadcast",
                         weak_rule=lambda x, **p: x.weak, complex_rule=packable("broadcast_to", lambda shape: dict(shape=tuple(shape) + (2,))))


def _concat_shape(env, *xs, axis):
    first = xs[0]
    for x in xs[1:]:
        if x.ndim != first.ndim:
            raise ShapeError(f"concatenate: all inputs need rank {first.ndim}, got {x}")
    out = list(first.shape)
    for i in range(first.ndim):
        if i == axis:
            continue
        for x in xs[1:]:
            out[i] = env.require_eq(out[i], x.shape[i], f"concatenate on axis {axis}: axis {i} differs "
                                                         f"({_shape_str(first.shape)} vs {_shape_str(x.shape)})")
    from ..shapes import normalize
    import sympy
    out[axis] = normalize(sympy.expand(sum((sympy.sympify(x.shape[axis]) for x in xs), sympy.Integer(0))))
    return tuple(out)


concatenate = Primitive("concatenate", shape_rule=_concat_shape,
                        dtype_rule=lambda *xs, axis: same_dtype(*xs, what="concatenate"),
                        impl=lambda *xs, axis: np.concatenate(xs, axis=axis), kind="injective",
                        complex_rule=packable("concatenate", lambda axis: dict(axis=axis) if axis >= 0 else None))


# slice: start, size and (non-zero int) step per axis, already normalised by the numpy layer
def _slice_shape(env, x, *, start, size, step):
    # The numpy layer clamps start/size; here we only reject what is provably out of bounds.
    for ax, (d, b, n, s) in enumerate(zip(x.shape, start, size, step)):
        if env.try_prove(">=", n, 1) is not True:
            continue        # possibly empty (x[0:-1:-1] is n - 1 ... empty at n = 1): no element
        last = b + (n - 1) * s
        for v in (b, last):
            if env.try_prove("<", v, 0) or env.try_prove(">=", v, d):
                raise ShapeError(f"slice axis {ax}: elements {dim_str(b)} .. {dim_str(last)} are out "
                                 f"of bounds for size {dim_str(d)}")
    return tuple(size)


def _slice_impl(x, *, start, size, step):
    idx = []
    for b, n, s in zip(start, size, step):
        if n == 0:
            idx.append(builtins.slice(0, 0))
            continue
        end = b + n * s
        idx.append(builtins.slice(b, end if end >= 0 else None, s))
    return x[tuple(idx)]


slice = Primitive("slice", shape_rule=_slice_shape, dtype_rule=_same, impl=_slice_impl,
                  kind="injective", complex_rule=packable("slice", lambda start, size, step: dict(
                      start=tuple(start) + (0,), size=tuple(size) + (2,), step=tuple(step) + (1,))))


def _pad_shape(env, x, value, *, low, high):
    if value.ndim != 0:
        raise ShapeError("pad: the padding value must be a scalar")
    return tuple(d + lo + hi for d, lo, hi in zip(x.shape, low, high))


pad = Primitive("pad", shape_rule=_pad_shape,
                dtype_rule=lambda x, v, **p: same_dtype(x, v, what="pad"),
                impl=lambda x, v, *, low, high: np.pad(x, list(zip(low, high)), constant_values=v),
                kind="injective", complex_rule=by_parts("pad"))


def _iota_shape(env, *, shape, dimension, dtype):
    return shape


iota = Primitive("iota", shape_rule=_iota_shape, dtype_rule=lambda *, shape, dimension, dtype: dtype,
                 impl=lambda *, shape, dimension, dtype: np.broadcast_to(
                     np.arange(shape[dimension], dtype=dtype).reshape(
                         [-1 if i == dimension else 1 for i in range(len(shape))]), shape).copy(),
                 kind="injective")


# ---------------------------------------------------------------------------------------
# Reverse-mode rules (``Primitive.vjp``, see ``ad_util``): layout ops move the cotangent back
# ---------------------------------------------------------------------------------------

def _slice_vjp(ct, x, *, out, start, size, step):
    """The cotangent in place, zeros around it: a pad for a unit-step slice, the window
    written into zeros (``update_slice``) for a strided one."""
    if any(s != 1 for s in step):
        return (au.bind("update_slice", au.zeros_like(x), ct, start=tuple(start), size=tuple(size),
                        step=tuple(step)),)
    high = tuple(d - b - n for d, b, n in zip(x.type.shape, start, size))
    return (pad.bind(ct, au.const(ct, 0), low=tuple(start), high=high),)


def _concatenate_vjp(ct, *xs, out, axis):
    outs, off = [], 0
    for x in xs:
        n = x.type.shape[axis]
        start = tuple(off if k == axis else 0 for k in range(x.ndim))
        outs.append(slice.bind(ct, start=start, size=tuple(x.type.shape), step=(1,) * x.ndim))
        off = off + n
    return tuple(outs)


def _pad_vjp(ct, x, v, *, out, low, high):
    part = slice.bind(ct, start=tuple(low), size=tuple(x.type.shape), step=(1,) * x.ndim)
    total = au.bind("reduce_sum", ct, axes=tuple(range(ct.ndim)))
    return part, au.bind("sub", total, au.bind("reduce_sum", part, axes=tuple(range(ct.ndim))))


reshape.vjp = lambda ct, x, *, out, new_sizes: (reshape.bind(ct, new_sizes=tuple(x.type.shape)),)
transpose.vjp = lambda ct, x, *, out, perm: (transpose.bind(ct, perm=au.inverse_permutation(perm)),)
broadcast_to.vjp = lambda ct, x, *, out, shape: (au.unbroadcast(ct, x),)
slice.vjp = _slice_vjp
concatenate.vjp = _concatenate_vjp
pad.vjp = _pad_vjp


# ---------------------------------------------------------------------------------------
# Batching rules (``vmap``, see ``batching``): the batch is one more leading axis
# ---------------------------------------------------------------------------------------

def _reshape_batch(args, batched, *, new_sizes):
    x, = args
    return reshape.bind(x, new_sizes=(x.type.shape[0],) + tuple(new_sizes))


def _transpose_batch(args, batched, *, perm):
    return transpose.bind(args[0], perm=(0,) + tuple(p + 1 for p in perm))


def _broadcast_to_batch(args, batched, *, shape):
    x = batching.lift(args[0], len(shape))
    return broadcast_to.bind(x, shape=(x.type.shape[0],) + tuple(shape))


def _concatenate_batch(args, batched, *, axis):
    size = batching.batch_size(args, batched)
    xs = [batching.materialize(x, b, size) for x, b in zip(args, batched)]
    return concatenate.bind(*xs, axis=axis + 1 if axis >= 0 else axis)


def _slice_batch(args, batched, *, start, size, step):
    x, = args
    return slice.bind(x, start=(0,) + tuple(start), size=(x.type.shape[0],) + tuple(size),
                      step=(1,) + tuple(step))


def _pad_batch(args, batched, *, low, high):
    if batched[1]:
        return None                 # a padding value per example: the loop
    return pad.bind(args[0], args[1], low=(0,) + tuple(low), high=(0,) + tuple(high))


reshape.batch = _reshape_batch
transpose.batch = _transpose_batch
broadcast_to.batch = _broadcast_to_batch
concatenate.batch = _concatenate_batch
slice.batch = _slice_batch
pad.batch = _pad_batch
