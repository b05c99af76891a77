"""Gathers and the data-dependent primitives (nonzero, boolean masks, match_cast).

A data-dependent primitive takes its fresh output dim as a param (``count``); the value is
bound when the program runs.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..core import Primitive, find_trace
from . import ad_util as au
from . import batching
from .complex_parts import by_parts, packable
from ..errors import ShapeError
from ..shapes import as_dim, dim_str, prod
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
                 impl=_take_impl, kind="injective",
                 complex_rule=packable("take", lambda axis: dict(axis=axis) if axis >= 0 else None))


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
                            kind="injective", complex_rule=by_parts("take_along_axis"))


nonzero = Primitive("nonzero", shape_rule=lambda env, x, *, count: [(count,)] * max(x.ndim, 1),
                    dtype_rule=lambda x, *, count: np.dtype("int64"),
                    impl=lambda x, *, count: np.nonzero(np.atleast_1d(x)), kind="data_dependent",
                    multiple_results=True)

# 0, 1, ..., n - 1 for a traced integer scalar n: an array whose length is a fresh run-time
# dim (how while_loop's derivative stacks one carry per iteration of a trip count only the
# run knows)
iota_count_p = Primitive("iota_count", shape_rule=lambda env, n, *, count: (count,),
                         dtype_rule=lambda n, *, count: np.dtype("int64"),
                         impl=lambda n, *, count: np.arange(max(int(n), 0), dtype=np.int64),
                         kind="data_dependent")


def iota_count(n):
    """``arange(n)`` (int64) for an integer scalar ``n`` that may be traced: under a trace its
    length is a fresh run-time dim; a negative ``n`` gives an empty array."""
    ctx = find_trace([n])
    if ctx is None:
        return iota_count_p.impl(np.asarray(n), count=None)
    return iota_count_p.bind(n, count=ctx.env.fresh("iota"))


def _mask_shape(env, x, mask, *, count):
    if not dt.is_bool(mask.dtype):
        raise TypeError(f"boolean mask must have dtype bool, got {mask.dtype}")
    if mask.ndim > x.ndim:
        raise ShapeError(f"boolean mask of rank {mask.ndim} is too large for an array of rank {x.ndim}")
    for i, (dm, dx) in enumerate(zip(mask.shape, x.shape)):
        env.require_eq(dm, dx, f"boolean mask axis {i}: mask has {dim_str(dm)}, array has {dim_str(dx)}")
    return (count,) + x.shape[mask.ndim:]


boolean_mask = Primitive("boolean_mask", shape_rule=_mask_shape, dtype_rule=lambda x, m, **p: x.dtype,
                         impl=lambda x, m, *, count: x[m], kind="data_dependent",
                         complex_rule=by_parts("boolean_mask"))


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
                       impl=_match_cast_impl, kind="data_dependent", weak_rule=lambda x, **p: x.weak,
                       complex_rule=by_parts("match_cast"))


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
                            kind="injective", complex_rule=by_parts("dynamic_slice"))


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
                                   kind="injective", complex_rule=by_parts("dynamic_update_slice"))


def dynamic_slice(operand, start_indices, slice_sizes):
    """``jax.lax.dynamic_slice``: ``operand[s0:s0 + n0, ...]`` with start indices that may be
    traced scalars; a start is clamped so the slice stays inside the array."""
    sizes = tuple(as_dim(m, "dynamic_slice slice size") for m in slice_sizes)
    return dynamic_slice_p.bind(operand, *start_indices, sizes=sizes)


def dynamic_update_slice(operand, update, start_indices):
    """``jax.lax.dynamic_update_slice``: ``operand`` with ``update`` written at the (clamped)
    start indices, as a new array."""
    return dynamic_update_slice_p.bind(operand, update, *start_indices)


# ---------------------------------------------------------------------------------------
# Index updates (``x.at[idx]``, ``x[idx] = v``): a strided-window update and a scatter
# ---------------------------------------------------------------------------------------

def _update_slice_shape(env, x, update, *, start, size, step):
    if update.ndim != x.ndim:
        raise ShapeError(f"update_slice: update of rank {update.ndim} for an array of rank {x.ndim}")
    for ax, (have, want) in enumerate(zip(update.shape, size)):
        env.require_eq(have, want, f"update_slice axis {ax}: the update has {dim_str(have)} "
                                   f"elements, the window {dim_str(want)}")
    return x.shape


def _same_dtype_update(what, update_pos):
    def rule(x, *rest, **params):
        update = rest[update_pos - 1]
        if update.dtype != x.dtype:
            raise TypeError(f"{what}: the update has dtype {update.dtype}, the array {x.dtype}")
        return x.dtype
    return rule


def _update_slice_impl(x, update, *, start, size, step):
    out = x.copy()
    idx = []
    for b, n, s in zip(start, size, step):
        end = b + n * s
        idx.append(slice(b, end if end >= 0 else None, s) if n else slice(0, 0))
    out[tuple(idx)] = update
    return out


update_slice = Primitive("update_slice", shape_rule=_update_slice_shape,
                         dtype_rule=_same_dtype_update("update_slice", 1), impl=_update_slice_impl,
                         kind="injective", weak_rule=lambda x, u, **p: x.weak,
                         complex_rule=by_parts("update_slice"))
update_slice.__doc__ = """``x`` with the strided window ``slice(x, start, size, step)`` replaced by
``update`` (of the window's shape): the inverse of ``slice``, with the same params."""

SCATTER_MODES = {"set": None, "add": np.add, "mul": np.multiply, "min": np.minimum,
                 "max": np.maximum}
OUT_OF_BOUNDS = ("drop", "clip", "error")


def _scatter_shape(env, x, idx, updates, *, axis, mode, oob):
    _check_index_dtype(idx, "scatter")
    if mode not in SCATTER_MODES or oob not in OUT_OF_BOUNDS:
        raise ValueError(f"scatter: mode must be one of {list(SCATTER_MODES)} and oob one of "
                         f"{list(OUT_OF_BOUNDS)}, got {mode!r}, {oob!r}")
    if dt.is_complex(x.dtype) and mode not in ("set", "add"):
        # a complex product (or order) mixes the parts: two real scatters cannot apply it
        # once per duplicate index
        raise TypeError(f"scatter: mode {mode!r} is not supported for complex arrays ({x.dtype}); "
                        f"only set and add are")
    want = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if updates.ndim != len(want):
        raise ShapeError(f"scatter: updates of rank {updates.ndim} for indices {idx} into axis "
                         f"{axis} of {x}; expected shape ({', '.join(dim_str(d) for d in want)})")
    for ax, (have, w) in enumerate(zip(updates.shape, want)):
        env.require_eq(have, w, f"scatter axis {ax}: the updates have {dim_str(have)}, expected "
                                f"{dim_str(w)}")
    return x.shape


def _scatter_impl(x, idx, updates, *, axis, mode, oob):
    d = x.shape[axis]
    j = idx.astype(np.int64)
    if oob == "error" and j.size and (j.min() < -d or j.max() >= d):
        bad = j.min() if j.min() < -d else j.max()
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {d}")
    j = np.where(j < 0, j + d, j)
    if oob == "clip":
        j = np.clip(j, 0, d - 1)
    keep = (j >= 0) & (j < d)
    out = x.copy()
    r = idx.ndim
    dst = np.moveaxis(out, axis, 0)                                  # a view of ``out``
    src = np.moveaxis(updates, list(range(axis, axis + r)), list(range(r)))[keep]
    if SCATTER_MODES[mode] is None:
        for k, jk in enumerate(j[keep]):    # one after the other: the last duplicate wins
            dst[jk] = src[k]
    else:
        SCATTER_MODES[mode].at(dst, j[keep], src)
    return out


scatter = Primitive("scatter", shape_rule=_scatter_shape, dtype_rule=_same_dtype_update("scatter", 2),
                    impl=_scatter_impl, kind="opaque", weak_rule=lambda x, i, u, **p: x.weak,
                    complex_rule=by_parts("scatter"))
scatter.__doc__ = """``x`` with ``updates`` combined (``mode``: set, add, mul, min, max) into the
positions ``idx`` names along ``axis``, one index after the other (duplicates accumulate; for
``set`` the last one wins).  ``updates`` has ``take(x, idx, axis)``'s shape.  Negative indices
count from the end; others out of range are dropped (``oob="drop"``, JAX's default), clamped
(``"clip"``) or an IndexError (``"error"``, NumPy's)."""


# ---------------------------------------------------------------------------------------
# Reverse-mode rules (``Primitive.vjp``, see ``ad_util``): a gather's cotangent is scattered
# back (added: an index taken twice takes both cotangents), a window's is written back into
# zeros, an update's is read out of the window
# ---------------------------------------------------------------------------------------

def _take_vjp(ct, x, idx, *, out, axis):
    return scatter.bind(au.zeros_like(x), idx, ct, axis=axis, mode="add", oob="error"), None


def _take_along_vjp(ct, x, idx, *, out, axis):
    """Each element taken takes its cotangent back, added (an index taken twice takes
    both): the axis moved last and every other axis merged into rows, so one flat scatter
    of ``row * n + idx`` adds them, then the axes ``x`` was broadcast along are summed."""
    shape, nd = tuple(out.type.shape), x.ndim
    n = x.type.shape[axis]
    perm = tuple(k for k in range(nd) if k != axis) + (axis,)
    last = lambda t: au.bind("transpose", t, perm=perm) if axis != nd - 1 else t     # noqa: E731
    j = last(au.bind("broadcast_to", idx, shape=shape))
    nn = au.dim_scalar(n, j.dtype)
    j = au.bind("select", au.bind("lt", j, au.const(j, 0)), au.bind("add", j, nn), j)
    moved = tuple(j.type.shape)
    count = prod(moved[:-1])
    row = au.bind("reshape", au.bind("iota", shape=(count,), dimension=0, dtype=j.dtype),
                  new_sizes=moved[:-1] + (1,))
    flat_idx = au.bind("reshape", au.bind("add", au.bind("mul", row, nn), j), new_sizes=(count * moved[-1],))
    flat_ct = au.bind("reshape", last(ct), new_sizes=(count * moved[-1],))
    zeros = au.bind("broadcast_to", au.const(ct, 0), shape=(count * n,))
    g = scatter.bind(zeros, flat_idx, flat_ct, axis=0, mode="add", oob="error")
    g = au.bind("reshape", g, new_sizes=moved[:-1] + (n,))
    if axis != nd - 1:
        g = au.bind("transpose", g, perm=au.inverse_permutation(perm))
    return au.unbroadcast(g, x), None


def _boolean_mask_vjp(ct, x, mask, *, out, count):
    """The selected elements take their cotangents back in place, the others none: the
    mask's axes merged, the positions it selects (``nonzero``, of the same run-time count)
    scattered into zeros."""
    shape = tuple(x.type.shape)
    k = mask.ndim
    rows = prod(shape[:k])
    pos = nonzero.bind(au.bind("reshape", mask, new_sizes=(rows,)), count=count)[0]
    zeros = au.bind("broadcast_to", au.const(ct, 0), shape=(rows,) + shape[k:])
    g = scatter.bind(zeros, pos, ct, axis=0, mode="add", oob="error")
    return au.bind("reshape", g, new_sizes=shape), None


def _dynamic_slice_vjp(ct, x, *starts, out, sizes):
    return (dynamic_update_slice_p.bind(au.zeros_like(x), ct, *starts),) + (None,) * len(starts)


def _dynamic_update_vjp(ct, x, update, *starts, out):
    sizes = tuple(update.type.shape)
    return (dynamic_update_slice_p.bind(ct, au.zeros_like(update), *starts),
            dynamic_slice_p.bind(ct, *starts, sizes=sizes)) + (None,) * len(starts)


def _update_slice_vjp(ct, x, update, *, out, start, size, step):
    window = au.bind("slice", ct, start=start, size=size, step=step)
    return update_slice.bind(ct, au.zeros_like(update), start=start, size=size, step=step), window


def _scatter_vjp(ct, x, idx, updates, *, out, axis, mode, oob):
    """``add``: the cotangent passes to ``x`` whole and is gathered for the updates;
    ``set``: ``x``'s written positions take none, the updates theirs (an index written
    twice gives each write the cotangent, as JAX's rule does); ``mul``: ``x``'s is scaled
    by the product of the updates at its position, an update's by ``x`` and the other
    updates there (zeros among them counted apart: no division by zero); ``min``/``max``:
    shared equally among ``x`` and the updates that attain the result (JAX's rule for
    ties, as for reductions).  Clipped indices are clamped first; the update of an index
    out of range (dropped, ``oob="drop"``) takes none."""
    d = au.dim_scalar(x.type.shape[axis], idx.dtype)
    if oob == "clip":           # clamped once, the indices are all in range
        j = au.bind("select", au.bind("lt", idx, au.const(idx, 0)), au.bind("add", idx, d), idx)
        idx = au.bind("max", au.bind("min", j, au.bind("sub", d, au.const(j, 1))), au.const(j, 0))
        oob = "error"
    inside = au.bind("and", au.bind("ge", idx, au.bind("neg", d)), au.bind("lt", idx, d)) \
        if oob == "drop" else None
    mask = None if inside is None else au.bind(
        "reshape", inside, new_sizes=(1,) * axis + tuple(idx.type.shape) + (1,) * (x.ndim - axis - 1))

    def gather(v):              # v at each update's position (zero for a dropped update)
        if inside is None:
            return take.bind(v, idx, axis=axis)
        got = take.bind(v, au.bind("select", inside, idx, au.const(idx, 0)), axis=axis)
        return au.bind("select", mask, got, au.const(got, 0))

    def spread(v):              # updates-shaped v added up at their positions
        return scatter.bind(au.zeros_like(x), idx, v, axis=axis, mode="add", oob=oob)
    if mode == "add":
        return ct, None, gather(ct)
    if mode == "set":
        return scatter.bind(ct, idx, au.zeros_like(updates), axis=axis, mode="set", oob=oob), None, gather(ct)
    if mode == "mul":
        zero = au.bind("eq", updates, au.const(updates, 0))
        f = lambda t: au.bind("convert", t, dtype=updates.dtype, weak=False)     # noqa: E731
        # at each position: the product of its nonzero updates, and how many were zero
        products = scatter.bind(au.bind("broadcast_to", au.const(x, 1), shape=tuple(x.type.shape)), idx,
                                au.bind("select", zero, au.const(updates, 1), updates), axis=axis,
                                mode="mul", oob=oob)
        zeros = gather(spread(f(zero)))
        nz = gather(products)
        others = au.bind("select", zero, au.bind("select", au.bind("eq", zeros, au.const(zeros, 1)), nz,
                                                   au.const(nz, 0)),
                         au.bind("select", au.bind("eq", zeros, au.const(zeros, 0)),
                                 au.bind("div", nz, au.bind("select", zero, au.const(updates, 1), updates)),
                                 au.const(nz, 0)))
        gx = scatter.bind(ct, idx, updates, axis=axis, mode="mul", oob=oob)
        return gx, None, au.bind("mul", gather(au.bind("mul", ct, x)), others)
    if mode in ("min", "max"):
        f = lambda t: au.bind("convert", t, dtype=x.dtype, weak=False)           # noqa: E731
        x_hit = f(au.bind("eq", x, out))
        u_hit = f(au.bind("eq", updates, gather(out)))
        if mask is not None:
            u_hit = au.bind("select", mask, u_hit, au.const(u_hit, 0))
        share = au.bind("div", ct, au.bind("add", x_hit, spread(u_hit)))
        return au.bind("mul", share, x_hit), None, au.bind("mul", gather(share), u_hit)
    raise NotImplementedError(f"grad of a scatter with mode={mode!r} is not implemented")


take.vjp = _take_vjp
take_along_axis.vjp = _take_along_vjp
boolean_mask.vjp = _boolean_mask_vjp
match_cast.vjp = lambda ct, x, *, out, shape: (match_cast.bind(ct, shape=tuple(x.type.shape)),)
dynamic_slice_p.vjp = _dynamic_slice_vjp
dynamic_update_slice_p.vjp = _dynamic_update_vjp
update_slice.vjp = _update_slice_vjp
scatter.vjp = _scatter_vjp


# ---------------------------------------------------------------------------------------
# Batching rules (``vmap``, see ``batching``); the others run once per example
# ---------------------------------------------------------------------------------------

def _take_batch(args, batched, *, axis):
    """A batched array gathered by shared indices, or a shared array (a table) gathered by
    batched indices; both batched: each example's indices gathered from its own array
    (``take_along_axis``), the gathered axis moved next to the batch first."""
    x, idx = args
    if batched[0] and batched[1]:
        if axis != 0:           # the gathered axis moved next to the batch; the result back
            xperm = (0, axis + 1) + tuple(k for k in range(1, x.ndim) if k != axis + 1)
            out = _take_batch([au.bind("transpose", x, perm=xperm), idx], batched, axis=0)
            r = idx.ndim - 1
            perm = (0,) + tuple(range(1 + r, 1 + r + axis)) + tuple(range(1, 1 + r)) + \
                tuple(range(1 + r + axis, out.ndim))
            return au.bind("transpose", out, perm=perm)
        size, per = x.type.shape[0], tuple(idx.type.shape[1:])
        flat = au.bind("reshape", idx, new_sizes=(size, _count(per)) + (1,) * (x.ndim - 2))
        out = take_along_axis.bind(x, flat, axis=1)
        return au.bind("reshape", out, new_sizes=(size,) + per + tuple(x.type.shape[2:]))
    if batched[0]:
        return take.bind(x, idx, axis=axis + 1)
    out = take.bind(x, idx, axis=axis)        # the batch lands where the indices go
    return au.bind("transpose", out, perm=(axis,) + tuple(k for k in range(out.ndim) if k != axis))


def _take_along_batch(args, batched, *, axis):
    """Both operands with the batch leading (a shared one as a batch of 1: broadcast)."""
    ops = [x if b else au.bind("reshape", x, new_sizes=(1,) + tuple(x.type.shape))
           for x, b in zip(args, batched)]
    return take_along_axis.bind(*ops, axis=axis + 1 if axis >= 0 else axis)


take.batch = _take_batch
take_along_axis.batch = _take_along_batch


_I64 = np.dtype("int64")


def _window_starts(starts, sizes, shape, size):
    """Per example (a (batch,) int64 each), the dynamic starts clamped as ``dynamic_slice``
    clamps them: into ``[0, shape - sizes]``."""
    out = []
    for s, m, n in zip(starts, sizes, shape):
        s = au.bind("convert", s, dtype=_I64, weak=False)
        hi = au.bind("sub", au.dim_scalar(n, _I64), au.dim_scalar(m, _I64))
        s = au.bind("max", au.bind("min", s, hi), au.const(s, 0))
        out.append(s if s.ndim else au.bind("broadcast_to", s, shape=(size,)))
    return out


def _along(idx, axis: int, rank: int):
    """``idx`` (batch, m) shaped to index ``axis`` of a batched array of ``rank`` dims."""
    shape = [idx.type.shape[0]] + [1] * (rank - 1)
    shape[axis] = idx.type.shape[1]
    return au.bind("reshape", idx, new_sizes=tuple(shape))


def _dynamic_slice_batch(args, batched, *, sizes):
    """Shared starts: one more axis sliced whole.  Starts per example: the axes they move
    on are gathered (``take_along_axis``) from each example's clamped start."""
    size = batching.batch_size(args, batched)
    x = batching.materialize(args[0], batched[0], size)
    starts, moving = args[1:], batched[1:]
    shape = x.type.shape[1:]
    zero = np.zeros((), np.int64)
    out = dynamic_slice_p.bind(x, zero, *[zero if f else s for s, f in zip(starts, moving)],
                               sizes=(size,) + tuple(n if f else m for n, m, f in zip(shape, sizes, moving)))
    firsts = _window_starts([s for s, f in zip(starts, moving) if f],
                            [m for m, f in zip(sizes, moving) if f], [n for n, f in zip(shape, moving) if f], size)
    for k in [k for k, f in enumerate(moving) if f]:
        s = firsts.pop(0)
        idx = au.bind("add", au.bind("reshape", s, new_sizes=(size, 1)),
                      au.bind("iota", shape=(1, sizes[k]), dimension=1, dtype=_I64))
        out = take_along_axis.bind(out, _along(idx, k + 1, out.ndim), axis=k + 1)
    return out


def _dynamic_update_batch(args, batched):
    """Shared starts: one more axis updated whole.  Starts per example: each example's
    window, found by its clamped starts, takes the update gathered to the array's shape."""
    size = batching.batch_size(args, batched)
    x = batching.materialize(args[0], batched[0], size)
    upd = batching.materialize(args[1], batched[1], size)
    starts = args[2:]
    zero = np.zeros((), np.int64)
    if not any(batched[2:]):
        return dynamic_update_slice_p.bind(x, upd, zero, *starts)
    shape, sizes = x.type.shape[1:], upd.type.shape[1:]
    firsts = _window_starts(starts, sizes, shape, size)
    keep, gathered = None, upd
    for k, (s, m, n) in enumerate(zip(firsts, sizes, shape)):
        rel = au.bind("sub", au.bind("iota", shape=(1, n), dimension=1, dtype=_I64),
                      au.bind("reshape", s, new_sizes=(size, 1)))                    # (batch, n)
        inside = au.bind("and", au.bind("ge", rel, au.const(rel, 0)),
                         au.bind("lt", rel, au.dim_scalar(m, _I64)))
        idx = au.bind("max", au.bind("min", rel, au.bind("sub", au.dim_scalar(m, _I64), au.const(rel, 1))),
                      au.const(rel, 0))
        gathered = take_along_axis.bind(gathered, _along(idx, k + 1, x.ndim), axis=k + 1)
        inside = _along(inside, k + 1, x.ndim)
        keep = inside if keep is None else au.bind("and", keep, inside)
    return au.bind("select", keep, gathered, x)


def _update_slice_batch(args, batched, *, start, size, step):
    n = batching.batch_size(args, batched)
    x, upd = (batching.materialize(a, b, n) for a, b in zip(args, batched))
    return update_slice.bind(x, upd, start=(0,) + tuple(start), size=(n,) + tuple(size),
                             step=(1,) + tuple(step))


def _scatter_batch(args, batched, *, axis, mode, oob):
    """Shared indices: a scatter along the next axis.  Indices per example into axis 0:
    the examples' axes laid end to end (each example's indices offset by its start), one
    scatter, reshaped back; into another axis, the same with that axis moved next to the
    batch (and the updates' index axes with it) and moved back."""
    size = batching.batch_size(args, batched)
    x = batching.materialize(args[0], batched[0], size)
    upd = batching.materialize(args[2], batched[2], size)
    idx = args[1]
    if not batched[1]:
        return scatter.bind(x, idx, upd, axis=axis + 1, mode=mode, oob=oob)
    if axis != 0:               # the scattered axis moved next to the batch, and back
        r = idx.ndim - 1
        xperm = (0, axis + 1) + tuple(k for k in range(1, x.ndim) if k != axis + 1)
        block = tuple(range(1 + axis, 1 + axis + r))
        uperm = (0,) + block + tuple(k for k in range(1, upd.ndim) if k not in block)
        out = _scatter_batch([au.bind("transpose", x, perm=xperm), idx, au.bind("transpose", upd, perm=uperm)],
                             [True, True, True], axis=0, mode=mode, oob=oob)
        return au.bind("transpose", out, perm=au.inverse_permutation(xperm))
    n = x.type.shape[1]
    j = au.bind("convert", idx, dtype=_I64, weak=False)
    d = au.dim_scalar(n, _I64)
    j = au.bind("select", au.bind("lt", j, au.const(j, 0)), au.bind("add", j, d), j)
    if oob == "clip":
        j = au.bind("max", au.bind("min", j, au.bind("sub", d, au.const(j, 1))), au.const(j, 0))
    else:                    # out of range: past the end of all the examples (dropped, or the error)
        total = au.bind("mul", d, au.dim_scalar(size, _I64))
        inside = au.bind("and", au.bind("ge", j, au.const(j, 0)), au.bind("lt", j, d))
        j = au.bind("select", inside, j, au.bind("broadcast_to", total, shape=tuple(j.type.shape)))
    offset = au.bind("mul", au.bind("iota", shape=(size,) + (1,) * (j.ndim - 1), dimension=0, dtype=_I64), d)
    j = au.bind("add", j, offset)
    rest = tuple(x.type.shape[2:])
    per = tuple(idx.type.shape[1:])
    flat = au.bind("scatter", au.bind("reshape", x, new_sizes=(size * n,) + rest),
                   au.bind("reshape", j, new_sizes=(size * _count(per),)),
                   au.bind("reshape", upd, new_sizes=(size * _count(per),) + rest),
                   axis=0, mode=mode, oob=oob)
    return au.bind("reshape", flat, new_sizes=tuple(x.type.shape))


def _count(dims) -> object:
    out = 1
    for d in dims:
        out = out * d
    return out


dynamic_slice_p.batch = _dynamic_slice_batch
dynamic_update_slice_p.batch = _dynamic_update_batch
update_slice.batch = _update_slice_batch
scatter.batch = _scatter_batch
