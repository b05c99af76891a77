"""Gathers and the data-dependent primitives (nonzero, boolean masks, match_cast).

A data-dependent primitive takes its fresh output dim as a param (``count``); the value is
bound when the program runs.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..core import Primitive
from ..errors import ShapeError
from ..shapes import as_dim, dim_str
from .util import broadcast_shapes


def _check_index_dtype(idx, what):
    if not dt.is_int(idx.dtype):
        raise TypeError(f"{what}: indices must be integers, got {idx.dtype}")


def _take_shape(env, x, idx, *, axis):
    _check_index_dtype(idx, "take")
    return x.shape[:axis] + idx.shape + x.shape[axis + 1:]


def _take_impl(x, idx, *, axis):
    return np.take(x, idx, axis=axis)


take = Primitive("take", shape_rule=_take_shape, dtype_rule=lambda x, i, **p: x.dtype,
                 impl=_take_impl, kind="injective")


def _take_along_shape(env, x, idx, *, axis):
    _check_index_dtype(idx, "take_along_axis")
    if x.ndim != idx.ndim:
        raise ShapeError(f"take_along_axis: indices need the rank of the array ({x.ndim}), got {idx}")
    xs = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    js = tuple(1 if i == axis else d for i, d in enumerate(idx.shape))
    out = list(broadcast_shapes(env, [xs, js], "take_along_axis"))
    out[axis] = idx.shape[axis]
    return tuple(out)


take_along_axis = Primitive("take_along_axis", shape_rule=_take_along_shape,
                            dtype_rule=lambda x, i, **p: x.dtype,
                            impl=lambda x, i, *, axis: np.take_along_axis(x, i, axis=axis),
                            kind="injective")


nonzero = Primitive("nonzero", shape_rule=lambda env, x, *, count: [(count,)] * max(x.ndim, 1),
                    dtype_rule=lambda x, *, count: np.dtype("int64"),
                    impl=lambda x, *, count: np.nonzero(np.atleast_1d(x)), kind="data_dependent",
                    multiple_results=True)


def _mask_shape(env, x, mask, *, count):
    if not dt.is_bool(mask.dtype):
        raise TypeError(f"boolean mask must have dtype bool, got {mask.dtype}")
    if mask.ndim > x.ndim:
        raise ShapeError(f"boolean mask of rank {mask.ndim} is too large for an array of rank {x.ndim}")
    for i, (dm, dx) in enumerate(zip(mask.shape, x.shape)):
        env.require_eq(dm, dx, f"boolean mask axis {i}: mask has {dim_str(dm)}, array has {dim_str(dx)}")
    return (count,) + x.shape[mask.ndim:]


boolean_mask = Primitive("boolean_mask", shape_rule=_mask_shape, dtype_rule=lambda x, m, **p: x.dtype,
                         impl=lambda x, m, *, count: x[m], kind="data_dependent")


def _match_cast_shape(env, x, *, shape):
    if x.ndim != len(shape):
        raise ShapeError(f"match_cast: array of rank {x.ndim} ({x}) cannot match a shape of rank {len(shape)}")
    for i, (have, want) in enumerate(zip(x.shape, shape)):
        if env.try_prove("==", have, want) is False:
            raise ShapeError(f"match_cast axis {i}: {dim_str(have)} can never equal {dim_str(want)}")
    return shape


def _match_cast_impl(x, *, shape):
    # Symbolic entries are checked (or bound) by whoever runs the IR; static ones here.
    for i, (have, want) in enumerate(zip(x.shape, shape)):
        if isinstance(want, int) and have != want:
            raise ShapeError(f"match_cast axis {i}: array has {have}, expected {want}")
    return x


match_cast = Primitive("match_cast", shape_rule=_match_cast_shape, dtype_rule=lambda x, **p: x.dtype,
                       impl=_match_cast_impl, kind="data_dependent", weak_rule=lambda x, **p: x.weak)


# ---------------------------------------------------------------------------------------
# Dynamic slices: start indices are values (traced scalars), clamped into range as JAX does
# ---------------------------------------------------------------------------------------

def _check_starts(x, starts, what):
    if len(starts) != x.ndim:
        raise ShapeError(f"{what}: {len(starts)} start indices for an array of rank {x.ndim}")
    for k, s in enumerate(starts):
        if s.ndim != 0 or not dt.is_int(s.dtype):
            raise TypeError(f"{what}: start index {k} must be an integer scalar, got {s}")


def _within(env, small, big, what):
    """Every dim of ``small`` at most the matching dim of ``big`` (proved, or guarded)."""
    for k, (a, b) in enumerate(zip(small, big)):
        if not env.decide("<=", a, b, f"{what} axis {k}"):
            raise ShapeError(f"{what}: size {dim_str(a)} on axis {k} exceeds the array's "
                             f"{dim_str(b)}")


def _clamped(starts, sizes, shape):
    return [min(max(int(s), 0), int(n) - int(m)) for s, m, n in zip(starts, sizes, shape)]


def _dynamic_slice_shape(env, x, *starts, sizes):
    _check_starts(x, starts, "dynamic_slice")
    _within(env, sizes, x.shape, "dynamic_slice")
    return tuple(sizes)


def _dynamic_slice_impl(x, *starts, sizes):
    lo = _clamped(starts, sizes, x.shape)
    return x[tuple(slice(s, s + int(m)) for s, m in zip(lo, sizes))]


dynamic_slice_p = Primitive("dynamic_slice", shape_rule=_dynamic_slice_shape,
                            dtype_rule=lambda x, *s, sizes: x.dtype, impl=_dynamic_slice_impl,
                            kind="injective")


def _dynamic_update_shape(env, x, update, *starts):
    _check_starts(x, starts, "dynamic_update_slice")
    if update.ndim != x.ndim:
        raise ShapeError(f"dynamic_update_slice: update of rank {update.ndim} for an array of "
                         f"rank {x.ndim}")
    _within(env, update.shape, x.shape, "dynamic_update_slice")
    return x.shape


def _dynamic_update_dtype(x, update, *starts):
    if update.dtype != x.dtype:
        raise TypeError(f"dynamic_update_slice: update has dtype {update.dtype}, the array {x.dtype}")
    return x.dtype


def _dynamic_update_impl(x, update, *starts):
    lo = _clamped(starts, update.shape, x.shape)
    out = x.copy()
    out[tuple(slice(s, s + m) for s, m in zip(lo, update.shape))] = update
    return out


dynamic_update_slice_p = Primitive("dynamic_update_slice", shape_rule=_dynamic_update_shape,
                                   dtype_rule=_dynamic_update_dtype, impl=_dynamic_update_impl,
                                   kind="injective")


def dynamic_slice(operand, start_indices, slice_sizes):
    """``jax.lax.dynamic_slice``: ``operand[s0:s0 + n0, ...]`` with start indices that may be
    traced scalars; a start is clamped so the slice stays inside the array."""
    sizes = tuple(as_dim(m, "dynamic_slice slice size") for m in slice_sizes)
    return dynamic_slice_p.bind(operand, *start_indices, sizes=sizes)


def dynamic_update_slice(operand, update, start_indices):
    """``jax.lax.dynamic_update_slice``: ``operand`` with ``update`` written at the (clamped)
    start indices, as a new array."""
    return dynamic_update_slice_p.bind(operand, update, *start_indices)
